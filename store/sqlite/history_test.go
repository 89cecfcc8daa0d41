package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/store/storetest"
)

// downgradeToV3 turns a current file into what once wrote at schema version 3: the events table's
// CHECK without missed (edited in place, as SQLite cannot alter it), no index by kind.
func downgradeToV3(t *testing.T, db *sql.DB, p string) {
	t.Helper()
	for _, q := range []string{
		"DROP INDEX " + p + "events_kind_at",
		"PRAGMA writable_schema = ON",
		"UPDATE sqlite_schema SET sql = replace(sql, ', ''missed''', '') WHERE type = 'table' AND name = '" + p + "events'",
		"PRAGMA writable_schema = OFF",
		"UPDATE " + p + "meta SET value = 3 WHERE key = 'schema_version'",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Every connection reads the edited schema again (SQLite's advice for writable_schema).
	var v int
	if err := db.QueryRow("PRAGMA schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA schema_version = %d", v+1)); err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow("SELECT sql FROM sqlite_schema WHERE name = ?", p+"events").Scan(&check); err != nil || strings.Contains(check, "missed") {
		t.Fatalf("events table after the downgrade: %s, %v", check, err)
	}
}

// downgradeToV2 turns a current file into what once wrote at schema version 2: no waiting table,
// none of version 3's indexes and triggers.
func downgradeToV2(t *testing.T, db *sql.DB, p string) {
	t.Helper()
	downgradeToV3(t, db, p)
	for _, q := range []string{
		"DROP TRIGGER " + p + "waiting_on_begin", "DROP TRIGGER " + p + "waiting_on_change", "DROP TRIGGER " + p + "waiting_on_review",
		"DROP TABLE " + p + "waiting",
		"DROP INDEX " + p + "attempts_task_started", "DROP INDEX " + p + "attempts_slot_started", "DROP INDEX " + p + "attempts_failures",
		"DROP INDEX " + p + "attempts_resolved", "DROP INDEX " + p + "attempts_checkpoint",
		"DROP INDEX " + p + "events_task_at", "DROP INDEX " + p + "events_slot_at",
		"UPDATE " + p + "meta SET value = 2 WHERE key = 'schema_version'",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// openNew opens a new file of that name in a temporary directory: a context for the test's calls,
// the file's path and the store.
func openNew(t *testing.T, name string) (context.Context, string, store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), name)
	s, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, path, s
}

// TestSchemaUpgradeFromV2: a version 2 ledger with slots waiting for review opens, is upgraded in
// place, and status lists the same slots in the same order, from the new waiting table.
func TestSchemaUpgradeFromV2(t *testing.T) {
	ctx, path, s := openNew(t, "v2.db")
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	step := func(slot, run string, st store.State, review bool) {
		t.Helper()
		if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: slot, RunID: run, Number: 1, Holder: "h", Token: l.Token}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: st}); err != nil {
			t.Fatal(err)
		}
		if review {
			if err := s.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: store.Review, Attempt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	step("a", "ra", store.Unknown, false)
	step("b", "rb", store.Succeeded, false)
	step("c", "rc", store.Failed, true)
	step("d", "rd", store.Failed, false)
	want, err := s.Waiting(ctx)
	if err != nil || len(want) != 2 {
		t.Fatalf("Waiting before the downgrade = %+v, %v", want, err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	downgradeToV2(t, db, "")
	db.Close()
	s, err = store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatalf("open a version 2 file: %v", err)
	}
	defer s.Close()
	got, err := s.Waiting(ctx)
	if err != nil || len(got) != 2 || got[0].Slot != "a" || got[1].Slot != "c" {
		t.Fatalf("Waiting after the upgrade = %+v, %v; want job/a then job/c", got, err)
	}
	if h, err := s.History(ctx, store.HistoryQuery{Task: "job"}); err != nil || len(h) != 5 {
		t.Fatalf("history after the upgrade: %d entries, %v", len(h), err)
	}
}

// TestSchemaUpgradeFromV3: a version 3 file with skipped, busy and review events (its events
// table's CHECK refuses missed) opens, its events table is rebuilt with every row, cursor, index
// and trigger, and it keeps missed events; on a prefix, beside another prefix left at version 3.
func TestSchemaUpgradeFromV3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "v3.db")
	var before []store.Entry
	for _, p := range []string{"blue", "green"} {
		s, err := store.Open(ctx, "sqlite://"+path+"?prefix="+p)
		if err != nil {
			t.Fatal(err)
		}
		if h := storetest.EventsLedger(t, s); p == "blue" {
			before = h
		}
		s.Close()
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := func() []string {
		t.Helper()
		rows, err := db.Query(`SELECT type || ' ' || name || ' ' || tbl_name || ' ' || iif(type = 'table', '', coalesce(sql, ''))
			FROM sqlite_schema WHERE name LIKE 'blue%' UNION ALL SELECT 'seq ' || name || ' ' || seq FROM sqlite_sequence ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	// An event pruned from the end: the id counter is past every id left, and stays so.
	for _, q := range []string{
		"INSERT INTO blueevents (task, slot, kind, run_id, holder, token, attempt, at, note) VALUES ('x', '', 'busy', '', '', 0, 0, 0, '')",
		"DELETE FROM blueevents WHERE task = 'x'",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	want := schema()
	downgradeToV3(t, db, "blue")
	downgradeToV3(t, db, "green")
	if _, err := db.Exec("INSERT INTO blueevents (task, slot, kind, run_id, holder, token, attempt, at, note) VALUES ('x', '', 'missed', '', '', 0, 0, 0, '')"); err == nil {
		t.Fatal("the version 3 events table took a missed event")
	}
	s, err := store.Open(ctx, "sqlite://"+path+"?prefix=blue")
	if err != nil {
		t.Fatalf("open a version 3 file: %v", err)
	}
	defer s.Close()
	got := schema()
	storetest.CheckEventsUpgraded(t, s, before)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tables, indexes, triggers and id counters after the upgrade:\n%s\nwant (as a new file has them):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var v int
	if err := db.QueryRow("SELECT value FROM greenmeta WHERE key = 'schema_version'").Scan(&v); err != nil || v != 3 {
		t.Fatalf("the other prefix is at version %d, %v; want 3, untouched", v, err)
	}
}

// TestSchemaNewerRefused: a file whose schema a newer once wrote is refused, fail closed, and
// nothing in it is changed.
func TestSchemaNewerRefused(t *testing.T) {
	ctx, path, s := openNew(t, "v5.db")
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newer := sqlite.SchemaVersion + 1
	if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", newer); err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(ctx, "sqlite://"+path)
	want := fmt.Sprintf("schema version %d, this once understands %d; upgrade once", newer, sqlite.SchemaVersion)
	if !errors.Is(err, store.ErrUnavailable) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("open a version %d file: %v; want ErrUnavailable saying %q", newer, err, want)
	}
	var v int
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != newer {
		t.Fatalf("schema version after the refused open: %d, %v", v, err)
	}
}

// TestSchemaNewerWhileOpen: a process that opened the file before a newer once upgraded its
// schema (a once daemon, once serve) writes nothing more: its next write is refused with
// store.ErrSchemaAhead and rolled back, and CheckSchema and every later call say so too.
func TestSchemaNewerWhileOpen(t *testing.T) {
	ctx, path, s := openNew(t, "ahead.db")
	defer s.Close()
	req := store.AcquireRequest{Task: "t", Holder: "h", RunID: "r1", TTL: time.Minute}
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newer := sqlite.SchemaVersion + 1
	if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", newer); err != nil {
		t.Fatal(err)
	}
	req.RunID = "r2"
	_, err = s.Acquire(ctx, req)
	want := fmt.Sprintf("schema version %d, this once understands %d", newer, sqlite.SchemaVersion)
	if !errors.Is(err, store.ErrSchemaAhead) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("acquire after a newer once upgraded the file: %v; want ErrSchemaAhead saying %q", err, want)
	}
	var token int64
	if err := db.QueryRow("SELECT token FROM leases WHERE task = 't'").Scan(&token); err != nil || token != l.Token {
		t.Fatalf("lease token after the refused acquire: %d, %v; want %d (rolled back)", token, err, l.Token)
	}
	if err := s.(store.SchemaChecker).CheckSchema(ctx); !errors.Is(err, store.ErrSchemaAhead) {
		t.Fatalf("CheckSchema: %v; want ErrSchemaAhead", err)
	}
	if err := s.Record(ctx, store.Event{Task: "t", Kind: store.Skipped, Note: "n"}); !errors.Is(err, store.ErrSchemaAhead) {
		t.Fatalf("a later write: %v; want ErrSchemaAhead", err)
	}
}

// TestCheckSchemaCurrent: CheckSchema on a file this once opened is nil.
func TestCheckSchemaCurrent(t *testing.T) {
	ctx, _, s := openNew(t, "current.db")
	defer s.Close()
	if err := s.(store.SchemaChecker).CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
}
