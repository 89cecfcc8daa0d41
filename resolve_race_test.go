package once_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// TestResolvedDoneWhileStarting: a person resolved a failed slot as succeeded between the run's
// read of the slot and its Begin (the command's preparation). The run ran the slot the person had
// just marked done; it is skipped now.
func TestResolvedDoneWhileStarting(t *testing.T) {
	t.Run("exclusive", func(t *testing.T) { resolvedWhileStarting(t, 0) })
	t.Run("a seat of two", func(t *testing.T) { resolvedWhileStarting(t, 2) }) // skipped too, not busy
	t.Run("the slot of a task without slots", func(t *testing.T) {
		s, _ := newStore(t)
		o := once.Options{Store: s, Task: "t", TTL: 10 * time.Second}
		do(t, o, func(context.Context, *once.Run) error { return errors.New("boom") })
		if _, err := s.Resolve(context.Background(), store.ResolveRequest{Task: "t", Slot: "", As: store.Succeeded, By: "alice"}); err != nil {
			t.Fatal(err)
		}
		if r := do(t, o, ok); r.Decision != once.Ran || r.Attempt.State != store.Succeeded {
			t.Fatalf("a run after the slot \"\" was resolved: %+v, want it run (no memory)", r)
		}
	})
}

func resolvedWhileStarting(t *testing.T, limit int) {
	s, _ := newStore(t)
	ctx := context.Background()
	o := once.Options{Store: s, Task: "t", Slot: "2026-11-29", TTL: 10 * time.Second, Limit: limit}
	if r := do(t, o, func(context.Context, *once.Run) error { return errors.New("boom") }); r.Attempt.State != store.Failed {
		t.Fatalf("first: %+v", r)
	}
	o.Prepare = func(context.Context, *once.Run) error {
		_, err := s.Resolve(ctx, store.ResolveRequest{Task: "t", Slot: "2026-11-29", As: store.Succeeded, By: "alice"})
		return err
	}
	ran := false
	r := do(t, o, func(context.Context, *once.Run) error { ran = true; return nil })
	if ran || r.Decision != once.Skipped {
		t.Fatalf("ran %v, decision %s (%s): want the slot resolved as done skipped", ran, r.Decision, r.Reason)
	}
}
