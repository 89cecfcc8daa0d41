package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The ledger cases: attempts fenced by the lease's token, events, history, review and resolve.

// testFinishUnknown: a run that stopped its work because it lost its lease finishes its attempt
// as unknown; the slot then waits for review. Running is not a final state.
func testFinishUnknown(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "u1", "r1", 1)
	_, err := s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Running})
	wantErr(t, "finish as running", err, store.ErrConflict)
	u := finish(t, s, "r1", l.Token, store.Unknown, 143)
	if u.State != store.Unknown || u.EndedAt == nil || u.ExitCode == nil || *u.ExitCode != 143 {
		t.Fatalf("finished as unknown: %+v", u)
	}
	if st := slotState(t, s, "job", "u1"); st.Last == nil || st.Last.State != store.Unknown || !st.Waiting || st.Failures != 1 {
		t.Fatalf("slot after an unknown finish: %+v", st)
	}
}

func testBeginFinish(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	if st := slotState(t, s, "job", "d1"); st.Last != nil || st.Failures != 0 || st.Waiting {
		t.Fatalf("empty slot: %+v", st)
	}
	a1 := begin(t, s, l, "d1", "r1", 1)
	if st := slotState(t, s, "job", "d1"); st.Last == nil || st.Last.RunID != "r1" || st.Last.State != store.Running {
		t.Fatalf("slot after begin: %+v", st)
	}
	_, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "d1", RunID: "r2", Number: 2, Holder: "a", Token: l.Token})
	wantErr(t, "begin while an attempt is running", err, store.ErrConflict)
	f := finish(t, s, "r1", l.Token, store.Failed, 3)
	if !f.StartedAt.Equal(a1.StartedAt) || f.EndedAt.Before(f.StartedAt) {
		t.Fatalf("finished attempt times: %+v", f)
	}
	_, err = s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Succeeded})
	wantErr(t, "finish twice", err, store.ErrConflict)
	_, err = s.Finish(ctx, "no-such-run", l.Token, store.Outcome{State: store.Succeeded})
	wantErr(t, "finish of an unknown run id", err, store.ErrNotFound)
	_, err = s.Begin(ctx, store.Attempt{Task: "job", Slot: "d1", RunID: "r1b", Number: 1, Holder: "a", Token: l.Token})
	wantErr(t, "begin with a duplicate attempt number", err, store.ErrConflict)
	begin(t, s, l, "d1", "r2", 2)
	finish(t, s, "r2", l.Token, store.Succeeded, 0)
	st := slotState(t, s, "job", "d1")
	if st.Last == nil || st.Last.RunID != "r2" || st.Last.Number != 2 || st.Last.State != store.Succeeded || st.Failures != 1 || st.Waiting {
		t.Fatalf("slot after fail+success: %+v", st)
	}
	// Slot "" is a slot like any other.
	begin(t, s, l, "", "r-empty", 1)
	finish(t, s, "r-empty", l.Token, store.Succeeded, 0)
	if st := slotState(t, s, "job", ""); st.Last == nil || st.Last.RunID != "r-empty" || st.Last.Slot != "" {
		t.Fatalf("slot \"\": %+v", st)
	}
	if st := slotState(t, s, "job", "d1"); st.Last.RunID != "r2" {
		t.Fatalf("slot d1 disturbed by slot \"\": %+v", st)
	}
}

func testStaleToken(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	la := acquire(t, a, "job", "a", time.Minute)
	_, err := a.Begin(ctx, store.Attempt{Task: "job", Slot: "s", RunID: "ra0", Number: 1, Holder: "a", Token: la.Token + 1})
	wantErr(t, "begin with a token never issued", err, store.ErrNotHeld)
	begin(t, a, la, "s", "ra", 1)
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, b, "job", "b", time.Minute)
	// a's token is no longer the latest: every fenced write refuses it.
	_, err = a.Begin(ctx, store.Attempt{Task: "job", Slot: "t", RunID: "ra2", Number: 1, Holder: "a", Token: la.Token})
	wantErr(t, "begin with a stale token", err, store.ErrNotHeld)
	n := int64(5)
	wantErr(t, "report with a stale token", a.Report(ctx, "ra", la.Token, store.Report{Records: &n}), store.ErrNotHeld)
	_, err = a.Finish(ctx, "ra", la.Token, store.Outcome{State: store.Succeeded})
	wantErr(t, "finish with a stale token", err, store.ErrNotHeld)
	_, err = a.Abandon(ctx, "job", la.Token)
	wantErr(t, "abandon with a stale token", err, store.ErrNotHeld)
	st := slotState(t, b, "job", "s")
	if st.Last == nil || st.Last.State != store.Running || st.Last.Records != 0 || st.Last.RunID != "ra" {
		t.Fatalf("stale writes changed the attempt: %+v", st.Last)
	}
	if st := slotState(t, b, "job", "t"); st.Last != nil {
		t.Fatalf("stale begin recorded %+v", st.Last)
	}
	// The new holder's token works.
	begin(t, b, lb, "t", "rb", 1)
}

func testAbandonResolve(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	la := acquire(t, a, "job", "a", time.Minute)
	other := acquire(t, a, "other", "a", time.Minute)
	begin(t, a, la, "s1", "ra1", 1)
	begin(t, a, la, "s2", "ra2", 1)
	begin(t, a, other, "s1", "ro1", 1)
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, b, "job", "b", time.Minute)
	begin(t, b, lb, "s3", "rb3", 1)
	_, err := a.Abandon(ctx, "job", la.Token)
	wantErr(t, "abandon by the old holder", err, store.ErrNotHeld)
	gone, err := b.Abandon(ctx, "job", lb.Token)
	if err != nil {
		t.Fatalf("abandon: %v", err)
	}
	runs := map[string]bool{}
	for _, g := range gone {
		if g.State != store.Unknown || g.Task != "job" {
			t.Fatalf("abandon returned %+v", g)
		}
		runs[g.RunID] = true
	}
	if len(gone) != 2 || !runs["ra1"] || !runs["ra2"] {
		t.Fatalf("abandon returned %s, want ra1 and ra2 as unknown", entryRuns(toEntries(gone)))
	}
	if st := slotState(t, b, "job", "s3"); st.Last.State != store.Running {
		t.Fatalf("abandon touched the current holder's attempt: %+v", st.Last)
	}
	if st := slotState(t, b, "other", "s1"); st.Last.State != store.Running {
		t.Fatalf("abandon touched another task: %+v", st.Last)
	}
	again, err := b.Abandon(ctx, "job", lb.Token)
	if err != nil || len(again) != 0 {
		t.Fatalf("second abandon: %v, %+v", err, again)
	}
	// The stale holder can no longer write.
	_, err = a.Finish(ctx, "ra1", la.Token, store.Outcome{State: store.Succeeded})
	if !errors.Is(err, store.ErrNotHeld) && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale finish after abandon: %v, want ErrNotHeld or ErrConflict", err)
	}
	err = a.Report(ctx, "ra1", la.Token, store.Report{Note: "late"})
	if !errors.Is(err, store.ErrNotHeld) && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale report after abandon: %v, want ErrNotHeld or ErrConflict", err)
	}
	_, err = b.Finish(ctx, "ra1", lb.Token, store.Outcome{State: store.Succeeded})
	wantErr(t, "finish of an unknown attempt with the latest token", err, store.ErrConflict)
	testResolveAbandoned(t, a, b)
}

// testResolveAbandoned: the slots job/s1 and job/s2 left unknown by an abandon wait for a person;
// resolving s1 records who and why, once.
func testResolveAbandoned(t *testing.T, a, b store.Store) {
	ctx := ctxT(t)
	st := slotState(t, b, "job", "s1")
	if st.Last == nil || st.Last.State != store.Unknown || st.Last.EndedAt == nil || !st.Waiting || st.Failures != 1 {
		t.Fatalf("slot after abandon: %+v", st)
	}
	waiting, err := b.Waiting(ctx)
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	if len(waiting) != 2 || waiting[0].Task != "job" || waiting[1].Task != "job" {
		t.Fatalf("Waiting = %+v, want job/s1 and job/s2", waiting)
	}
	for _, w := range waiting {
		if !w.Waiting || w.Last == nil || w.Last.State != store.Unknown {
			t.Fatalf("waiting entry %+v", w)
		}
	}
	r, err := b.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "s1", As: store.Succeeded, By: "alice", Note: "checked the output"})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if r.RunID != "ra1" || r.Resolution == nil || r.Resolution.As != store.Succeeded || r.Resolution.By != "alice" ||
		r.Resolution.Note != "checked the output" || r.Resolution.At.IsZero() {
		t.Fatalf("resolve returned %+v (resolution %+v)", r, r.Resolution)
	}
	st = slotState(t, a, "job", "s1")
	if st.Waiting || st.Failures != 0 || st.Last == nil || st.Last.Resolution == nil || st.Last.Resolution.By != "alice" || st.Last.State != store.Unknown {
		t.Fatalf("slot after resolve: %+v", st)
	}
	_, err = b.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "s1", As: store.Failed, By: "bob"})
	wantErr(t, "resolve twice", err, store.ErrConflict)
	waiting, err = a.Waiting(ctx)
	if err != nil || len(waiting) != 1 || waiting[0].Slot != "s2" {
		t.Fatalf("Waiting after resolve = %+v, %v; want only job/s2", waiting, err)
	}
}

func testReport(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "d", "r1", 1)
	n := int64(42)
	if err := s.Report(ctx, "r1", l.Token, store.Report{Records: &n, Progress: "3/10", Checkpoint: "cp-1", Note: "halfway"}); err != nil {
		t.Fatalf("report: %v", err)
	}
	if err := s.Report(ctx, "r1", l.Token, store.Report{Progress: "5/10"}); err != nil {
		t.Fatalf("report: %v", err)
	}
	err := s.Report(ctx, "no-such-run", l.Token, store.Report{Progress: "1/1"})
	wantErr(t, "report on an unknown run id", err, store.ErrNotFound)
	st := slotState(t, s, "job", "d")
	if st.Checkpoint != "cp-1" || st.Last.Records != 42 || st.Last.Progress != "5/10" || st.Last.Checkpoint != "cp-1" || st.Last.Note != "halfway" {
		t.Fatalf("slot after reports: %+v last %+v", st, st.Last)
	}
	f, err := s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Failed, Note: "disk full"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.Note, "halfway") || !strings.Contains(f.Note, "disk full") || f.Records != 42 {
		t.Fatalf("finished attempt %+v: want the reported note and the outcome note, records 42", f)
	}
	err = s.Report(ctx, "r1", l.Token, store.Report{Progress: "9/10"})
	wantErr(t, "report on a finished attempt", err, store.ErrConflict)
	// The slot's checkpoint is the latest reported by any attempt.
	begin(t, s, l, "d", "r2", 2)
	if st := slotState(t, s, "job", "d"); st.Checkpoint != "cp-1" || st.Failures != 1 {
		t.Fatalf("slot checkpoint after a new attempt: %+v", st)
	}
	if err := s.Report(ctx, "r2", l.Token, store.Report{Checkpoint: "cp-2"}); err != nil {
		t.Fatal(err)
	}
	if st := slotState(t, s, "job", "d"); st.Checkpoint != "cp-2" {
		t.Fatalf("slot checkpoint: %+v", st)
	}
	es := history(t, s, store.HistoryQuery{Task: "job"})
	if len(es) != 2 || es[0].RunID != "r2" || es[1].RunID != "r1" || es[1].Records != 42 || es[1].Progress != "5/10" ||
		es[1].Checkpoint != "cp-1" || es[1].State != store.Failed || es[0].Checkpoint != "cp-2" {
		t.Fatalf("history %s: %+v", entryRuns(es), es)
	}
}

func testEventsHistory(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "d1", "r1", 1)
	pause()
	finish(t, s, "r1", l.Token, store.Succeeded, 0)
	pause()
	record := func(c store.Store, e store.Event) {
		t.Helper()
		if err := c.Record(ctx, e); err != nil {
			t.Fatalf("Record(%+v): %v", e, err)
		}
		pause()
	}
	record(s, store.Event{Task: "job", Slot: "d1", Kind: store.Skipped, RunID: "r2", Holder: "a", Token: l.Token, Attempt: 1, Note: "already succeeded"})
	record(o, store.Event{Task: "job", Slot: "d1", Kind: store.Busy, RunID: "r3", Holder: "b", Note: "held by a"})
	begin(t, s, l, "d2", "r4", 1)
	pause()
	record(o, store.Event{Task: "other", Slot: "d1", Kind: store.Busy, RunID: "r5", Holder: "b"})
	all := history(t, o, store.HistoryQuery{})
	want := "other/d1:busy:r5 job/d2:running:r4 job/d1:busy:r3 job/d1:skipped:r2 job/d1:succeeded:r1"
	if got := entryRuns(all); got != want {
		t.Fatalf("history newest first:\n got %s\nwant %s", got, want)
	}
	for i := 1; i < len(all); i++ {
		if all[i].StartedAt.After(all[i-1].StartedAt) {
			t.Fatalf("history not newest first at %d: %s after %s", i, all[i].StartedAt, all[i-1].StartedAt)
		}
	}
	sk := all[3]
	if sk.Holder != "a" || sk.Token != l.Token || sk.Number != 1 || sk.Note != "already succeeded" || sk.EndedAt != nil || sk.StartedAt.IsZero() {
		t.Fatalf("skipped event entry: %+v", sk)
	}
	if got := entryRuns(history(t, o, store.HistoryQuery{Task: "job", Slot: "d1"})); got != "job/d1:busy:r3 job/d1:skipped:r2 job/d1:succeeded:r1" {
		t.Fatalf("history job/d1: %s", got)
	}
	if got := entryRuns(history(t, o, store.HistoryQuery{Slot: "d1", Limit: 2})); got != "other/d1:busy:r5 job/d1:busy:r3" {
		t.Fatalf("history slot d1 limit 2: %s", got)
	}
	if got := entryRuns(history(t, o, store.HistoryQuery{Task: "job", Limit: 1})); got != "job/d2:running:r4" {
		t.Fatalf("history job limit 1: %s", got)
	}
	if got := history(t, o, store.HistoryQuery{Task: "nope"}); len(got) != 0 {
		t.Fatalf("history of an unknown task: %s", entryRuns(got))
	}
	// Busy and skipped events do not make a slot wait.
	if st := slotState(t, o, "job", "d1"); st.Waiting || st.Last.RunID != "r1" {
		t.Fatalf("slot after events: %+v", st)
	}
}

// testMissedEvent: a missed event (a scheduler's: no lease, no attempt) of a slot never tried, of a
// failing slot and of a slot waiting for review is kept and listed like any event, by Kind too,
// and changes nothing a decision reads: Slot's Last and Failures, whether a slot waits, Waiting.
// An event of a kind the ledger does not have is refused and writes nothing.
func testMissedEvent(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	slots, l := missedSlots(t, s)
	before := map[string]store.SlotState{}
	for _, slot := range slots {
		before[slot] = slotState(t, o, "job", slot)
	}
	waiting, err := o.Waiting(ctx)
	if err != nil || len(waiting) != 1 {
		t.Fatalf("Waiting = %+v, %v; want job/waits", waiting, err)
	}
	for i, slot := range slots {
		pause()
		e := store.Event{Task: "job", Slot: slot, Kind: store.Missed, Holder: "node-1", Note: "fire time passed, outside the catch-up window"}
		if err := o.Record(ctx, e); err != nil {
			t.Fatalf("Record(%+v): %v", e, err)
		}
		es := history(t, s, store.HistoryQuery{Task: "job", Limit: 1})
		m := es[0]
		if m.State != store.Missed || m.Slot != slots[i] || m.Holder != "node-1" || m.Token != 0 || m.Number != 0 || m.RunID != "" ||
			m.Note != e.Note || m.StartedAt.IsZero() || m.EndedAt != nil || m.ExitCode != nil || m.Cursor == "" {
			t.Fatalf("the newest entry after a missed event: %+v", m)
		}
	}
	if got, want := entryRuns(history(t, s, store.HistoryQuery{Kind: store.Missed})), "job/waits:missed: job/failing:missed: job/never:missed:"; got != want {
		t.Fatalf("history of missed events:\n got %s\nwant %s", got, want)
	}
	if got := entryRuns(history(t, s, store.HistoryQuery{Task: "job", Slot: "failing", Kind: store.Missed})); got != "job/failing:missed:" {
		t.Fatalf("missed events of job/failing: %s", got)
	}
	if got := entryRuns(history(t, s, store.HistoryQuery{Kind: store.Missed, Limit: 2})); got != "job/waits:missed: job/failing:missed:" {
		t.Fatalf("the newest 2 missed events: %s", got)
	}
	if got := history(t, s, store.HistoryQuery{Task: "other", Kind: store.Missed}); len(got) != 0 {
		t.Fatalf("missed events of another task: %s", entryRuns(got))
	}
	if got := entryRuns(history(t, s, store.HistoryQuery{Kind: store.Unknown})); got != "job/waits:unknown:r2" {
		t.Fatalf("unknown attempts: %s", got)
	}
	for _, slot := range slots {
		st := slotState(t, s, "job", slot)
		if !reflect.DeepEqual(st, before[slot]) {
			t.Fatalf("slot %s after a missed event: %+v, was %+v", slot, st, before[slot])
		}
	}
	if w, err := s.Waiting(ctx); err != nil || !reflect.DeepEqual(w, waiting) {
		t.Fatalf("Waiting after missed events = %+v, %v; was %+v", w, err, waiting)
	}
	// A slot missed and then run (a backfill) runs from attempt 1, as a slot never tried.
	begin(t, s, l, "never", "r3", 1)
	for _, bad := range []store.State{"", "Missed", "done", store.Running, store.Succeeded} {
		err := o.Record(ctx, store.Event{Task: "bad", Slot: "s", Kind: bad})
		wantErr(t, fmt.Sprintf("Record of an event of kind %q", bad), err, store.ErrConflict)
	}
	if got := history(t, s, store.HistoryQuery{Task: "bad"}); len(got) != 0 {
		t.Fatalf("refused events were written: %s", entryRuns(got))
	}
}

// missedSlots writes, through s, the slots of task job that the missed cases record missed events
// for: "never" (never tried), "failing" (its attempt failed) and "waits" (unknown: it waits for
// review). It returns their names and job's lease.
func missedSlots(t *testing.T, s store.Store) ([]string, store.Lease) {
	t.Helper()
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "failing", "r1", 1)
	finish(t, s, "r1", l.Token, store.Failed, 1)
	begin(t, s, l, "waits", "r2", 1)
	finish(t, s, "r2", l.Token, store.Unknown, 143)
	return []string{"never", "failing", "waits"}, l
}

func testReviewFailures(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "d", "r1", 1)
	finish(t, s, "r1", l.Token, store.Failed, 1)
	begin(t, s, l, "d", "r2", 2)
	finish(t, s, "r2", l.Token, store.Failed, 1)
	st := slotState(t, s, "job", "d")
	if st.Failures != 2 || st.Waiting {
		t.Fatalf("after two failures: %+v", st)
	}
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "d", Kind: store.Review, RunID: "r2", Holder: "a", Token: l.Token, Attempt: 2, Note: "attempts used up"}); err != nil {
		t.Fatal(err)
	}
	if st := slotState(t, s, "job", "d"); !st.Waiting || st.Failures != 2 {
		t.Fatalf("after review event: %+v", st)
	}
	w, err := s.Waiting(ctx)
	if err != nil || len(w) != 1 || w[0].Task != "job" || w[0].Slot != "d" || !w[0].Waiting || w[0].Failures != 2 {
		t.Fatalf("Waiting = %+v, %v", w, err)
	}
	r, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d", As: store.Failed, By: "bob"})
	if err != nil || r.Number != 2 || r.Resolution == nil || r.Resolution.As != store.Failed {
		t.Fatalf("resolve as failed: %+v, %v", r, err)
	}
	if st := slotState(t, s, "job", "d"); st.Waiting || st.Failures != 0 {
		t.Fatalf("after resolve: %+v", st)
	}
	if w, err := s.Waiting(ctx); err != nil || len(w) != 0 {
		t.Fatalf("Waiting after resolve = %+v, %v", w, err)
	}
	// A fresh attempt budget: failures count again from the resolution.
	begin(t, s, l, "d", "r3", 3)
	finish(t, s, "r3", l.Token, store.Failed, 1)
	if st := slotState(t, s, "job", "d"); st.Failures != 1 || st.Waiting {
		t.Fatalf("after a failure past the resolution: %+v", st)
	}
	// A review event about an older attempt does not make the slot wait.
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "d", Kind: store.Review, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if st := slotState(t, s, "job", "d"); st.Waiting {
		t.Fatalf("review of an older attempt makes the slot wait: %+v", st)
	}
	// Waiting lists oldest first.
	begin(t, s, l, "e", "r4", 1)
	finish(t, s, "r4", l.Token, store.Failed, 1)
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "d", Kind: store.Review, Attempt: 3}); err != nil {
		t.Fatal(err)
	}
	pause()
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "e", Kind: store.Review, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	w, err = s.Waiting(ctx)
	if err != nil || len(w) != 2 || w[0].Slot != "d" || w[1].Slot != "e" {
		t.Fatalf("Waiting = %+v, %v; want job/d then job/e", w, err)
	}
}

func testResolveIllegal(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	_, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "empty", As: store.Succeeded, By: "x"})
	wantErr(t, "resolve an empty slot", err, store.ErrNotFound)
	begin(t, s, l, "d", "r1", 1)
	_, err = s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d", As: store.Succeeded, By: "x"})
	wantErr(t, "resolve a running attempt", err, store.ErrConflict)
	finish(t, s, "r1", l.Token, store.Succeeded, 0)
	_, err = s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d", As: store.Failed, By: "x"})
	wantErr(t, "resolve a succeeded attempt", err, store.ErrConflict)
	if st := slotState(t, s, "job", "d"); st.Last.Resolution != nil {
		t.Fatalf("refused resolve left a resolution: %+v", st.Last.Resolution)
	}
}

// testBeginRace: two clients with the same valid token race Begin on one slot; exactly one
// records a running attempt each round.
func testBeginRace(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	c := [2]store.Store{client(t, dsn), client(t, dsn)}
	ctx := ctxT(t)
	l := acquire(t, c[0], "job", "a", time.Minute)
	const rounds = 20
	for r := range rounds {
		slot := fmt.Sprintf("s%d", r%5)
		number := r/5 + 1
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[w] = c[w].Begin(ctx, store.Attempt{Task: "job", Slot: slot, RunID: fmt.Sprintf("r%d-w%d", r, w),
					Number: number, Holder: "a", Token: l.Token})
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both writers began a running attempt", r)
				}
				winner = w
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("round %d writer %d: %v, want ErrConflict", r, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody began: %v", r, errs)
		}
		run := fmt.Sprintf("r%d-w%d", r, winner)
		st := slotState(t, c[1-winner], "job", slot)
		if st.Last == nil || st.Last.RunID != run || st.Last.State != store.Running || st.Last.Number != number {
			t.Fatalf("round %d: slot shows %+v, want running %s", r, st.Last, run)
		}
		finish(t, c[winner], run, l.Token, store.Succeeded, 0)
	}
	running := 0
	for _, e := range history(t, c[0], store.HistoryQuery{Task: "job"}) {
		if e.State == store.Running {
			running++
		}
	}
	if n := len(history(t, c[0], store.HistoryQuery{Task: "job"})); n != rounds || running != 0 {
		t.Fatalf("history has %d attempts (%d running), want %d finished", n, running, rounds)
	}
}
