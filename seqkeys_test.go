package once_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/effect"
	"github.com/once-run/once/store"
)

// TestSequenceEffectLeftPendingIsUnknownToNextSlot: the slots of a sequence (a backfill, a catch-up,
// a daemon's catch-up: KeepGoing) run under one lease and one token, each a run of its own. An
// effect.Do call the first slot's run cut short (maybe applied: the key stays pending) is unknown
// to the second slot's run — ErrUnknown, and its Reconciler is asked — as to a later run, not in
// flight under a live claimant (ErrInFlight). While the first slot's run works, the key is in
// flight to anyone else.
func TestSequenceEffectLeftPendingIsUnknownToNextSlot(t *testing.T) {
	s, _ := newStore(t)
	ks := s.(store.Keys)
	o := once.Options{Store: s, Task: "invoice", TTL: time.Minute}
	calls := 0
	call := func(context.Context) error { calls++; return nil }
	got := map[string]string{}
	work := func(ctx context.Context, r *once.Run) error {
		c := store.Claimant{Task: r.Task, RunID: r.RunID, Token: r.Token}
		var rec effect.Reconciler
		if r.Slot == "d3" {
			rec = effect.ReconcilerFunc(func(context.Context, string, string) (bool, error) { return false, nil })
		}
		if r.Slot != "d1" {
			out, err := effect.Do(ctx, ks, "inv", "march", c, call, rec)
			got[r.Slot] = fmt.Sprintf("%s %v", out, errors.Is(err, effect.ErrUnknown))
			return err
		}
		out, err := effect.Do(ctx, ks, "inv", "march", c, func(context.Context) error {
			return fmt.Errorf("%w: timed out after sending", effect.ErrMaybeApplied)
		}, nil)
		if out != effect.Interrupted {
			t.Errorf("slot d1: %s, %v; want interrupted", out, err)
		}
		other := store.Claimant{Task: r.Task, RunID: "other", Token: r.Token}
		if _, err := effect.Do(ctx, ks, "inv", "march", other, call, nil); !errors.Is(err, effect.ErrInFlight) {
			t.Errorf("while the run that claimed it works: %v, want ErrInFlight", err)
		}
		return err
	}
	rs, err := once.Sequence(context.Background(), o, []string{"d1", "d2", "d3"}, once.SeqOptions{KeepGoing: true}, work)
	if err != nil || len(rs) != 3 {
		t.Fatalf("Sequence: %v, %d results", err, len(rs))
	}
	if got["d2"] != " true" || got["d3"] != "called false" || calls != 1 {
		t.Fatalf("slot d2: %q (want ErrUnknown), slot d3 with a reconciler: %q (want called); calls %d, want 1", got["d2"], got["d3"], calls)
	}
}
