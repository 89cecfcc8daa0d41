package costs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestHistoryPageFlat holds a page of history to the page: on the key-value stores a page of 20
// entries, of one task or of all, costs the same round trips and about the same bytes with 80 or
// 400 slots of history (the SQL stores are measured alongside, for comparison) (the history index, internal/kvstore's HistoryKV). Before the index a page
// read every document of the task, or of every task.
func TestHistoryPageFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "other", 0, 30)
			seedSlots(t, ctx, seed, "long", 0, h.small)
			q := store.HistoryQuery{Task: "long", Limit: 20}
			all := store.HistoryQuery{Limit: 20}
			pageCost(t, dsn, q) // the first read of a prefix builds nothing (the index is built) but warms
			before, beforeAll := pageCost(t, dsn, q), pageCost(t, dsn, all)
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			after, afterAll := pageCost(t, dsn, q), pageCost(t, dsn, all)
			// ZooKeeper lists whole buckets of a second's marks (store/zk/history.go): seeded
			// through the API, a second holds as many marks as the seeding's speed put there, and
			// the 320 slots more are seeded faster than the first 80 (a build without -race: 11.0
			// → 22.2 kB, the round trips 8 → 10), so it may read twice the first page's bytes
			// more, as TestDoctorHistoryFlat. Reading every document (before the index): 100 kB
			// and more, and a round trip a document.
			slack := func(small wire) int64 {
				if st.name == "zk" {
					return max(8<<10, 2*small.bytes)
				}
				return 2048
			}
			wantFlat(t, st, "a page of 20 of a task", h, before, after, slack(before))
			wantFlat(t, st, "a page of 20 of all tasks", h, beforeAll, afterAll, slack(beforeAll))
		})
	}
}

// seedSlots writes an attempt, succeeded, in task's slots from to to-1.
func seedSlots(t *testing.T, ctx context.Context, s store.Store, task string, from, to int) {
	t.Helper()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "seed:1", RunID: "seed", TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	for i := from; i < to; i++ {
		run := fmt.Sprintf("%s-%d", task, i)
		if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: fmt.Sprintf("h%05d", i), RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// pageCost reads a page q on a fresh client through a relay and counts it.
func pageCost(t *testing.T, dsn string, q store.HistoryQuery) wire {
	return counted(t, dsn, func(ctx context.Context, s store.Store) {
		es, err := s.History(ctx, q)
		if err != nil || len(es) != q.Limit {
			t.Fatalf("History %+v: %d entries, %v", q, len(es), err)
		}
	})
}

// TestHistorySlotFlat holds once history --slot S without --task on the key-value stores to the
// slot: the same round trips and about the same bytes with 80 or 400 slots of other history (each
// task's document of the slot, and its archives). Before, it walked every task's history index back
// to the slot's time, reading the documents on the way.
func TestHistorySlotFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" {
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "other", 0, 3)
			seedSlots(t, ctx, seed, "long", 0, h.small)
			q := store.HistoryQuery{Slot: "h00001", Limit: 20}                         // the oldest slots but one: both tasks have it
			if _, err := seed.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // builds the index
				t.Fatal(err)
			}
			before := slotCost(t, dsn, q)
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			after := slotCost(t, dsn, q)
			wantFlat(t, st, "history --slot", h, before, after, 512)
		})
	}
}

// slotCost reads q on a fresh client through a relay, wants the slot's attempt in both tasks, and
// counts the read.
func slotCost(t *testing.T, dsn string, q store.HistoryQuery) wire {
	return counted(t, dsn, func(ctx context.Context, s store.Store) {
		es, err := s.History(ctx, q)
		if err != nil || len(es) != 2 || es[0].Slot != q.Slot || es[1].Slot != q.Slot {
			t.Fatalf("History %+v: %d entries, %v; want the slot's attempt in both tasks", q, len(es), err)
		}
	})
}
