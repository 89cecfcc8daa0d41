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
	s, _ := newStore(t)
	ctx := context.Background()
	o := once.Options{Store: s, Task: "t", Slot: "2026-11-29", TTL: time.Second}
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
