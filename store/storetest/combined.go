package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The optional capabilities (store.Starter, store.LazyStarter, store.Finisher, store.LazyRecorder) each stand for plain
// calls made one after another; these cases check that they do exactly that, atomically. Run leaves
// a case out when the store does not implement its interface.

// testStart: Start takes the lease, marks what the expired holder left running unknown and reads
// the slot after that; on a busy task it changes nothing.
func testStart(t *testing.T, h Harness) {
	testStarting(t, h, func(s store.Store) startFunc { return s.(store.Starter).Start })
}

// testStartLazy: StartLazy does all that Start does (whether it waited for the disk is not
// something a client can see).
func testStartLazy(t *testing.T, h Harness) {
	testStarting(t, h, func(s store.Store) startFunc { return s.(store.LazyStarter).StartLazy })
}

type startFunc = func(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error)

func testStarting(t *testing.T, h Harness, starter func(store.Store) startFunc) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	sb := struct{ Start startFunc }{starter(b)}
	ctx := ctxT(t)

	// A first start: no lease row, no attempt.
	first, err := sb.Start(ctx, store.AcquireRequest{Task: "fresh", Holder: "b", RunID: "run-b0", TTL: time.Minute}, "d1")
	if err != nil {
		t.Fatalf("Start on a fresh task: %v", err)
	}
	if first.Lease.Token <= 0 || first.Lease.Holder != "b" || len(first.Abandoned) != 0 || first.Slot.Last != nil ||
		first.Slot.Task != "fresh" || first.Slot.Slot != "d1" {
		t.Fatalf("Start on a fresh task returned %+v", first)
	}
	checkTTL(t, first.Lease, time.Minute)
	wantLease(t, a, first.Lease)

	// Held through the checks below under load (1.2 s was not), short enough to wait out.
	const ttl = 4 * time.Second
	la := acquire(t, a, "job", "a", ttl)
	begin(t, a, la, "d1", "ra1", 1)
	begin(t, a, la, "d2", "ra2", 1)
	req := store.AcquireRequest{Task: "job", Holder: "b", RunID: "run-b", TTL: time.Minute}
	_, err = sb.Start(ctx, req, "d1")
	wantBusy(t, "Start while the lease is held", err, la)
	if st := slotState(t, a, "job", "d1"); st.Last == nil || st.Last.State != store.Running {
		t.Fatalf("a busy Start changed the slot: %+v", st)
	}
	wantLease(t, a, la)

	var got store.Started
	deadline := time.Now().Add(ttl + granularity + 2*time.Second)
	for {
		got, err = sb.Start(ctx, req, "d1")
		if err == nil {
			break
		}
		wantBusy(t, "Start while waiting for expiry", err, la)
		if time.Now().After(deadline) {
			t.Fatalf("Start did not take over an expired lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	l := got.Lease
	if l.Holder != "b" || l.RunID != "run-b" || l.Token <= la.Token || l.Task != "job" {
		t.Fatalf("Start's lease %+v after %+v", l, la)
	}
	checkTTL(t, l, time.Minute)
	wantLease(t, a, l)
	runs := map[string]bool{}
	for _, x := range got.Abandoned {
		if x.State != store.Unknown || x.Task != "job" || x.EndedAt == nil {
			t.Fatalf("Start abandoned %+v", x)
		}
		runs[x.RunID] = true
	}
	if len(got.Abandoned) != 2 || !runs["ra1"] || !runs["ra2"] {
		t.Fatalf("Start abandoned %s, want ra1 and ra2", entryRuns(toEntries(got.Abandoned)))
	}
	// The slot as read after the abandon, and as Slot reads it.
	st := got.Slot
	if st.Task != "job" || st.Slot != "d1" || st.Last == nil || st.Last.RunID != "ra1" || st.Last.State != store.Unknown ||
		!st.Waiting || st.Failures != 1 {
		t.Fatalf("Start's slot state %+v", st)
	}
	again := slotState(t, a, "job", "d1")
	if again.Last == nil || again.Last.State != st.Last.State || again.Waiting != st.Waiting || again.Failures != st.Failures {
		t.Fatalf("Start read %+v, Slot reads %+v", st, again)
	}
	// The slots it abandoned wait for a person, as after Abandon.
	wantWaiting(t, a, "job", "d1", "d2")
	// The old holder is fenced out, the new token works.
	_, err = a.Finish(ctx, "ra1", la.Token, store.Outcome{State: store.Succeeded})
	wantErr(t, "finish by the holder Start replaced", err, store.ErrNotHeld)
	begin(t, b, l, "d3", "rb3", 1)
	if gone, err := b.Abandon(ctx, "job", l.Token); err != nil || len(gone) != 0 {
		t.Fatalf("Abandon after Start: %v %+v (Start had abandoned them)", err, gone)
	}
}

// wantWaiting: Waiting lists (task, slot) for each of slots.
func wantWaiting(t *testing.T, s store.Store, task string, slots ...string) {
	t.Helper()
	ws, err := s.Waiting(ctxT(t))
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	for _, sl := range slots {
		found := false
		for _, w := range ws {
			found = found || w.Task == task && w.Slot == sl && w.Waiting
		}
		if !found {
			t.Fatalf("Waiting does not list %s/%s: %+v", task, sl, ws)
		}
	}
}

// testFinishRelease: the outcome and the release happen together, or neither does.
func testFinishRelease(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	fa := a.(store.Finisher)
	ctx := ctxT(t)
	code := 0
	done := store.Outcome{State: store.Succeeded, ExitCode: &code}

	l := acquire(t, a, "job", "a", time.Minute)
	begin(t, a, l, "d1", "r1", 1)
	f, err := fa.FinishRelease(ctx, "r1", l, done)
	if err != nil {
		t.Fatalf("FinishRelease: %v", err)
	}
	if f.State != store.Succeeded || f.RunID != "r1" || f.EndedAt == nil || f.ExitCode == nil || *f.ExitCode != 0 {
		t.Fatalf("FinishRelease returned %+v", f)
	}
	if got := leaseOf(t, b, "job"); got != nil {
		t.Fatalf("the lease is still listed after FinishRelease: %+v", *got)
	}
	if st := slotState(t, b, "job", "d1"); st.Last == nil || st.Last.State != store.Succeeded {
		t.Fatalf("slot after FinishRelease: %+v", st)
	}
	// Released: the next holder gets it at once, with a higher token.
	l2 := acquire(t, b, "job", "b", time.Minute)
	if l2.Token <= l.Token {
		t.Fatalf("token after FinishRelease %d, want > %d", l2.Token, l.Token)
	}

	// A failing finish releases nothing: not running (already finished), unknown run, bad state.
	begin(t, b, l2, "d2", "r2", 1)
	finish(t, b, "r2", l2.Token, store.Failed, 1)
	_, err = b.(store.Finisher).FinishRelease(ctx, "r2", l2, done)
	wantErr(t, "FinishRelease of a finished attempt", err, store.ErrConflict)
	wantLease(t, a, l2)
	_, err = b.(store.Finisher).FinishRelease(ctx, "no-such-run", l2, done)
	wantErr(t, "FinishRelease of an unknown run", err, store.ErrNotFound)
	wantLease(t, a, l2)
	begin(t, b, l2, "d2", "r3", 2)
	_, err = b.(store.Finisher).FinishRelease(ctx, "r3", l2, store.Outcome{State: store.Running})
	wantErr(t, "FinishRelease as running", err, store.ErrConflict)
	wantLease(t, a, l2)

	// An unknown outcome (the run lost its lease and stopped its work) makes the slot wait, as after
	// Finish.
	l4 := acquire(t, a, "other", "a", time.Minute)
	begin(t, a, l4, "u1", "ru1", 1)
	if _, err := fa.FinishRelease(ctx, "ru1", l4, store.Outcome{State: store.Unknown, ExitCode: &code}); err != nil {
		t.Fatalf("FinishRelease as unknown: %v", err)
	}
	wantWaiting(t, b, "other", "u1")

	// A stale holder: neither its outcome nor its release is taken.
	if err := b.Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
	l3 := acquire(t, a, "job", "a", time.Minute)
	_, err = b.(store.Finisher).FinishRelease(ctx, "r3", l2, done)
	wantErr(t, "FinishRelease with a stale token", err, store.ErrNotHeld)
	wantLease(t, b, l3)
	if st := slotState(t, a, "job", "d2"); st.Last == nil || st.Last.RunID != "r3" || st.Last.State != store.Running {
		t.Fatalf("a stale FinishRelease changed the attempt: %+v", st.Last)
	}
}

// testRecordLazy: a lazily recorded event reads back at once, like a recorded one.
func testRecordLazy(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	lr := a.(store.LazyRecorder)
	ctx := ctxT(t)
	if err := lr.RecordLazy(ctx, store.Event{Task: "job", Slot: "d1", Kind: store.Busy, RunID: "lazy-1", Holder: "h1", Note: "held by h0"}); err != nil {
		t.Fatalf("RecordLazy: %v", err)
	}
	es := history(t, b, store.HistoryQuery{Task: "job"})
	if len(es) != 1 || es[0].State != store.Busy || es[0].RunID != "lazy-1" || es[0].Holder != "h1" || es[0].Slot != "d1" ||
		es[0].Note != "held by h0" || es[0].StartedAt.IsZero() {
		t.Fatalf("history after RecordLazy: %+v", es)
	}
	// A review event is durable and makes the slot's last attempt wait, as Record's does.
	l0 := acquire(t, a, "rev", "a", time.Minute)
	begin(t, a, l0, "d1", "rr1", 1)
	finish(t, a, "rr1", l0.Token, store.Failed, 1)
	if err := lr.RecordLazy(ctx, store.Event{Task: "rev", Slot: "d1", Kind: store.Review, RunID: "rr1", Holder: "a", Attempt: 1, Note: "attempts used up"}); err != nil {
		t.Fatalf("RecordLazy of a review event: %v", err)
	}
	if st := slotState(t, b, "rev", "d1"); !st.Waiting {
		t.Fatalf("slot after a review event: %+v", st)
	}
	wantWaiting(t, b, "rev", "d1")
	err := lr.RecordLazy(ctx, store.Event{Task: "job", Kind: store.Running, RunID: "lazy-2", Holder: "h1"})
	wantErr(t, "RecordLazy of a running event", err, store.ErrConflict)
	// A durable write after it (which makes it durable) sees it too.
	l := acquire(t, a, "job", "a", time.Minute)
	begin(t, a, l, "d1", "r1", 1)
	if es := history(t, b, store.HistoryQuery{Task: "job"}); len(es) != 2 {
		t.Fatalf("history: %s", entryRuns(es))
	}
}
