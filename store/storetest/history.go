package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testWaitingOrder: Waiting lists the slots by the time their last attempt ended, not started,
// then by task and slot. Slot "early" starts first and ends last; "late" starts last and ends
// first; a review and an unknown outcome are mixed.
func testWaitingOrder(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	other := acquire(t, s, "alpha", "a", time.Minute)
	begin(t, s, l, "early", "r-early", 1)
	pause()
	begin(t, s, l, "late", "r-late", 1)
	pause()
	finish(t, s, "r-late", l.Token, store.Unknown, 143)
	pause()
	finish(t, s, "r-early", l.Token, store.Failed, 1)
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "early", Kind: store.Review, Attempt: 1, Note: "attempts used up"}); err != nil {
		t.Fatal(err)
	}
	pause()
	begin(t, s, other, "x", "r-x", 1)
	finish(t, s, "r-x", other.Token, store.Unknown, 143)
	w, err := s.Waiting(ctx)
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	var got []string
	for _, st := range w {
		got = append(got, st.Task+"/"+st.Slot)
	}
	if want := []string{"job/late", "job/early", "alpha/x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Waiting = %v, want %v: oldest first by the end of the last attempt", got, want)
	}
	// A new attempt ends the wait (--on-unknown rerun), a resolution too.
	begin(t, s, l, "late", "r-late2", 2)
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "alpha", Slot: "x", As: store.Failed, By: "p"}); err != nil {
		t.Fatal(err)
	}
	if w, err = s.Waiting(ctx); err != nil || len(w) != 1 || w[0].Slot != "early" {
		t.Fatalf("Waiting after a rerun and a resolve = %+v, %v; want job/early", w, err)
	}
}

// testHistoryPages: walking history by cursors, forwards (Before) and back (After), gives the
// same entries in the same order as one read, with filters (a Kind among them: exactly the entries
// of that kind), while new entries are written.
func testHistoryPages(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	lo := acquire(t, s, "other", "a", time.Minute)
	for i := range 4 {
		slot := fmt.Sprintf("d%d", i%2)
		begin(t, s, l, slot, fmt.Sprintf("r%d", i), i/2+1)
		finish(t, s, fmt.Sprintf("r%d", i), l.Token, store.Failed, 1)
		if err := o.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: store.Busy, RunID: fmt.Sprintf("b%d", i), Holder: "b"}); err != nil {
			t.Fatal(err)
		}
		begin(t, s, lo, slot, fmt.Sprintf("o%d", i), i/2+1)
		finish(t, s, fmt.Sprintf("o%d", i), lo.Token, store.Succeeded, 0)
		pause()
	}
	// Entries at the same instant, as a busy store's clock gives them: order still total.
	for i := range 3 {
		if err := o.Record(ctx, store.Event{Task: "job", Slot: "d0", Kind: store.Skipped, RunID: fmt.Sprintf("s%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Missed events, a scheduler's, of slots tried and never tried.
	for i, slot := range []string{"d1", "d2", "d0", "d3", "d1"} {
		if err := o.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: store.Missed, RunID: fmt.Sprintf("m%d", i), Holder: "node"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []store.HistoryQuery{{}, {Task: "job"}, {Task: "job", Slot: "d0"}, {Slot: "d1"},
		{Kind: store.Missed}, {Kind: store.Busy}, {Task: "job", Kind: store.Skipped}, {Slot: "d1", Kind: store.Succeeded}} {
		all := history(t, o, q)
		if len(all) == 0 {
			t.Fatalf("history %+v is empty", q)
		}
		if q.Kind != "" {
			checkKind(t, o, q, all)
		}
		seen := map[string]bool{}
		for _, e := range all {
			if e.Cursor == "" || seen[e.Cursor] {
				t.Fatalf("history %+v: entry %s has cursor %q (empty or repeated)", q, entryRuns([]store.Entry{e}), e.Cursor)
			}
			seen[e.Cursor] = true
		}
		sizes := []int{1, 2, 5}
		if q.Kind != "" {
			sizes = []int{1, 3} // fewer walks (each writes an entry) on a page already short
		}
		for _, size := range sizes {
			walkPages(t, s, o, q, size)
		}
		// Between two cursors.
		if all := history(t, o, q); len(all) >= 4 {
			mid := q
			mid.Before, mid.After = all[0].Cursor, all[3].Cursor
			if got, want := entryRuns(history(t, o, mid)), entryRuns(all[1:3]); got != want {
				t.Fatalf("history %+v between entries 0 and 3:\n got %s\nwant %s", q, got, want)
			}
		}
	}
	for _, bad := range []string{"x", "1.a", "1.z.3", "01.a.3", "1.a.-3", "1.a.3.!!"} {
		_, err := o.History(ctx, store.HistoryQuery{Before: bad})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("History with cursor %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, bad := range []store.State{"Missed", "done", "missed ", "x\n"} {
		_, err := o.History(ctx, store.HistoryQuery{Kind: bad, Limit: 5})
		if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("History of kind %q: %v, want one line wrapping ErrInvalid", bad, err)
		}
	}
}

// checkKind: history q (with a Kind) is exactly the entries of that kind of history q without it,
// in the same order.
func checkKind(t *testing.T, s store.Store, q store.HistoryQuery, got []store.Entry) {
	t.Helper()
	every := q
	every.Kind = ""
	var want []store.Entry
	for _, e := range history(t, s, every) {
		if e.State == q.Kind {
			want = append(want, e)
		}
	}
	if g, w := entryRuns(got), entryRuns(want); g != w {
		t.Fatalf("history %+v:\n got %s\nwant %s", q, g, w)
	}
	for i := range got {
		if got[i].Cursor != want[i].Cursor {
			t.Fatalf("history %+v: entry %d has cursor %s, %s without the kind", q, i, got[i].Cursor, want[i].Cursor)
		}
	}
}

// walkPages walks history q in pages of size, forwards (with an entry written by s in the middle of
// the walk, newer, so not in it) and back from the oldest entry, and compares with one read.
func walkPages(t *testing.T, s, o store.Store, q store.HistoryQuery, size int) {
	t.Helper()
	ctx := ctxT(t)
	// Forwards, with an entry written in the middle of the walk (newer: not in the walk).
	all := history(t, o, q)
	var walked []store.Entry
	page := q
	page.Limit = size
	for n := 0; ; n++ {
		es := history(t, o, page)
		walked = append(walked, es...)
		if n == 1 {
			if err := s.Record(ctx, store.Event{Task: "job", Slot: "d0", Kind: store.Busy, RunID: "mid-walk"}); err != nil {
				t.Fatal(err)
			}
		}
		if len(es) < size {
			break
		}
		page.Before = es[len(es)-1].Cursor
	}
	if got, want := entryRuns(walked), entryRuns(all); got != want {
		t.Fatalf("history %+v in pages of %d:\n got %s\nwant %s", q, size, got, want)
	}
	// Back from the oldest entry: After gives the page nearest to it, newest first.
	cur := history(t, o, q)
	var back []store.Entry
	page = q
	page.Limit, page.After = size, cur[len(cur)-1].Cursor
	for {
		es := history(t, o, page)
		back = append(es, back...)
		if len(es) < size {
			break
		}
		page.After = es[0].Cursor
	}
	if got, want := entryRuns(back), entryRuns(cur[:len(cur)-1]); got != want {
		t.Fatalf("history %+v back in pages of %d:\n got %s\nwant %s", q, size, got, want)
	}
}

// pruneSlot is a slot testPrune builds and what Prune must keep of it.
type pruneSlot struct {
	slot string
	keep string // the run ids (and event run ids) kept, oldest first
}

// testPrune: Prune removes superseded attempts of settled slots and old events, and nothing any
// decision reads: Slot and Waiting say the same after it, attempt numbers go on, dry runs count
// the same and change nothing, a second prune removes nothing, other tasks are left alone.
func testPrune(t *testing.T, h Harness) {
	s, l, cutoff := seedPrune(t, h)
	ctx := ctxT(t)
	slots := []pruneSlot{
		{"done", "d2 d3 d-new"},
		{"failing", "f1 f2"},
		{"review", "v1 v-rev"},
		{"unknown", "u1 u2"},
		{"again", "a2 a4 a5"},
		{"settled", "s2"},
		{"running", "n1 n2"},
	}
	before := map[string]store.SlotState{}
	for _, p := range slots {
		before[p.slot] = slotState(t, s, "job", p.slot)
	}
	waiting, err := s.Waiting(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := history(t, s, store.HistoryQuery{})
	r := store.PruneRequest{Before: cutoff, Task: "job"}

	dry := r
	dry.DryRun = true
	counted, err := s.Prune(ctx, dry)
	if err != nil {
		t.Fatalf("Prune dry run: %v", err)
	}
	if got := history(t, s, store.HistoryQuery{}); entryRuns(got) != entryRuns(all) {
		t.Fatalf("a dry run changed history:\n got %s\nwant %s", entryRuns(got), entryRuns(all))
	}
	// Since: what happened before the skipped event of slot done (its attempts) is left alone.
	var since time.Time
	for _, e := range all {
		if e.RunID == "d-skip" {
			since = e.StartedAt
		}
	}
	window := r
	window.Since = since
	got, err := s.Prune(ctx, window)
	if err != nil {
		t.Fatalf("Prune since %s: %v", since, err)
	}
	if want := (store.PruneResult{Attempts: 3, Events: 3}); got != want {
		t.Fatalf("Prune since the skipped event removed %+v, want %+v (a1, a3, s1; d-skip, d-busy, a-rev)", got, want)
	}
	rest, err := s.Prune(ctx, r)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	got.Add(rest)
	// Removed: d1, d-skip, d-busy, a1, a3, a-rev (a review about attempt 3, which a person
	// resolved), s1. Kept: everything that a decision reads.
	if want := (store.PruneResult{Attempts: 4, Events: 3}); got != want || counted != want {
		t.Fatalf("Prune removed %+v, its dry run counted %+v; want %+v", got, counted, want)
	}
	checkPruned(t, s, slots, before, len(waiting))
	if again, err := s.Prune(ctx, r); err != nil || again != (store.PruneResult{}) {
		t.Fatalf("second prune: %+v, %v; want nothing removed", again, err)
	}
	// Attempt numbers go on after the pruned ones; the checkpoint is handed on.
	begin(t, s, l, "failing", "f3", 3)
	if st := slotState(t, s, "job", "failing"); st.Failures != 2 {
		t.Fatalf("failing slot after prune: %d failures, want 2 (its budget)", st.Failures)
	}
	// Every task: other's superseded attempt goes too.
	if got, err := s.Prune(ctx, store.PruneRequest{Before: cutoff}); err != nil || got != (store.PruneResult{Attempts: 1}) {
		t.Fatalf("prune of every task: %+v, %v; want other's attempt o1", got, err)
	}
	for _, bad := range []store.PruneRequest{{}, {Before: cutoff, Since: since, ForgetSlots: true}} {
		if _, err := s.Prune(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Prune(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

// seedPrune writes the history testPrune prunes: task job, one slot per rule of what a prune must
// keep, and task other; it returns the store, job's lease and the cutoff, after which it wrote a
// little more.
func seedPrune(t *testing.T, h Harness) (store.Store, store.Lease, time.Time) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	lo := acquire(t, s, "other", "a", time.Minute)
	att := func(slot, run string, n int, st store.State, checkpoint string) {
		t.Helper()
		begin(t, s, l, slot, run, n)
		if checkpoint != "" {
			if err := s.Report(ctx, run, l.Token, store.Report{Checkpoint: checkpoint}); err != nil {
				t.Fatal(err)
			}
		}
		if st != store.Running {
			finish(t, s, run, l.Token, st, 1)
		}
	}
	event := func(slot string, kind store.State, run string, attempt int) {
		t.Helper()
		if err := s.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: kind, RunID: run, Attempt: attempt}); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func(slot string, as store.State) {
		t.Helper()
		if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: slot, As: as, By: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	// done: failed twice (the second with a checkpoint), then succeeded.
	att("done", "d1", 1, store.Failed, "")
	att("done", "d2", 2, store.Failed, "cp-d")
	att("done", "d3", 3, store.Succeeded, "")
	event("done", store.Skipped, "d-skip", 3)
	event("done", store.Busy, "d-busy", 0)
	// failing: two failures, unresolved: its budget.
	att("failing", "f1", 1, store.Failed, "")
	att("failing", "f2", 2, store.Failed, "")
	// review: used up, a review event makes it wait.
	att("review", "v1", 1, store.Failed, "")
	event("review", store.Review, "v-rev", 1)
	// unknown: its holder vanished; waits.
	att("unknown", "u1", 1, store.Failed, "")
	att("unknown", "u2", 2, store.Unknown, "")
	// again: resolved as failed, runs again with the checkpoint of attempt 2.
	att("again", "a1", 1, store.Failed, "")
	att("again", "a2", 2, store.Failed, "cp-a")
	att("again", "a3", 3, store.Failed, "")
	event("again", store.Review, "a-rev", 3)
	resolve("again", store.Failed)
	// settled: unknown, resolved as succeeded.
	att("settled", "s1", 1, store.Failed, "")
	att("settled", "s2", 2, store.Unknown, "")
	resolve("settled", store.Succeeded)
	// running: superseded attempts kept too (not settled).
	att("running", "n1", 1, store.Failed, "")
	att("running", "n2", 2, store.Running, "")
	// Another task's history, outside a prune of job.
	begin(t, s, lo, "o", "o1", 1)
	finish(t, s, "o1", lo.Token, store.Failed, 1)
	begin(t, s, lo, "o", "o2", 2)
	finish(t, s, "o2", lo.Token, store.Succeeded, 0)
	cutoff := after(t, s)
	time.Sleep(20 * time.Millisecond)
	// After the cutoff: a new event and a superseded attempt are kept.
	event("done", store.Busy, "d-new", 0)
	att("again", "a4", 4, store.Failed, "")
	att("again", "a5", 5, store.Succeeded, "")
	if h := history(t, s, store.HistoryQuery{Limit: 1}); !h[0].StartedAt.After(cutoff) {
		t.Fatalf("the store's clock went back: %s after %s", h[0].StartedAt, cutoff)
	}
	return s, l, cutoff
}

// checkPruned checks each slot of job after the prune: the runs it keeps, and its state as a
// decision reads it (last attempt, checkpoint, waiting, failures) unchanged; Waiting unchanged.
func checkPruned(t *testing.T, s store.Store, slots []pruneSlot, before map[string]store.SlotState, waiting int) {
	t.Helper()
	for _, p := range slots {
		var runs []string
		es := history(t, s, store.HistoryQuery{Task: "job", Slot: p.slot})
		for i := len(es) - 1; i >= 0; i-- {
			runs = append(runs, es[i].RunID)
		}
		if fmt.Sprint(runs) != "["+p.keep+"]" {
			t.Errorf("slot %s after prune keeps %v, want [%s]", p.slot, runs, p.keep)
		}
		after := slotState(t, s, "job", p.slot)
		b := before[p.slot]
		if after.Last.RunID != b.Last.RunID || after.Checkpoint != b.Checkpoint || after.Waiting != b.Waiting ||
			(after.Failures != b.Failures && !store.Done(*b.Last)) {
			t.Errorf("slot %s: %+v before prune, %+v after", p.slot, b, after)
		}
	}
	if w, err := s.Waiting(ctxT(t)); err != nil || len(w) != waiting || len(w) != 2 || w[0].Slot != "review" || w[1].Slot != "unknown" {
		t.Fatalf("Waiting after prune = %+v, %v; want job/review and job/unknown as before", w, err)
	}
	if got := entryRuns(history(t, s, store.HistoryQuery{Task: "other"})); got != "other/o:succeeded:o2 other/o:failed:o1" {
		t.Fatalf("prune of task job touched task other: %s", got)
	}
}

// testPruneForget: with ForgetSlots, a slot that is done and ended before the cutoff goes whole,
// attempts and events together; a done slot with an entry since, a slot waiting for review, a
// failing one and a running one stay.
func testPruneForget(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	run := func(slot, id string, n int, st store.State) {
		t.Helper()
		begin(t, s, l, slot, id, n)
		if st != store.Running {
			finish(t, s, id, l.Token, st, 0)
		}
	}
	run("old", "o1", 1, store.Failed)
	run("old", "o2", 2, store.Succeeded)
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "old", Kind: store.Busy, RunID: "o-busy"}); err != nil {
		t.Fatal(err)
	}
	run("checked", "c1", 1, store.Succeeded)
	run("waits", "w1", 1, store.Unknown)
	run("fails", "f1", 1, store.Failed)
	run("runs", "r1", 1, store.Running)
	run("resolved", "x1", 1, store.Failed)
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "resolved", As: store.Succeeded, By: "p"}); err != nil {
		t.Fatal(err)
	}
	cutoff := after(t, s)
	time.Sleep(20 * time.Millisecond)
	// A later look at slot "checked" (a catch-up that skipped it): it is not forgotten.
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "checked", Kind: store.Skipped, RunID: "c-skip", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	got, counted := pruneAfterDryRun(t, s, store.PruneRequest{Before: cutoff, ForgetSlots: true})
	if want := (store.PruneResult{Attempts: 3, Events: 1, Slots: 2}); got != want || counted != want {
		t.Fatalf("Prune forgetting slots removed %+v, its dry run counted %+v; want %+v", got, counted, want)
	}
	for slot, gone := range map[string]bool{"old": true, "resolved": true, "checked": false, "waits": false, "fails": false, "runs": false} {
		st := slotState(t, s, "job", slot)
		if gone != (st.Last == nil) {
			t.Errorf("slot %s after forgetting: %+v (forgotten: %v)", slot, st.Last, gone)
		}
	}
	if es := history(t, s, store.HistoryQuery{Task: "job", Slot: "old"}); len(es) != 0 {
		t.Fatalf("a forgotten slot left history: %s", entryRuns(es))
	}
	// A forgotten slot is a slot never run: it can run again from attempt 1.
	run("old", "o3", 1, store.Succeeded)
	if w, err := s.Waiting(ctx); err != nil || len(w) != 1 || w[0].Slot != "waits" {
		t.Fatalf("Waiting after forgetting = %+v, %v", w, err)
	}
}

// testPruneMissed: Prune removes old missed events as it removes busy ones — of a slot never tried,
// a failing one and one waiting for review — and keeps the newer ones; Slot and Waiting are as
// before.
func testPruneMissed(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	slots, _ := missedSlots(t, s)
	event := func(slot string, kind store.State, run string) {
		t.Helper()
		if err := s.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: kind, RunID: run, Holder: "node"}); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]store.SlotState{}
	for _, slot := range slots {
		event(slot, store.Missed, "m-"+slot)
		event(slot, store.Busy, "b-"+slot)
		before[slot] = slotState(t, s, "job", slot)
	}
	cutoff := after(t, s)
	time.Sleep(20 * time.Millisecond)
	event("never", store.Missed, "m-new")
	got, counted := pruneAfterDryRun(t, s, store.PruneRequest{Before: cutoff})
	if want := (store.PruneResult{Events: 6}); got != want || counted != want {
		t.Fatalf("Prune removed %+v, its dry run counted %+v; want %+v: every old missed and busy event", got, counted, want)
	}
	if got := entryRuns(history(t, s, store.HistoryQuery{Kind: store.Missed})); got != "job/never:missed:m-new" {
		t.Fatalf("missed events after prune: %s; want the one after the cutoff", got)
	}
	for slot, b := range before {
		if st := slotState(t, s, "job", slot); !reflect.DeepEqual(st, b) {
			t.Errorf("slot %s: %+v before prune, %+v after", slot, b, st)
		}
	}
	if w, err := s.Waiting(ctx); err != nil || len(w) != 1 || w[0].Slot != "waits" {
		t.Fatalf("Waiting after prune = %+v, %v; want job/waits", w, err)
	}
}

// pruneAfterDryRun prunes r from s, first as a dry run: what the dry run counted, and what the
// prune removed.
func pruneAfterDryRun(t *testing.T, s store.Store, r store.PruneRequest) (got, counted store.PruneResult) {
	t.Helper()
	dry := r
	dry.DryRun = true
	counted, err := s.Prune(ctxT(t), dry)
	if err != nil {
		t.Fatalf("Prune dry run: %v", err)
	}
	if got, err = s.Prune(ctxT(t), r); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	return got, counted
}

// after returns an instant after every time in s's history (starts and ends).
func after(t *testing.T, s store.Store) time.Time {
	t.Helper()
	var last time.Time
	for _, e := range history(t, s, store.HistoryQuery{}) {
		for _, at := range []*time.Time{&e.StartedAt, e.EndedAt} {
			if at != nil && at.After(last) {
				last = *at
			}
		}
	}
	return last.Add(time.Microsecond)
}

// testPruneSlotless: a task without a slot keeps its last run only, whatever its state: its failed
// runs before it are not a retry budget (nothing decides by them) and go like superseded attempts.
// They were all kept while the last run failed, so a broken job run every minute kept every run.
func testPruneSlotless(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	l := acquire(t, s, "nos", "a", time.Minute)
	for i, st := range []store.State{store.Failed, store.Succeeded, store.Failed, store.Failed} {
		run := fmt.Sprintf("n%d", i+1)
		begin(t, s, l, "", run, i+1)
		finish(t, s, run, l.Token, st, 1)
	}
	time.Sleep(10 * time.Millisecond)
	got, err := s.Prune(ctx, store.PruneRequest{Before: time.Now(), Task: "nos"})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if want := (store.PruneResult{Attempts: 3}); got != want {
		t.Fatalf("Prune of a task without a slot removed %+v, want %+v (all but its last run)", got, want)
	}
	if st := slotState(t, s, "nos", ""); st.Last == nil || st.Last.Number != 4 {
		t.Fatalf("after prune: %+v, want its last run (4) kept", st.Last)
	}
}
