package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestOlderOnceSlotNameResolves: a Go program using an older once, which took any slot value,
// left slot 2026/12/06 waiting for review. once status prints the once resolve lines that decide
// it, and pasted they were refused (64: '/' is not allowed), as was once history --slot for it: the
// slot waited for ever. They work for a slot the ledger has; a name never recorded is still 64.
func TestOlderOnceSlotNameResolves(t *testing.T) {
	t.Parallel()
	e := keysEnv(t)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "lib.db")
	recordOldSlot(t, dsn, "lib", "2026/12/06")
	if r := e.run("history", "--store", dsn, "--task", "lib", "--slot", "2026/12/06"); r.code != 0 || !strings.Contains(r.stdout, "unknown") {
		t.Fatalf("history of the recorded slot: %d %q %s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"history", "--store", dsn, "--task", "lib", "--slot", "2026/12/07"},
		{"resolve", "--store", dsn, "--task", "lib", "--slot", "2026/12/07", "--as", "failed"},
	} {
		if r := e.run(args...); r.code != 64 || !strings.Contains(r.stderr, "'/' is not allowed") {
			t.Fatalf("%v, a slot never recorded: %d %s", args, r.code, r.stderr)
		}
	}
	e.pasteResolve(dsn, "--slot 2026/12/06 ")
}

// recordOldSlot records in dsn what an older once could write and this one refuses to begin: an
// attempt of task in slot sl, ended unknown (its holder vanished), waiting for review.
func recordOldSlot(t *testing.T, dsn, task, sl string) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "gone:1", RunID: "r1", TTL: time.Minute})
	if err == nil {
		_, err = s.Begin(ctx, store.Attempt{Task: task, Slot: sl, RunID: "r1", Number: 1, Holder: "gone:1", Token: l.Token})
	}
	if err == nil {
		_, err = s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Unknown})
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
}
