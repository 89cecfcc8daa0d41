package sqltest

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// KeysUpgradeFromV1: a version 1 schema (no keys table) at dsn is upgraded to version 2 on open,
// under the migration lock, and keeps its leases.
func KeysUpgradeFromV1(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, sq, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TABLE {p}keys", "DELETE FROM {p}schema_version WHERE version >= 2"} {
		if _, err := sq.DB.ExecContext(ctx, sq.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, _, err = open(ctx, dsn)
	if err != nil {
		t.Fatalf("open a version 1 schema: %v", err)
	}
	defer s.Close()
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("leases after upgrade: %v, %v", ls, err)
	}
	k, ok := s.(store.Keys)
	if !ok {
		t.Fatalf("%T does not keep business keys", s)
	}
	got, err := k.Claim(ctx, store.ClaimRequest{Scope: "s", Keys: []string{"k"}})
	if err != nil || !got[0] {
		t.Fatalf("claim after upgrade: %v, %v", got, err)
	}
}
