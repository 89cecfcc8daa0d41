package costs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestKindFlat holds a page of one kind of entry (once history --kind, the dashboard's filter of
// an event kind) to what it finds on the key-value stores: a task's busy events, every task's, and
// a task's failed attempts cost the same round trips and about the same bytes with 80 or 400 slots
// of other history (each task's index of a kind, internal/kvstore's IndexedKinds). Before, a kind
// other than missed walked the task's marks (every task's) past the entries of other kinds, and read
// the document of each attempt it passed for an attempt state.
func TestKindFlat(t *testing.T) {
	h := historySizes()
	for _, st := range stores {
		if st.name == "postgres" || st.name == "mysql" { // a task's kind, an attempt state: the time index, past other kinds
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			for i := range 2 {
				if err := seed.Record(ctx, store.Event{Task: "long", Slot: fmt.Sprintf("b%d", i), Kind: store.Busy, Holder: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := seed.Record(ctx, store.Event{Task: "cron", Slot: "b", Kind: store.Busy, Holder: "other"}); err != nil {
				t.Fatal(err)
			}
			seedFailed(t, ctx, seed, "long", "f")
			seedSlots(t, ctx, seed, "long", 0, h.small)
			qs := []store.HistoryQuery{
				{Task: "long", Kind: store.Busy, Limit: 20},
				{Kind: store.Busy, Limit: 20},
				{Task: "long", Kind: store.Failed, Limit: 20},
			}
			want := []int{2, 3, 1}
			missedCost(t, dsn, qs[1], want[1]) // builds the indexes of a kind (none yet on this prefix)
			var before, after []wire
			for i, q := range qs {
				before = append(before, missedCost(t, dsn, q, want[i]))
			}
			seedSlots(t, ctx, seed, "long", h.small, h.large)
			for i, q := range qs {
				after = append(after, missedCost(t, dsn, q, want[i]))
			}
			for i, q := range qs {
				wantFlat(t, st, fmt.Sprintf("--task %q --kind %s", q.Task, q.Kind), h, before[i], after[i], 512)
			}
		})
	}
}

// seedFailed writes a failed attempt in task's slot.
func seedFailed(t *testing.T, ctx context.Context, s store.Store, task, slot string) {
	t.Helper()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "seed:1", RunID: "seed", TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	code := 1
	run := task + "-" + slot
	if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Failed, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}
