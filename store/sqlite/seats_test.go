package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// downgraded makes a new file with the exclusive grant of task "job" (to "x", run "rx") and an
// attempt of slot "old" under it, released, sets the file back to version from with stmts, and
// opens it again: the store upgraded on open, and the grant made before.
func downgraded(t *testing.T, name string, from int, stmts ...string) (context.Context, store.Store, store.Lease) {
	t.Helper()
	ctx, path, s := openNew(t, name)
	lx, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "rx", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "old", RunID: "rx", Holder: "x", Token: lx.Token}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts = append(stmts, fmt.Sprintf("UPDATE meta SET value = %d WHERE key = 'schema_version'", from))
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err = store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatalf("open a version %d file: %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	var v int
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("schema version after the upgrade: %d, %v; want %d", v, err, sqlite.SchemaVersion)
	}
	return ctx, s, lx
}

// TestSchemaUpgradeFromV4: a version 4 file (no lease_seats table) with an exclusive grant opens,
// gets the table, and grants seats with tokens after the exclusive grant's.
func TestSchemaUpgradeFromV4(t *testing.T) {
	ctx, s, lx := downgraded(t, "v4.db", 4, "DROP TABLE lease_seats")
	for i, h := range []string{"a", "b"} {
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: h, RunID: "r" + h, TTL: time.Minute, Limit: 2})
		if err != nil || l.Token != lx.Token+int64(i)+1 {
			t.Fatalf("seat %d after the upgrade: %+v, %v; want token %d", i+1, l, err, lx.Token+int64(i)+1)
		}
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 2 {
		t.Fatalf("Leases after two seats: %+v, %v", ls, err)
	}
}

// TestSchemaUpgradeFromV5: a version 5 file (attempts without the seats column) opens, gets the
// column, reads its old attempts with Limit 0, and records a seat's attempt with its Limit.
func TestSchemaUpgradeFromV5(t *testing.T) {
	ctx, s, _ := downgraded(t, "v5.db", 5, "ALTER TABLE attempts DROP COLUMN seats")
	if st, err := s.Slot(ctx, "job", "old"); err != nil || st.Last == nil || st.Last.Limit != 0 {
		t.Fatalf("an old attempt after the upgrade: %+v, %v; want Limit 0", st.Last, err)
	}
	seat, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "a", RunID: "ra", TTL: time.Minute, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "new", RunID: "ra", Holder: "a", Token: seat.Token, Limit: 3}); err != nil || a.Limit != 3 {
		t.Fatalf("a seat's attempt after the upgrade: %+v, %v", a, err)
	}
	if st, err := s.Slot(ctx, "job", "new"); err != nil || st.Last == nil || st.Last.Limit != 3 {
		t.Fatalf("the seat's attempt read back: %+v, %v; want Limit 3", st.Last, err)
	}
}
