package postgres

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"sync"

	"github.com/once-run/once/internal/sqlstore"
)

// The task index (store.TaskLister) is internal/sqlstore's: the leases table from a name on. A
// PostgreSQL column compares in its collation, the database's unless given, and a page of tasks is
// in byte order: TaskOrder reads which collation the leases' task column has.

var _ sqlstore.TaskOrderer = (*dialect)(nil)

// taskCollationSQL reads the provider and locale of the collation of $1's task column: the
// database's when the column has the default one (pg_database has datlocprovider since
// PostgreSQL 15; before, every database collation is libc's).
const taskCollationSQL = `SELECT
	CASE WHEN c.oid = 100 THEN coalesce(to_jsonb(d) ->> 'datlocprovider', 'c') ELSE c.collprovider::text END,
	CASE WHEN c.oid = 100 THEN d.datcollate::text ELSE coalesce(c.collcollate::text, '') END
	FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation JOIN pg_database d ON d.datname = current_database()
	WHERE a.attrelid = to_regclass($1) AND a.attname = 'task'`

// byteLocale matches the libc locales whose collation is byte order (C.UTF-8: code point order,
// the same as UTF-8's byte order).
var byteLocale = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(C|POSIX|C\.[Uu][Tt][Ff]-?8)$`) })

// TaskOrder (sqlstore.TaskOrderer): the task column itself when its collation is byte order (a
// database created with LC_COLLATE C, C.UTF-8 or POSIX, or the builtin provider), otherwise the
// column in the "C" collation, which no index of the table has: a page then reads the whole table
// (one row per task) and keeps the first rows.
func (d *dialect) TaskOrder(ctx context.Context, db *sql.DB, leases string) (string, error) {
	var provider, locale string
	err := db.QueryRowContext(ctx, taskCollationSQL, leases).Scan(&provider, &locale)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return `task COLLATE "C"`, nil // right whatever the collation
	case err != nil:
		return "", err
	case byteOrder(provider, locale):
		return "task", nil
	}
	return `task COLLATE "C"`, nil
}

// byteOrder reports whether a collation of provider (pg_collation.collprovider: b builtin, c libc,
// i ICU) and locale compares text byte for byte.
func byteOrder(provider, locale string) bool {
	return provider == "b" || provider == "c" && byteLocale().MatchString(locale)
}
