package costs

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestDoctorHistoryFlat holds once doctor's history-index check on the key-value stores
// (kvstore.Ledger.CheckHistory) to its window: the same round trips and about the same bytes with 80
// or 400 slots of history. Before, it read every document of every task to find those an older once
// wrote beside this one (Redis 26 → 131 kB, ZooKeeper 85 → 405 round trips at 80 → 400 slots).
func TestDoctorHistoryFlat(t *testing.T) {
	small, large := 80, 400
	if testing.Short() {
		small, large = 40, 160
	}
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" { // no history index: SQL
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "long", 0, small)
			seedSlots(t, ctx, seed, "other", 0, 3)
			if _, err := seed.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1}); err != nil { // builds the indexes
				t.Fatal(err)
			}
			before := doctorCost(t, dsn)
			seedSlots(t, ctx, seed, "long", small, large)
			after := doctorCost(t, dsn)
			t.Logf("%s: doctor's history-index check with %d slots: %d round trips, %d bytes; %d slots: %d, %d",
				st.name, small, before.trips, before.bytes, large, after.trips, after.bytes)
			// ZooKeeper lists the newest 4-second bucket of a task's marks (its millisecond
			// buckets): their number is the seeding's write rate, not the history's length (two
			// runs: 9.5 and 11.9 kB at 80 slots, 11.3 and 13.0 kB at 400); the round trips stay.
			slackBytes := int64(512)
			if st.name == "zk" {
				slackBytes = before.bytes
			}
			if after.trips > before.trips+st.slack || after.bytes > before.bytes+slackBytes {
				t.Errorf("%s: doctor's history-index check cost %d round trips and %d bytes with %d slots, %d and %d with %d: it reads the history",
					st.name, before.trips, before.bytes, small, after.trips, after.bytes, large)
			}
		})
	}
}

// doctorCost runs the history-index check on a fresh client through a relay, wants it OK, and
// counts it.
func doctorCost(t *testing.T, dsn string) wire {
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
	c, ok := s.(interface {
		CheckHistory(context.Context) []store.Finding
	})
	if !ok {
		t.Fatal("no CheckHistory")
	}
	t0, b0 := relay.Trips(), relay.Received()
	fs := c.CheckHistory(ctx)
	if len(fs) != 1 || fs[0].Level != store.LevelOK {
		t.Fatalf("CheckHistory: %+v, want one ok finding", fs)
	}
	return wire{relay.Trips() - t0, relay.Received() - b0}
}
