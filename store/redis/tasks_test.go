package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestTasksIndexBuilt: tasks an older once knew (in the set of tasks, not in the sorted set of
// names: a prefix from before the index, or a host still running an older once) are listed; the
// first Tasks adds them to the sorted set.
func TestTasksIndexBuilt(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acquire := func(tasks ...string) {
		t.Helper()
		for _, task := range tasks {
			if _, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
	}
	names := s.key("task-names")
	acquire("b", "a/c", "B", "a-c")
	if err := s.c.Del(ctx, names).Err(); err != nil { // a prefix from before the index
		t.Fatal(err)
	}
	storetest.WantTasks(t, s, "tasks from before the index", "b", "a/c", "B", "a-c")
	if n, err := s.c.ZCard(ctx, names).Result(); err != nil || n != 4 {
		t.Fatalf("index after the first Tasks: %d names, %v; want 4", n, err)
	}
	acquire("late")
	if err := s.c.ZRem(ctx, names, "late").Err(); err != nil { // acquired by an older once
		t.Fatal(err)
	}
	storetest.WantTasks(t, s, "a task an older once added", "b", "a/c", "B", "a-c", "late")
}

// TestScopesIndexBuilt: scopes an older once claimed keys in (a hash, no entry in the scope index)
// are listed: the first Scopes of a prefix scans for their hashes once and sets a marker.
func TestScopesIndexBuilt(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scopes := []string{"b", "a{x}", "a%7Bx", "c/d", "作业"}
	for _, sc := range scopes {
		if _, err := s.Claim(ctx, store.ClaimRequest{Scope: sc, Keys: []string{"k"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The prefix as an older once left it: hashes, no index, no marker.
	if err := s.c.Del(ctx, s.scopesKey(), s.scopesBuiltKey()).Err(); err != nil {
		t.Fatal(err)
	}
	walk := func() []string {
		var all []string
		for cursor := ""; ; {
			page, next, err := s.Scopes(ctx, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if next == "" {
				return all
			}
			cursor = next
		}
	}
	want := slices.Clone(scopes)
	slices.Sort(want)
	if got := walk(); !slices.Equal(got, want) {
		t.Fatalf("Scopes of a prefix an older once wrote: %q, want %q", got, want)
	}
	if n, err := s.c.Exists(ctx, s.scopesBuiltKey()).Result(); err != nil || n != 1 {
		t.Fatalf("marker after the first Scopes: %d, %v", n, err)
	}
	// A scope this once claims in later is indexed by the claim itself, also when the claim's
	// script is not loaded (the pipeline's EVALSHA fails and the claim runs again alone).
	if err := s.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "new", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "new")
	slices.Sort(want)
	if got := walk(); !slices.Equal(got, want) {
		t.Fatalf("Scopes after a claim in a new scope: %q, want %q", got, want)
	}
}
