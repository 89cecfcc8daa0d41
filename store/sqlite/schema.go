package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/once-run/once/store"
)

// ledgerTable holds the file's ledger id and write counter (files.go). It is the one table
// without the prefix: the id is the file's, shared by every prefix in it.
const ledgerTable = "once_ledger"

// ensureSchema reads the schema version, the ledger id (into s.id) and the write counter (one
// statement when current) and, when the tables are missing or older, creates or upgrades them in
// one IMMEDIATE transaction, safely when many processes do it at once. A file without a ledger
// id gets one, unless hasMarker says a ledger existed here: then the file was emptied or
// replaced, and ensureSchema fails with ErrGone before writing anything.
func (s *Store) ensureSchema(ctx context.Context, hasMarker bool) (int64, error) {
	var v, seq int64
	err := s.db.QueryRowContext(ctx, "SELECT m.value, l.id, l.seq FROM "+s.t.meta+" m, "+ledgerTable+" l WHERE m.key = 'schema_version'").Scan(&v, &s.id, &seq)
	if err == nil && v == SchemaVersion {
		return seq, nil
	}
	if ctx.Err() != nil {
		return 0, s.mapErr(ctx.Err())
	}
	err = s.txRaw(ctx, func(tx *sql.Tx) error {
		has := func(table string) (bool, error) {
			var n int
			err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", table).Scan(&n)
			return n > 0, err
		}
		hasLedger, err := has(ledgerTable)
		if err != nil {
			return err
		}
		if !hasLedger {
			if hasMarker {
				return s.gone("the file holds no once ledger, but %s records one here (emptied, or replaced by another database?); %s", MarkerPath(s.path), s.restoreOrNew())
			}
			id, err := newLedgerID()
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE `+ledgerTable+` (
				one INTEGER PRIMARY KEY CHECK (one = 1),
				id TEXT NOT NULL,
				seq INTEGER NOT NULL CHECK (seq >= 0)
			) STRICT`); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledgerTable+" (one, id, seq) VALUES (1, ?, 0)", id); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, "SELECT id, seq FROM "+ledgerTable).Scan(&s.id, &seq); err != nil {
			return err
		}
		if !validID(s.id) {
			return s.gone("its once_ledger table holds %q, not a ledger id; fix: restore the file from a backup", s.id)
		}
		hasMeta, err := has(s.t.meta)
		if err != nil {
			return err
		}
		v = 0
		if hasMeta {
			if v, err = s.t.schemaVersion(ctx, tx); err != nil {
				return err
			}
			if v > SchemaVersion {
				return fmt.Errorf("%w: sqlite %s: schema version %d, this once understands %d; upgrade once", store.ErrUnavailable, s.path, v, SchemaVersion)
			}
			if v == SchemaVersion {
				return nil
			}
		}
		if v == 0 {
			for _, stmt := range s.ddl() {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
			v = 1
		}
		for ; v < SchemaVersion; v++ {
			if err := s.upgradeTo(ctx, tx, int(v)+1); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t.meta+"(key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", SchemaVersion)
		return err
	})
	return seq, err
}

// upgradeTo brings version to-1 of the schema to version to, in tx.
func (s *Store) upgradeTo(ctx context.Context, tx *sql.Tx, to int) error {
	switch to {
	case 4:
		return s.upgrade4(ctx, tx)
	case 6:
		return s.upgrade6(ctx, tx)
	}
	for _, stmt := range s.upgrade(to) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// upgrade returns the statements that bring version to-1 of the schema to version to (2, 3 and
// 5; 4 is upgrade4, 6 upgrade6).
func (s *Store) upgrade(to int) []string {
	t := s.t
	switch to {
	case 2:
		return []string{
			// One row per claimed key. A pending key names its claimant: a run (task, run_id,
			// token: gone when the task's live lease has another token, or its attempt ended:
			// goneExpr) or an expiring claim (run_id, expires_at: gone after it); 0 means none.
			`CREATE TABLE ` + t.keys + ` (
				scope TEXT NOT NULL,
				key TEXT NOT NULL,
				state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
				fingerprint TEXT NOT NULL,
				task TEXT NOT NULL,
				run_id TEXT NOT NULL,
				token INTEGER NOT NULL,
				expires_at INTEGER NOT NULL,
				claimed_at INTEGER NOT NULL,
				done_at INTEGER CHECK ((state = 'done') = (done_at IS NOT NULL)),
				result BLOB,
				PRIMARY KEY (scope, key)
			) STRICT, WITHOUT ROWID`,
			`CREATE INDEX ` + t.keys + `_claimed ON ` + t.keys + ` (scope, claimed_at)`,
		}
	case 3:
		return s.upgrade3()
	case 5:
		return seatsDDL(t)
	}
	return nil
}

// upgrade6 adds the attempts' seats column: the Limit of the seat an attempt runs under
// (store.Attempt.Limit), 0 under the exclusive lease, for attempts of seats may overlap. SQLite has
// no ADD COLUMN IF NOT EXISTS: a column already there (a file whose version was set back) is kept.
func (s *Store) upgrade6(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info(?) WHERE name = 'seats'", s.t.attempts).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE `+s.t.attempts+` ADD COLUMN seats INTEGER NOT NULL DEFAULT 0`)
	return err
}

func (s *Store) ddl() []string {
	t := s.t
	return []string{
		`CREATE TABLE ` + t.meta + ` (key TEXT PRIMARY KEY, value ANY NOT NULL) STRICT`,
		// A lease row is never deleted, so its token keeps increasing across holders and
		// releases; release moves expires_at to the moment of release.
		`CREATE TABLE ` + t.leases + ` (
			task TEXT PRIMARY KEY,
			holder TEXT NOT NULL,
			run_id TEXT NOT NULL,
			token INTEGER NOT NULL CHECK (token > 0),
			acquired_at INTEGER NOT NULL,
			expires_at INTEGER NOT NULL
		) STRICT`,
		`CREATE TABLE ` + t.attempts + ` (
			task TEXT NOT NULL,
			slot TEXT NOT NULL,
			number INTEGER NOT NULL CHECK (number > 0),
			run_id TEXT NOT NULL UNIQUE,
			state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'unknown')),
			holder TEXT NOT NULL,
			token INTEGER NOT NULL,
			started_at INTEGER NOT NULL,
			ended_at INTEGER CHECK ((state = 'running') = (ended_at IS NULL)),
			exit_code INTEGER,
			records INTEGER NOT NULL DEFAULT 0,
			progress TEXT NOT NULL DEFAULT '',
			checkpoint TEXT NOT NULL DEFAULT '',
			note TEXT NOT NULL DEFAULT '',
			resolved_as TEXT CHECK (resolved_as IN ('succeeded', 'failed')),
			resolved_by TEXT,
			resolved_at INTEGER,
			resolution_note TEXT,
			CHECK ((resolved_as IS NULL) = (resolved_at IS NULL)),
			CHECK (resolved_as IS NULL OR state IN ('failed', 'unknown')),
			PRIMARY KEY (task, slot, number)
		) STRICT`,
		// At most one running attempt per slot: the second racing writer hits this index.
		`CREATE UNIQUE INDEX ` + t.attempts + `_running ON ` + t.attempts + ` (task, slot) WHERE state = 'running'`,
		`CREATE INDEX ` + t.attempts + `_started ON ` + t.attempts + ` (started_at)`,
		eventsTable(t.events, eventKindsV1),
		`CREATE INDEX ` + t.events + `_slot ON ` + t.events + ` (task, slot, kind, attempt)`,
		`CREATE INDEX ` + t.events + `_at ON ` + t.events + ` (at)`,
	}
}

// The kinds of event the events table's CHECK allows: version 1's, and version 4's (store.Missed).
const (
	eventKindsV1 = `'skipped', 'busy', 'review'`
	eventKindsV4 = `'skipped', 'busy', 'review', 'missed'`
)

// eventsTable creates the events table name whose CHECK allows kinds.
func eventsTable(name, kinds string) string {
	return `CREATE TABLE ` + name + ` (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			task TEXT NOT NULL,
			slot TEXT NOT NULL,
			kind TEXT NOT NULL CHECK (kind IN (` + kinds + `)),
			run_id TEXT NOT NULL,
			holder TEXT NOT NULL,
			token INTEGER NOT NULL,
			attempt INTEGER NOT NULL,
			at INTEGER NOT NULL,
			note TEXT NOT NULL
		) STRICT`
}

// upgrade4 lets the events table keep missed events (store.Missed) and adds events_kind_at
// (kind, at), the index a page of one kind of event reads. SQLite cannot change a CHECK, so the
// table is rebuilt as https://www.sqlite.org/lang_altertable.html#otheralter says, in the
// upgrade's transaction: a new table with the new CHECK, every row copied with its id, the
// AUTOINCREMENT counter carried over (an id is never handed out twice, so no cursor given out
// before can name another event), the old table dropped and the new one renamed; then every
// index and trigger of the events table, and every trigger of the attempts table (the waiting
// triggers read events: a rename checks every trigger that names the table, and a trigger that
// names a table not there fails it), is created again exactly as sqlite_schema held it.
func (s *Store) upgrade4(ctx context.Context, tx *sql.Tx) error {
	t := s.t
	rows, err := tx.QueryContext(ctx, `SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL
		AND (tbl_name = ?1 AND type IN ('index', 'trigger') OR tbl_name = ?2 AND type = 'trigger') ORDER BY type, name`, t.events, t.attempts)
	if err != nil {
		return err
	}
	var drops, again []string
	for rows.Next() {
		var typ, name, stmt string
		if err := rows.Scan(&typ, &name, &stmt); err != nil {
			rows.Close()
			return err
		}
		if typ == "trigger" {
			drops = append(drops, `DROP TRIGGER `+name)
		}
		again = append(again, stmt)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	tmp := t.events + "_v4"
	cols := `id, task, slot, kind, run_id, holder, token, attempt, at, note`
	stmts := append(drops,
		eventsTable(tmp, eventKindsV4),
		`INSERT INTO `+tmp+` (`+cols+`) SELECT `+cols+` FROM `+t.events,
		`DELETE FROM sqlite_sequence WHERE name = '`+tmp+`'`,
		`INSERT INTO sqlite_sequence (name, seq) SELECT '`+tmp+`', seq FROM sqlite_sequence WHERE name = '`+t.events+`'`,
		`DROP TABLE `+t.events,
		`ALTER TABLE `+tmp+` RENAME TO `+t.events)
	stmts = append(append(stmts, again...), `CREATE INDEX `+t.events+`_kind_at ON `+t.events+` (kind, at)`)
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("schema version 4: %s: %w", strings.Fields(stmt)[0]+" "+strings.Fields(stmt)[1], err)
		}
	}
	return nil
}

// rowQuerier is what a *sql.DB and a *sql.Tx share for a one-row query.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaVersion reads the file's schema version from the meta table: one SELECT, the one place
// that spells it (the count statement reads it as a subquery of its own, versionSQL).
func (t tables) schemaVersion(ctx context.Context, q rowQuerier) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, t.versionSQL()).Scan(&v)
	return v, err
}

// versionSQL selects the schema version; schemaVersion runs it, the count statement embeds it.
func (t tables) versionSQL() string {
	return "SELECT value FROM " + t.meta + " WHERE key = 'schema_version'"
}
