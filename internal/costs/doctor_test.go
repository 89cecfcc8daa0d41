package costs

import (
	"context"
	"testing"

	"github.com/once-run/once/store"
)

// TestDoctorHistoryFlat holds once doctor's history-index check on the key-value stores
// (kvstore.Ledger.CheckHistory) to its window: the same round trips and about the same bytes with 80
// or 400 slots of history. Before, it read every document of every task to find those an older once
// wrote beside this one (Redis 26 → 131 kB, ZooKeeper 85 → 405 round trips at 80 → 400 slots).
func TestDoctorHistoryFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" { // no history index: SQL
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "long", 0, h.small)
			seedSlots(t, ctx, seed, "other", 0, 3)
			if _, err := seed.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1}); err != nil { // builds the indexes
				t.Fatal(err)
			}
			before := doctorCost(t, dsn)
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			after := doctorCost(t, dsn)
			// ZooKeeper lists the newest 4-second bucket of a task's marks (its millisecond
			// buckets): their number is the seeding's write rate, not the history's length (two
			// runs: 9.5 and 11.9 kB at 80 slots, 11.3 and 13.0 kB at 400; a loaded clean-clone
			// run: 10.8 kB at 80, 21.8 kB at 400, the 320 slots seeded faster than the first 80);
			// the round trips stay, and they are what a read of the whole history multiplies
			// (85 → 405 at 80 → 400 slots before).
			// For the same reason its round trips: the newest 16 entries lie in one bucket or in
			// up to 16 when seeded slowly (a loaded run: 10 at 80 slots, 15 at 400).
			slackBytes, sc := int64(512), st
			if st.name == "zk" {
				slackBytes, sc.slack = 2*before.bytes, st.slack+16
			}
			wantFlat(t, sc, "doctor's history-index check", h, before, after, slackBytes)
		})
	}
}

// doctorCost runs the history-index check on a fresh client through a relay, wants it OK, and
// counts it.
func doctorCost(t *testing.T, dsn string) wire {
	return counted(t, dsn, func(ctx context.Context, s store.Store) {
		c, ok := s.(interface {
			CheckHistory(context.Context) []store.Finding
		})
		if !ok {
			t.Fatal("no CheckHistory")
		}
		fs := c.CheckHistory(ctx)
		if len(fs) != 1 || fs[0].Level != store.LevelOK {
			t.Fatalf("CheckHistory: %+v, want one ok finding", fs)
		}
	})
}
