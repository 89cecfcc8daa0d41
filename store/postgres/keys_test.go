package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestKeysUpgradeFromV1: a version 1 schema (no keys table) is upgraded to version 2 on open, under
// the migration lock, and keeps its leases.
func TestKeysUpgradeFromV1(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TABLE {p}keys", "DELETE FROM {p}schema_version WHERE version >= 2"} {
		if _, err := s.DB.ExecContext(ctx, s.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, err = Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open a version 1 schema: %v", err)
	}
	defer s.Close()
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("leases after upgrade: %v, %v", ls, err)
	}
	got, err := s.Claim(ctx, store.ClaimRequest{Scope: "s", Keys: []string{"k"}})
	if err != nil || !got[0] {
		t.Fatalf("claim after upgrade: %v, %v", got, err)
	}
}
