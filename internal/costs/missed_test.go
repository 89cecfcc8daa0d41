package costs

import (
	"context"
	"fmt"
	"testing"

	"github.com/once-run/once/store"
)

// TestMissedFlat holds once status's read of the newest missed events (a kind filter across every
// task) to what it finds: on the key-value stores it costs the same round trips and about the same
// bytes with 80 or 400 slots of other history, whether the ledger has no missed event or a few
// (the task's index of a kind, internal/kvstore's IndexedKinds). Before that index the read
// walked every mark of every task when the kind was absent (Redis at 200,000 entries: 1.2 s).
func TestMissedFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "long", 0, h.small)
			status := store.HistoryQuery{Kind: store.Missed, Limit: 20}
			long := store.HistoryQuery{Task: "long", Kind: store.Missed, Limit: 20}
			missedCost(t, dsn, status, 0) // builds the index of a kind (none yet on this prefix)
			for i := range 3 {
				if err := seed.Record(ctx, store.Event{Task: "cron", Slot: fmt.Sprintf("m%d", i), Kind: store.Missed, Holder: "node-1"}); err != nil {
					t.Fatal(err)
				}
			}
			noneSmall, someSmall := missedCost(t, dsn, long, 0), missedCost(t, dsn, status, 3)
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			noneLarge, someLarge := missedCost(t, dsn, long, 0), missedCost(t, dsn, status, 3)
			wantFlat(t, st, "the newest missed events of task long (none)", h, noneSmall, noneLarge, 512)
			wantFlat(t, st, "the newest missed events of all tasks (3, of task cron)", h, someSmall, someLarge, 512)
		})
	}
}

// missedCost reads q on a fresh client through a relay, wants n entries, and counts the read.
func missedCost(t *testing.T, dsn string, q store.HistoryQuery, n int) wire {
	return counted(t, dsn, func(ctx context.Context, s store.Store) {
		es, err := s.History(ctx, q)
		if err != nil || len(es) != n {
			t.Fatalf("History %+v: %d entries, %v; want %d", q, len(es), err, n)
		}
	})
}
