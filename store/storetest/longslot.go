package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// longSlotAttempts is how many attempts testLongSlot gives one slot: more than a key-value store's
// document keeps (internal/kvstore's archives move older ones out at 40, 32 at a time).
const longSlotAttempts = 100

// testLongSlot: a slot with many attempts and events (a task without a slot puts every run in
// one) keeps all of them: its state (the last attempt, the failures since the last resolution, the
// latest checkpoint) counts every attempt, history lists every attempt and event once and in order,
// by pages too, prune removes what is old from all of them, and numbering goes on after it.
func testLongSlot(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "long", "a", time.Minute)
	failures, events := 0, 0
	for i := 1; i <= longSlotAttempts; i++ {
		run := fmt.Sprintf("r%03d", i)
		begin(t, s, l, "", run, i)
		code, out := 0, store.Outcome{State: store.Succeeded}
		if i%3 == 0 {
			code, out.State = 1, store.Failed
			failures++
		}
		if i == 5 { // the only checkpoint: the slot's latest stays this one
			if err := s.Report(ctx, run, l.Token, store.Report{Checkpoint: "c5"}); err != nil {
				t.Fatal(err)
			}
		}
		out.ExitCode = &code
		if _, err := s.Finish(ctx, run, l.Token, out); err != nil {
			t.Fatalf("Finish(%s): %v", run, err)
		}
		if i%2 == 0 {
			if err := o.Record(ctx, store.Event{Task: "long", Slot: "", Kind: store.Busy, RunID: fmt.Sprintf("b%03d", i), Holder: "b"}); err != nil {
				t.Fatal(err)
			}
			events++
		}
	}
	st := slotState(t, o, "long", "")
	if st.Last == nil || st.Last.Number != longSlotAttempts || st.Failures != failures || st.Checkpoint != "c5" || st.Waiting {
		t.Fatalf("slot state after %d attempts: %+v (last %+v), want last %d, %d failures, checkpoint c5", longSlotAttempts, st, st.Last, longSlotAttempts, failures)
	}
	q := store.HistoryQuery{Task: "long"}
	all := history(t, o, q)
	next, seen := longSlotAttempts, map[string]bool{}
	nEvents := 0
	for _, e := range all {
		if e.Slot != "" || seen[e.Cursor] {
			t.Fatalf("history entry %s/%q (cursor %q): another slot, or listed twice", e.Task, e.Slot, e.Cursor)
		}
		seen[e.Cursor] = true
		if e.State == store.Busy {
			nEvents++
			continue
		}
		if e.Number != next || e.RunID != fmt.Sprintf("r%03d", next) {
			t.Fatalf("history: attempt %d (%s) where %d was due: %s", e.Number, e.RunID, next, entryRuns(all))
		}
		next--
	}
	if next != 0 || nEvents != events {
		t.Fatalf("history lists %d of %d attempts and %d of %d events", longSlotAttempts-next, longSlotAttempts, nEvents, events)
	}
	for _, size := range []int{7, 40} {
		walkPages(t, s, o, q, size)
	}
	// Prune everything before now: the last attempt (settled) stays, and the checkpoint's; every
	// other attempt and every event goes, wherever a store keeps them.
	time.Sleep(20 * time.Millisecond)
	res, err := o.Prune(ctx, store.PruneRequest{Task: "long", Before: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	left := history(t, o, q)
	if got := entryRuns(left); got != "long/:succeeded:r100 long/:succeeded:r005" {
		t.Fatalf("after prune (%+v) history is %s, want r100 and r005", res, got)
	}
	if res.Attempts != longSlotAttempts-2 || res.Events != int64(events) {
		t.Fatalf("prune removed %d attempts and %d events, want %d and %d", res.Attempts, res.Events, longSlotAttempts-2, events)
	}
	if st := slotState(t, o, "long", ""); st.Last == nil || st.Last.Number != longSlotAttempts || st.Checkpoint != "c5" || st.Failures != 0 {
		t.Fatalf("slot state after prune: %+v", st)
	}
	// Numbering goes on from the last attempt, not from what is left.
	begin(t, s, l, "", "r101", longSlotAttempts+1)
	finish(t, s, "r101", l.Token, store.Succeeded, 0)
}

// testFailuresCounted: a slot's failures are counted up to store.MaxFailures (so that reading the
// slot stays flat however many of its attempts failed): one more failure than that reads as
// MaxFailures (to Slot, and to a store.SlotsReader's Slots), and a --max-attempts of MaxFailures
// still stops it.
func testFailuresCounted(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	l := acquire(t, s, "failing", "a", 30*time.Minute)
	code := 1
	// Two thousand writes: each call has its own bound (opTimeout), not the case's one context,
	// since on a loaded machine they can take longer together than caseTimeout (the SQLite prefix
	// suite queues every case's writes for one file).
	for i := 1; i <= store.MaxFailures+1; i++ {
		run := fmt.Sprintf("f%04d", i)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err := s.Begin(ctx, store.Attempt{Task: "failing", RunID: run, Number: i, Holder: l.Holder, Token: l.Token})
		if err == nil {
			_, err = s.Finish(ctx, run, l.Token, store.Outcome{State: store.Failed, ExitCode: &code})
		}
		cancel()
		if err != nil {
			t.Fatalf("attempt #%d: %v", i, err)
		}
	}
	if st := slotState(t, s, "failing", ""); st.Failures != store.MaxFailures || st.Last == nil || st.Last.Number != store.MaxFailures+1 {
		t.Fatalf("after %d failures: %+v, want Failures %d", store.MaxFailures+1, st, store.MaxFailures)
	}
	if sr, ok := s.(store.SlotsReader); ok { // its own count of them, to the same bound
		sts, err := sr.Slots(ctxT(t), "failing", []string{""})
		if err != nil || len(sts) != 1 || sts[0].Failures != store.MaxFailures || !reflect.DeepEqual(sts[0], slotState(t, s, "failing", "")) {
			t.Fatalf("Slots after %d failures: %+v, %v; want Slot's, Failures %d", store.MaxFailures+1, sts, err, store.MaxFailures)
		}
	}
}
