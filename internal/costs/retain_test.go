package costs

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestRetainFlat holds once run --retain on the key-value stores (store.Retainer) to what crossed the
// cutoff since its previous prune: a prune that finds nothing new costs the same round trips and
// bytes with 80 or 400 slots whose last attempt is kept (a slot's last attempt is never pruned).
// Before, each prune walked the task's history index from its oldest mark and read every document
// older than the cutoff: every slot's kept last attempt, again at each prune.
func TestRetainFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" { // no Retainer: once run --retain's window (PruneRequest.Since)
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "long", 0, h.small)
			if _, err := seed.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // builds nothing: warms the indexes
				t.Fatal(err)
			}
			// The cutoffs are an hour ahead of the seeding: every slot is older, and kept.
			cut := time.Now().Add(time.Hour)
			retainCost(t, dsn, cut) // the task's first Retain: the whole task
			cut = cut.Add(time.Hour + time.Second)
			before := retainCost(t, dsn, cut)
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			cut = cut.Add(time.Hour + time.Second)
			after := retainCost(t, dsn, cut)
			wantFlat(t, st, "a Retain that prunes nothing (every slot kept)", h, before, after, 512)
		})
	}
}

// retainCost runs a Retain of task long up to cut on a fresh client through a relay, wants it to
// prune nothing, and counts it.
func retainCost(t *testing.T, dsn string, cut time.Time) wire {
	return counted(t, dsn, func(ctx context.Context, s store.Store) {
		rt, ok := s.(store.Retainer)
		if !ok {
			t.Fatal("not a store.Retainer")
		}
		res, pruned, err := rt.Retain(ctx, "long", cut, time.Hour)
		if err != nil || !pruned || res != (store.PruneResult{}) {
			t.Fatalf("Retain up to %v: %+v, pruned %v, %v; want a prune that removes nothing", cut, res, pruned, err)
		}
	})
}
