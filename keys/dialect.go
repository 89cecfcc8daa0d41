package keys

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Dialect names a SQL dialect.
type Dialect string

// Dialects.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql" // MySQL 8 and MariaDB 10.5+
	SQLite   Dialect = "sqlite"
)

// DefaultTable is the keys table used when Options.Table is empty.
const DefaultTable = "once_keys"

// ParseDialect accepts postgres (postgresql, pgx), mysql (mariadb) and sqlite (sqlite3).
func ParseDialect(s string) (Dialect, error) {
	switch strings.ToLower(s) {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return "", fmt.Errorf("keys: unknown dialect %q: use postgres, mysql or sqlite", s)
}

// ValidateTable checks a table name: 1 to 50 letters, digits and underscores, not starting with a
// digit, optionally qualified by a schema (or database) of the same form. Names are used unquoted.
// (Written out rather than a regexp: a package-level regexp compiles at every start of the once
// binary, which imports this package.)
func ValidateTable(name string) error {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	if qualified && !identifier(schema) || !identifier(table) {
		return fmt.Errorf("keys: table name %q: use letters, digits and underscores (at most 50, optionally schema.table)", name)
	}
	return nil
}

// identifier reports whether s is 1 to 50 of [A-Za-z0-9_], not starting with a digit.
func identifier(s string) bool {
	if len(s) == 0 || len(s) > 50 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Schema returns the DDL that Ensure runs for dialect and table (empty table: DefaultTable): the
// keys table and table+"_checkpoints", as statements ending in ";", for users who manage their own
// migrations.
func Schema(dialect Dialect, table string) (string, error) {
	d, err := dialectOf(dialect)
	if err != nil {
		return "", err
	}
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return "", err
	}
	return strings.Join(d.ddl(table, table+"_checkpoints"), ";\n\n") + ";\n", nil
}

type dialect interface {
	ddl(table, ckpt string) []string
	// claim inserts chunk (sorted, unique) and reports which were new; fps is empty or parallel.
	claim(ctx context.Context, k *Keys, tx Execer, scope string, chunk, fps []string, now int64) ([]bool, error)
	fingerprints(ctx context.Context, k *Keys, tx Execer, scope string, chunk []string) (map[string]string, error)
	// rebind turns ? placeholders into the dialect's.
	rebind(q string) string
	upsertCheckpoint(ckpt string) string
}

func dialectOf(d Dialect) (dialect, error) {
	switch d {
	case Postgres:
		return pgDialect{}, nil
	case MySQL:
		return myDialect{}, nil
	case SQLite:
		return liteDialect{}, nil
	case "":
		return nil, fmt.Errorf("keys: no dialect: set Options.Dialect to keys.Postgres, keys.MySQL or keys.SQLite")
	}
	_, err := ParseDialect(string(d))
	return nil, err
}

// readKeys collects the first column of rows.
func readKeys(rows Rows, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k string
		var f *string
		if err := rows.Scan(&k, &f); err != nil {
			return nil, err
		}
		if f != nil {
			m[k] = *f
		} else {
			m[k] = ""
		}
	}
	return m, rows.Err()
}

// readNew marks the keys of chunk (sorted, unique) that rows (one column: a key of chunk) return.
// A binary search per returned key: no map of the batch.
func readNew(chunk []string, rows Rows, err error) ([]bool, int, error) {
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := make([]bool, len(chunk))
	n := 0
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, 0, err
		}
		i := sort.SearchStrings(chunk, key)
		if i == len(chunk) || chunk[i] != key {
			return nil, 0, fmt.Errorf("the database returned key %s, which this batch does not hold", quote(key))
		}
		if !out[i] {
			out[i] = true
			n++
		}
	}
	return out, n, rows.Err()
}

// jsonArray appends chunk as a JSON array of strings (pairs with fps when fps is not empty). Keys,
// fingerprints and scopes are validated (valid UTF-8, no control characters), so only '"' and '\\'
// need escaping.
func jsonArray(b []byte, chunk, fps []string) []byte {
	b = append(b, '[')
	for i, key := range chunk {
		if i > 0 {
			b = append(b, ',')
		}
		if len(fps) == 0 {
			b = jsonString(b, key)
			continue
		}
		b = append(b, '[')
		b = jsonString(b, key)
		b = append(b, ',')
		b = jsonString(b, fps[i])
		b = append(b, ']')
	}
	return append(b, ']')
}

func jsonString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// ---- PostgreSQL: one INSERT … SELECT FROM unnest(array) … RETURNING per batch.

type pgDialect struct{}

func (pgDialect) ddl(t, c string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
  scope       text   NOT NULL,
  ikey        text   NOT NULL,
  fingerprint text,
  created_ms  bigint NOT NULL,
  PRIMARY KEY (scope, ikey)
)`,
		`CREATE TABLE IF NOT EXISTS ` + c + ` (
  task       text   NOT NULL,
  slot       text   NOT NULL,
  value      text   NOT NULL,
  updated_ms bigint NOT NULL,
  PRIMARY KEY (task, slot)
)`,
	}
}

func (pgDialect) rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (pgDialect) claim(ctx context.Context, k *Keys, tx Execer, scope string, chunk, fps []string, now int64) ([]bool, error) {
	var rows Rows
	var err error
	if len(fps) == 0 {
		q := k.stmt(stmtKey{kind: "claim"}, func() string {
			return `INSERT INTO ` + k.table + ` (scope, ikey, created_ms) SELECT $1, u.k, $3 FROM unnest($2::text[]) AS u(k)` +
				` ON CONFLICT (scope, ikey) DO NOTHING RETURNING ikey`
		})
		rows, err = tx.Query(ctx, q, scope, chunk, now)
	} else {
		q := k.stmt(stmtKey{kind: "claim", fp: true}, func() string {
			return `INSERT INTO ` + k.table + ` (scope, ikey, fingerprint, created_ms) SELECT $1, u.k, NULLIF(u.f, ''), $4` +
				` FROM unnest($2::text[], $3::text[]) AS u(k, f) ON CONFLICT (scope, ikey) DO NOTHING RETURNING ikey`
		})
		rows, err = tx.Query(ctx, q, scope, chunk, fps, now)
	}
	out, _, err := readNew(chunk, rows, err)
	return out, err
}

func (pgDialect) fingerprints(ctx context.Context, k *Keys, tx Execer, scope string, chunk []string) (map[string]string, error) {
	return readKeys(tx.Query(ctx, `SELECT ikey, fingerprint FROM `+k.table+` WHERE scope = $1 AND ikey = ANY($2::text[])`, scope, chunk))
}

func (pgDialect) upsertCheckpoint(c string) string {
	return `INSERT INTO ` + c + ` (task, slot, value, updated_ms) VALUES ($1, $2, $3, $4)` +
		` ON CONFLICT (task, slot) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms`
}

// ---- SQLite: one INSERT OR IGNORE … SELECT FROM json_each(batch) … RETURNING per batch.

type liteDialect struct{}

func (liteDialect) ddl(t, c string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
  scope       TEXT    NOT NULL,
  ikey        TEXT    NOT NULL,
  fingerprint TEXT,
  created_ms  INTEGER NOT NULL,
  PRIMARY KEY (scope, ikey)
) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS ` + c + ` (
  task       TEXT    NOT NULL,
  slot       TEXT    NOT NULL,
  value      TEXT    NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (task, slot)
) WITHOUT ROWID`,
	}
}

func (liteDialect) rebind(q string) string { return q }

func (liteDialect) claim(ctx context.Context, k *Keys, tx Execer, scope string, chunk, fps []string, now int64) ([]bool, error) {
	// One short constant statement that reads the batch from a JSON array: SQLite parses and plans
	// it in microseconds, where a 1,000-row VALUES list costs more to compile than to run.
	//
	// OR IGNORE rather than ON CONFLICT DO NOTHING: the NOT NULL columns would otherwise make the
	// statement one that may abort, and inside a transaction SQLite then copies every page it
	// changes into a statement journal (a temporary file) first, about one page per key of a batch
	// of random keys: 30-40 % of a claim's time. The values are never NULL (a validated scope, the
	// strings of a JSON array, a time), and the table has no CHECK or foreign key, so OR IGNORE can
	// only skip a duplicate key, as DO NOTHING did; RETURNING still lists only the inserted rows.
	q := k.stmt(stmtKey{kind: "claim", fp: len(fps) > 0}, func() string {
		if len(fps) == 0 {
			return `INSERT OR IGNORE INTO ` + k.table + ` (scope, ikey, fingerprint, created_ms) SELECT ?1, j.value, NULL, ?2` +
				` FROM json_each(?3) AS j RETURNING ikey`
		}
		return `INSERT OR IGNORE INTO ` + k.table + ` (scope, ikey, fingerprint, created_ms)` +
			` SELECT ?1, json_extract(j.value, '$[0]'), NULLIF(json_extract(j.value, '$[1]'), ''), ?2` +
			` FROM json_each(?3) AS j RETURNING ikey`
	})
	if k.liteOld.Load() {
		return liteProbe(ctx, k, tx, q, scope, chunk, fps, now)
	}
	rows, err := tx.Query(ctx, q, scope, now, string(jsonArray(nil, chunk, fps)))
	out, n, err := readNew(chunk, rows, err)
	if err == nil {
		k.liteOld.Store(n == 0)
	}
	return out, err
}

// liteProbe claims a batch expected to be all old, because the last batch of k was: an INSERT …
// RETURNING copies every row of its SELECT into a temporary table before inserting any (SQLite runs
// RETURNING as a trigger, and a trigger makes INSERT … SELECT materialize its rows), then tests each
// key; a plain SELECT of the keys missing from the table tests them without the copy, and when none
// is missing, no INSERT runs: CPU 4.17 → 3.24 s per 1M all-old keys (docs/keys.md). The missing
// keys, if any, go through the INSERT … RETURNING q as usual, so which keys are new is decided as
// before.
//
// A no-op write comes first, so the batch takes SQLite's write lock before its first read, as the
// INSERT did: in a deferred transaction the SELECT would otherwise fix a read snapshot that the
// INSERT could not write on while or after another writer held the lock (SQLITE_BUSY at once, or
// SQLITE_BUSY_SNAPSHOT, where the INSERT alone waits for the lock and then sees the other writer's
// keys). In a transaction that holds the
// lock, keys the SELECT finds stay there until it ends (this transaction is the only writer); out of
// one (autocommit), a key found was committed when the SELECT ran, and a key committed between the
// SELECT and the INSERT is skipped by the INSERT and reported old.
func liteProbe(ctx context.Context, k *Keys, tx Execer, q, scope string, chunk, fps []string, now int64) ([]bool, error) {
	lock := k.stmt(stmtKey{kind: "lock"}, func() string {
		return `UPDATE ` + k.table + ` SET created_ms = created_ms WHERE 0`
	})
	if _, err := tx.Exec(ctx, lock); err != nil {
		return nil, err
	}
	probe := k.stmt(stmtKey{kind: "probe"}, func() string {
		return `SELECT j.key FROM json_each(?1) AS j LEFT JOIN ` + k.table + ` AS t ON t.scope = ?2 AND t.ikey = j.value` +
			` WHERE t.ikey IS NULL`
	})
	rows, err := tx.Query(ctx, probe, string(jsonArray(nil, chunk, nil)), scope)
	missing, err := readInts(rows, err, len(chunk))
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(chunk))
	if len(missing) == 0 {
		return out, nil
	}
	// The SELECT has no ORDER BY: sort the positions so that sub is sorted, as readNew needs.
	slices.Sort(missing)
	sub := make([]string, len(missing))
	var subFPs []string
	for j, i := range missing {
		sub[j] = chunk[i]
		if len(fps) > 0 {
			subFPs = append(subFPs, fps[i])
		}
	}
	rows, err = tx.Query(ctx, q, scope, now, string(jsonArray(nil, sub, subFPs)))
	fresh, n, err := readNew(sub, rows, err)
	if err != nil {
		return nil, err
	}
	for j, i := range missing {
		out[i] = fresh[j]
	}
	k.liteOld.Store(n == 0)
	return out, nil
}

// readInts reads one integer column of rows, each in [0, n).
func readInts(rows Rows, err error, n int) ([]int, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i < 0 || i >= n {
			return nil, fmt.Errorf("the database returned position %d of a batch of %d", i, n)
		}
		out = append(out, i)
	}
	return out, rows.Err()
}

func inList(k *Keys, kind string, n int, prefix string) string {
	return k.stmt(stmtKey{kind: kind, n: n}, func() string {
		return prefix + "(" + strings.TrimSuffix(strings.Repeat("?,", n), ",") + ")"
	})
}

func keyArgs(first []any, chunk []string) []any {
	args := make([]any, 0, len(first)+len(chunk))
	args = append(args, first...)
	for _, k := range chunk {
		args = append(args, k)
	}
	return args
}

func (liteDialect) fingerprints(ctx context.Context, k *Keys, tx Execer, scope string, chunk []string) (map[string]string, error) {
	q := inList(k, "fp", len(chunk), `SELECT ikey, fingerprint FROM `+k.table+` WHERE scope = ? AND ikey IN `)
	return readKeys(tx.Query(ctx, q, keyArgs([]any{scope}, chunk)...))
}

func (liteDialect) upsertCheckpoint(c string) string {
	return `INSERT INTO ` + c + ` (task, slot, value, updated_ms) VALUES (?, ?, ?, ?)` +
		` ON CONFLICT (task, slot) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms`
}

// ---- MySQL/MariaDB: no RETURNING. One INSERT IGNORE … SELECT FROM JSON_TABLE(batch) per batch
// stamps every row it inserts with this call's random claim_id. Its affected-rows count settles the
// all-new and all-old cases; a partly new batch is resolved by reading back, through the primary key,
// which of the batch's rows carry our claim_id. That is exact under concurrency: a row with our
// claim_id can only have been inserted by this statement (16 random bytes), our transaction always
// sees its own inserts, and InnoDB makes the insert wait on another transaction's uncommitted row
// with the same key (skipped if it commits, inserted if it rolls back). IGNORE could also hide a
// truncation or a NULL, but keys and scopes are validated to fit the binary columns and JSON_TABLE
// yields no NULL for an array of strings, so it only ever skips duplicate keys.

type myDialect struct{}

func (myDialect) ddl(t, c string) []string {
	// Binary columns: the default collations are case- and accent-insensitive and ignore trailing
	// spaces, which would merge distinct keys.
	return []string{
		"CREATE TABLE IF NOT EXISTS " + t + ` (
  scope       VARBINARY(255)  NOT NULL,
  ikey        VARBINARY(1024) NOT NULL,
  fingerprint VARBINARY(255)  NULL,
  created_ms  BIGINT          NOT NULL,
  claim_id    BINARY(16)      NOT NULL,
  PRIMARY KEY (scope, ikey)
) ENGINE=InnoDB`,
		"CREATE TABLE IF NOT EXISTS " + c + ` (
  task       VARBINARY(255) NOT NULL,
  slot       VARBINARY(255) NOT NULL,
  value      MEDIUMBLOB     NOT NULL,
  updated_ms BIGINT         NOT NULL,
  PRIMARY KEY (task, slot)
) ENGINE=InnoDB`,
	}
}

func (myDialect) rebind(q string) string { return q }

// mariaDB reports whether tx's server is MariaDB, which has INSERT … RETURNING (10.5+; JSON_TABLE
// needs 10.6), asking SELECT VERSION() on the first claim of k only.
func (myDialect) mariaDB(ctx context.Context, k *Keys, tx Execer) (bool, error) {
	switch k.returning.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	rows, err := tx.Query(ctx, "SELECT VERSION()")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var v string
	if rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return false, err
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	maria := strings.Contains(strings.ToLower(v), "mariadb")
	k.returning.Store(map[bool]int32{true: 1, false: 2}[maria])
	return maria, nil
}

func (d myDialect) claim(ctx context.Context, k *Keys, tx Execer, scope string, chunk, fps []string, now int64) ([]bool, error) {
	maria, err := d.mariaDB(ctx, k, tx)
	if err != nil {
		return nil, err
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	// The batch travels as one JSON array through JSON_TABLE (MySQL 8.0.4+, MariaDB 10.6+): a
	// short constant statement instead of a 1,000-row VALUES list the server must parse each time.
	q := k.stmt(stmtKey{kind: "claim", fp: len(fps) > 0}, func() string {
		if len(fps) == 0 {
			return "INSERT IGNORE INTO " + k.table + " (scope, ikey, fingerprint, created_ms, claim_id)" +
				" SELECT ?, j.k, NULL, ?, ? FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j"
		}
		return "INSERT IGNORE INTO " + k.table + " (scope, ikey, fingerprint, created_ms, claim_id)" +
			" SELECT ?, j.k, NULLIF(j.f, ''), ?, ? FROM JSON_TABLE(?, '$[*]' COLUMNS (" +
			"k VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$[0]', f VARCHAR(255) CHARACTER SET utf8mb4 PATH '$[1]')) AS j"
	})
	arg := string(jsonArray(nil, chunk, fps))
	if maria {
		// MariaDB returns exactly the rows the statement inserted, as PostgreSQL does: one
		// statement per batch whatever its mix of new and old keys. (The rows still carry the
		// claim id: the column is NOT NULL, and MySQL clients of the same table read it back.)
		rows, err := tx.Query(ctx, q+" RETURNING ikey", scope, now, id[:], arg)
		out, _, err := readNew(chunk, rows, err)
		return out, err
	}
	n, err := tx.Exec(ctx, q, scope, now, id[:], arg)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(chunk))
	switch {
	case n == 0:
		return out, nil
	case n == int64(len(chunk)):
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	// Read back through the primary key, driven by the same JSON array.
	q = k.stmt(stmtKey{kind: "mine"}, func() string {
		return "SELECT t.ikey FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j" +
			" JOIN " + k.table + " AS t ON t.scope = ? AND t.ikey = j.k WHERE t.claim_id = ?"
	})
	if len(fps) > 0 {
		arg = string(jsonArray(nil, chunk, nil))
	}
	rows, err := tx.Query(ctx, q, arg, scope, id[:])
	out, got, err := readNew(chunk, rows, err)
	if err != nil {
		return nil, err
	}
	if got != int(n) {
		return nil, fmt.Errorf("inserted %d keys but found %d with this claim's id; is the table's primary key (scope, ikey)?", n, got)
	}
	return out, nil
}

func (myDialect) fingerprints(ctx context.Context, k *Keys, tx Execer, scope string, chunk []string) (map[string]string, error) {
	q := inList(k, "fp", len(chunk), `SELECT ikey, fingerprint FROM `+k.table+` WHERE scope = ? AND ikey IN `)
	return readKeys(tx.Query(ctx, q, keyArgs([]any{scope}, chunk)...))
}

func (myDialect) upsertCheckpoint(c string) string {
	return `INSERT INTO ` + c + ` (task, slot, value, updated_ms) VALUES (?, ?, ?, ?)` +
		` ON DUPLICATE KEY UPDATE value = VALUES(value), updated_ms = VALUES(updated_ms)`
}
