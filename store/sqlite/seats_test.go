package sqlite_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestSchemaUpgradeFromV4: a version 4 file (no lease_seats table) with an exclusive grant opens,
// gets the table, and grants seats with tokens after the exclusive grant's.
func TestSchemaUpgradeFromV4(t *testing.T) {
	ctx, path, s := openNew(t, "v4.db")
	lx, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "rx", TTL: time.Minute})
	if err != nil {
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
	for _, q := range []string{"DROP TABLE lease_seats", "UPDATE meta SET value = 4 WHERE key = 'schema_version'"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err = store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatalf("open a version 4 file: %v", err)
	}
	defer s.Close()
	var v int
	if err := db.QueryRow("SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != 5 {
		t.Fatalf("schema version after the upgrade: %d, %v; want 5", v, err)
	}
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
