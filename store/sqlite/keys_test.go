package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/once-run/once/store"
)

// TestSchemaUpgradeFromV1: a version 1 file (no keys table) opens, is upgraded, and keeps its rows.
func TestSchemaUpgradeFromV1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	s, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "h", RunID: "r", TTL: 60e9}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	downgradeToV2(t, db, "")
	for _, q := range []string{"DROP TABLE keys", "UPDATE meta SET value = 1 WHERE key = 'schema_version'"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err = store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatalf("open a version 1 file: %v", err)
	}
	defer s.Close()
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("leases after upgrade: %v, %v", ls, err)
	}
	got, err := s.(store.Keys).Claim(ctx, store.ClaimRequest{Scope: "s", Keys: []string{"k"}})
	if err != nil || !got[0] {
		t.Fatalf("claim after upgrade: %v, %v", got, err)
	}
}
