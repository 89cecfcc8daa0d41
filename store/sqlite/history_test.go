package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// downgradeToV2 turns a current file into what once wrote at schema version 2: no waiting table,
// none of version 3's indexes and triggers.
func downgradeToV2(t *testing.T, db *sql.DB, p string) {
	t.Helper()
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

// TestSchemaUpgradeFromV2: a version 2 ledger with slots waiting for review opens, is upgraded in
// place, and status lists the same slots in the same order, from the new waiting table.
func TestSchemaUpgradeFromV2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "v2.db")
	s, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
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
