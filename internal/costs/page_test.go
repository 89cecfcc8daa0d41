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
	small, large := 80, 400
	if testing.Short() {
		small, large = 40, 160
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "other", 0, 30)
			seedSlots(t, ctx, seed, "long", 0, small)
			q := store.HistoryQuery{Task: "long", Limit: 20}
			all := store.HistoryQuery{Limit: 20}
			pageCost(t, dsn, q) // the first read of a prefix builds nothing (the index is built) but warms
			before, beforeAll := pageCost(t, dsn, q), pageCost(t, dsn, all)
			seedSlots(t, ctx, seed, "long", small, large)
			after, afterAll := pageCost(t, dsn, q), pageCost(t, dsn, all)
			t.Logf("%s: a page of 20 of a task with %d slots: %d round trips, %d bytes; with %d: %d, %d; of all tasks: %d, %d and %d, %d",
				st.name, small, before.trips, before.bytes, large, after.trips, after.bytes, beforeAll.trips, beforeAll.bytes, afterAll.trips, afterAll.bytes)
			// ZooKeeper lists whole buckets of a second's marks (store/zk/history.go): seeded
			// through the API, a second holds up to a hundred marks, about 3 kB, as many as the
			// seeding's speed put there. Reading every document (before the index): 100 kB and more.
			slackBytes := int64(2048)
			if st.name == "zk" {
				slackBytes = 8 << 10
			}
			for _, c := range [][2]wire{{before, after}, {beforeAll, afterAll}} {
				if c[1].trips > c[0].trips+st.slack || c[1].bytes > c[0].bytes+slackBytes {
					t.Errorf("%s: a page of 20 cost %d round trips and %d bytes with %d slots, %d and %d with %d: a page reads the history",
						st.name, c[0].trips, c[0].bytes, small, c[1].trips, c[1].bytes, large)
				}
			}
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relay, via := relayed(t, ctx, dsn)
	s, err := store.Open(ctx, via)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Slot(ctx, "warm", "x"); err != nil { // the client's own first round trips (a Cluster's slots, a script load)
		t.Fatal(err)
	}
	t0, b0 := relay.Trips(), relay.Received()
	es, err := s.History(ctx, q)
	if err != nil || len(es) != q.Limit {
		t.Fatalf("History %+v: %d entries, %v", q, len(es), err)
	}
	return wire{relay.Trips() - t0, relay.Received() - b0}
}

// TestHistorySlotFlat holds once history --slot S without --task on the key-value stores to the
// slot: the same round trips and about the same bytes with 80 or 400 slots of other history (each
// task's document of the slot, and its archives). Before, it walked every task's history index back
// to the slot's time, reading the documents on the way.
func TestHistorySlotFlat(t *testing.T) {
	small, large := 80, 400
	if testing.Short() {
		small, large = 40, 160
	}
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" {
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			seedSlots(t, ctx, seed, "other", 0, 3)
			seedSlots(t, ctx, seed, "long", 0, small)
			q := store.HistoryQuery{Slot: "h00001", Limit: 20}                         // the oldest slots but one: both tasks have it
			if _, err := seed.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // builds the index
				t.Fatal(err)
			}
			before := slotCost(t, dsn, q)
			seedSlots(t, ctx, seed, "long", small, large)
			after := slotCost(t, dsn, q)
			t.Logf("%s: history --slot with %d slots: %d round trips, %d bytes; %d slots: %d, %d",
				st.name, small, before.trips, before.bytes, large, after.trips, after.bytes)
			if after.trips > before.trips+st.slack || after.bytes > before.bytes+512 {
				t.Errorf("%s: history --slot cost %d round trips and %d bytes with %d slots, %d and %d with %d: it walks the history",
					st.name, before.trips, before.bytes, small, after.trips, after.bytes, large)
			}
		})
	}
}

// slotCost reads q on a fresh client through a relay, wants the slot's attempt in both tasks, and
// counts the read.
func slotCost(t *testing.T, dsn string, q store.HistoryQuery) wire {
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
	if err != nil || len(es) != 2 || es[0].Slot != q.Slot || es[1].Slot != q.Slot {
		t.Fatalf("History %+v: %d entries, %v; want the slot's attempt in both tasks", q, len(es), err)
	}
	return wire{relay.Trips() - t0, relay.Received() - b0}
}
