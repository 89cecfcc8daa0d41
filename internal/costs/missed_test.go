package costs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestMissedFlat holds once status's read of the newest missed events (a kind filter across every
// task) to what it finds: on the key-value stores it costs the same round trips and about the same
// bytes with 80 or 400 slots of other history, whether the ledger has no missed event or a few
// (the task's index of a kind, internal/kvstore's IndexedKinds). Before that index the read
// walked every mark of every task when the kind was absent (Redis at 200,000 entries: 1.2 s).
func TestMissedFlat(t *testing.T) {
	small, large := 80, 400
	if testing.Short() {
		small, large = 40, 160
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "long", 0, small)
			status := store.HistoryQuery{Kind: store.Missed, Limit: 20}
			long := store.HistoryQuery{Task: "long", Kind: store.Missed, Limit: 20}
			missedCost(t, dsn, status, 0) // builds the index of a kind (none yet on this prefix)
			for i := range 3 {
				if err := seed.Record(ctx, store.Event{Task: "cron", Slot: fmt.Sprintf("m%d", i), Kind: store.Missed, Holder: "node-1"}); err != nil {
					t.Fatal(err)
				}
			}
			noneSmall, someSmall := missedCost(t, dsn, long, 0), missedCost(t, dsn, status, 3)
			seedSlots(t, ctx, seed, "long", small, large)
			noneLarge, someLarge := missedCost(t, dsn, long, 0), missedCost(t, dsn, status, 3)
			t.Logf("%s: the newest missed events of a task of %d slots without any: %d round trips, %d bytes; with %d slots: %d, %d; of all tasks (3 of them): %d, %d and %d, %d",
				st.name, small, noneSmall.trips, noneSmall.bytes, large, noneLarge.trips, noneLarge.bytes, someSmall.trips, someSmall.bytes, someLarge.trips, someLarge.bytes)
			slack := int64(512)
			for _, c := range [][2]wire{{noneSmall, noneLarge}, {someSmall, someLarge}} {
				if c[1].trips > c[0].trips+st.slack || c[1].bytes > c[0].bytes+slack {
					t.Errorf("%s: the newest missed events cost %d round trips and %d bytes with %d slots of other history, %d and %d with %d: the read walks the history",
						st.name, c[0].trips, c[0].bytes, small, c[1].trips, c[1].bytes, large)
				}
			}
		})
	}
}

// missedCost reads q on a fresh client through a relay, wants n entries, and counts the read.
func missedCost(t *testing.T, dsn string, q store.HistoryQuery, n int) wire {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relay, via := relayed(t, ctx, dsn)
	s, err := store.Open(ctx, via)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Slot(ctx, "warm", "x"); err != nil { // the client's own first round trips
		t.Fatal(err)
	}
	t0, b0 := relay.Trips(), relay.Received()
	es, err := s.History(ctx, q)
	if err != nil || len(es) != n {
		t.Fatalf("History %+v: %d entries, %v; want %d", q, len(es), err, n)
	}
	return wire{relay.Trips() - t0, relay.Received() - b0}
}
