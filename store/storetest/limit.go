package storetest

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The Limit cases: AcquireRequest.Limit grants up to Limit seats of a task at once (once run
// --limit), each with its own token. A store that does not grant seats refuses them with
// ErrUnsupported, and these cases check only that.

func seatReq(task, holder string, limit int, ttl time.Duration) store.AcquireRequest {
	return store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + holder, TTL: ttl, Limit: limit}
}

// seat acquires a seat, or skips the test when the store refuses seats (ErrUnsupported).
func seat(t *testing.T, s store.Store, task, holder string, limit int, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), seatReq(task, holder, limit, ttl))
	if errors.Is(err, store.ErrUnsupported) {
		t.Skipf("the store does not grant seats: %v", err)
	}
	if err != nil {
		t.Fatalf("Acquire(%s by %s, limit %d): %v", task, holder, limit, err)
	}
	if l.Task != task || l.Holder != holder || l.RunID != "run-"+holder || l.Token <= 0 || l.Limit != limit {
		t.Fatalf("Acquire(%s by %s, limit %d) returned %+v", task, holder, limit, l)
	}
	checkTTL(t, l, ttl)
	return l
}

// seatsOf lists the live grants of task by Leases, by token.
func seatsOf(t *testing.T, s store.Store, task string) []store.Lease {
	t.Helper()
	all, err := s.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	var out []store.Lease
	for _, l := range all {
		if l.Task == task {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}

// testLeaseLimit: N seats are granted with distinct increasing tokens, the N+1st and an
// exclusive Acquire are busy; each holder's lease calls and ledger writes are fenced to its own
// token; Abandon leaves the other live seats' attempts alone; once the seats are released the
// exclusive lease is free, and the old seats' tokens are refused.
func testLeaseLimit(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b, c := client(t, dsn), client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const ttl = 20 * time.Second
	la := seat(t, a, "job", "a", 2, ttl)
	lb := seat(t, b, "job", "b", 2, ttl)
	if lb.Token <= la.Token {
		t.Fatalf("second seat's token %d, want > %d", lb.Token, la.Token)
	}
	_, err := c.Acquire(ctx, seatReq("job", "c", 2, ttl))
	wantErr(t, "third seat of two", err, store.ErrBusy)
	_, err = c.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "c", RunID: "run-c", TTL: ttl})
	wantErr(t, "exclusive acquire while seats are live", err, store.ErrBusy)
	if got := seatsOf(t, c, "job"); len(got) != 2 || got[0].Token != la.Token || got[1].Token != lb.Token ||
		got[0].Holder != "a" || got[1].Holder != "b" {
		t.Fatalf("Leases lists %+v, want the seats of a and b", got)
	}

	begin(t, a, la, "sa", "run-a", 1)
	begin(t, b, lb, "sb", "run-b", 1)
	wantErr(t, "report with the other seat's token", b.Report(ctx, "run-a", lb.Token, store.Report{Note: "x"}), store.ErrNotHeld)
	if err := a.Report(ctx, "run-a", la.Token, store.Report{Note: "a's"}); err != nil {
		t.Fatalf("Report of the older seat: %v", err)
	}
	if la, err = a.Renew(ctx, la, ttl); err != nil || la.Limit != 2 {
		t.Fatalf("Renew of the older seat: %+v, %v", la, err)
	}
	if fb := finish(t, b, "run-b", lb.Token, store.Succeeded, 0); fb.Limit != 2 {
		t.Fatalf("Finish of a seat's attempt returned Limit %d, want 2 (Begin's)", fb.Limit)
	}
	checkSeatAttempts(t, c, "job", map[string]int{"sa": 2, "sb": 2})
	if err := b.Release(ctx, lb); err != nil {
		t.Fatalf("Release of a seat: %v", err)
	}
	_, err = b.Renew(ctx, lb, ttl)
	wantErr(t, "renew of a released seat", err, store.ErrNotHeld)

	lc := seat(t, c, "job", "c", 2, ttl)
	if lc.Token <= lb.Token {
		t.Fatalf("seat after a release: token %d, want > %d", lc.Token, lb.Token)
	}
	ab, err := c.Abandon(ctx, "job", lc.Token)
	if err != nil || len(ab) != 0 {
		t.Fatalf("Abandon by a seat while another seat runs: %+v, %v; want nothing abandoned", ab, err)
	}
	finish(t, a, "run-a", la.Token, store.Succeeded, 0)
	for _, l := range []store.Lease{la, lc} {
		if err := client(t, dsn).Release(ctx, l); err != nil {
			t.Fatalf("Release of seat %d: %v", l.Token, err)
		}
	}
	lx := acquire(t, c, "job", "x", ttl)
	if lx.Token <= lc.Token {
		t.Fatalf("exclusive after seats: token %d, want > %d", lx.Token, lc.Token)
	}
	_, err = a.Acquire(ctx, seatReq("job", "d", 2, ttl))
	wantErr(t, "seat while the exclusive grant is live", err, store.ErrBusy)
	_, err = a.Renew(ctx, la, ttl)
	wantErr(t, "renew of a seat after an exclusive grant", err, store.ErrNotHeld)
	wantErr(t, "release of a seat after an exclusive grant", a.Release(ctx, la), store.ErrNotHeld)
	_, err = a.Begin(ctx, store.Attempt{Task: "job", Slot: "sa", RunID: "run-a2", Number: 2, Holder: "a", Token: la.Token})
	wantErr(t, "begin with a seat's token after an exclusive grant", err, store.ErrNotHeld)
	wantLease(t, c, lx)
}

// checkSeatAttempts: the last attempt of each slot, by Slot and by History, carries the Limit of
// the seat it ran under (Attempt.Limit; 0 for the exclusive lease).
func checkSeatAttempts(t *testing.T, s store.Store, task string, want map[string]int) {
	t.Helper()
	for sl, n := range want {
		if st := slotState(t, s, task, sl); st.Last == nil || st.Last.Limit != n {
			t.Fatalf("Slot(%s, %s).Last = %+v, want Limit %d", task, sl, st.Last, n)
		}
	}
	h, err := s.History(ctxT(t), store.HistoryQuery{Task: task})
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	seen := 0
	for _, e := range h {
		if n, ok := want[e.Slot]; ok && e.State.IsAttempt() {
			seen++
			if e.Limit != n {
				t.Fatalf("History entry %+v: Limit %d, want %d", e, e.Limit, n)
			}
		}
	}
	if seen < len(want) {
		t.Fatalf("History lists %d attempts of %v: %+v", seen, want, h)
	}
}

// testLeaseLimitExpiry: a seat that expires frees a place; Abandon by the seat that takes it
// marks the expired seat's running attempt unknown and leaves the live seat's alone; seats of a
// request with a smaller Limit count the live seats of any Limit.
func testLeaseLimitExpiry(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b, c := client(t, dsn), client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const short, ttl = 3 * time.Second, 30 * time.Second
	t0 := time.Now()
	la := seat(t, a, "job", "a", 3, short)
	lb := seat(t, b, "job", "b", 3, ttl)
	begin(t, a, la, "sa", "run-a", 1)
	begin(t, b, lb, "sb", "run-b", 1)
	lc, err := c.Acquire(ctx, seatReq("job", "c", 2, ttl))
	if time.Since(t0) < short { // else a loaded machine took so long that a's seat may be gone
		wantErr(t, "seat of two while two seats are live", err, store.ErrBusy)
	}
	deadline := time.Now().Add(short + granularity + 5*time.Second)
	for err != nil {
		if lc, err = c.Acquire(ctx, seatReq("job", "c", 2, ttl)); err == nil {
			break
		}
		wantErr(t, "seat while waiting for an expiry", err, store.ErrBusy)
		if time.Now().After(deadline) {
			t.Fatalf("seat with TTL %s not freed after %s", short, time.Since(la.Acquired))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ab, err := c.Abandon(ctx, "job", lc.Token)
	if err != nil || len(ab) != 1 || ab[0].RunID != "run-a" || ab[0].State != store.Unknown {
		t.Fatalf("Abandon after a seat expired: %+v, %v; want run-a unknown", ab, err)
	}
	if st := slotState(t, c, "job", "sb"); st.Last == nil || st.Last.State != store.Running {
		t.Fatalf("the live seat's attempt: %+v, want running", st.Last)
	}
	_, err = a.Renew(ctx, la, ttl)
	wantErr(t, "renew of an expired seat", err, store.ErrNotHeld)
	if got := seatsOf(t, c, "job"); len(got) != 2 || got[0].Token != lb.Token || got[1].Token != lc.Token {
		t.Fatalf("Leases lists %+v, want the seats of b and c", got)
	}
	finish(t, b, "run-b", lb.Token, store.Succeeded, 0)
}

// testLeaseLimitRace: clients racing for the seats of a new task get exactly Limit of them, with
// distinct tokens; the others are busy.
func testLeaseLimitRace(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	seat(t, client(t, dsn), "probe", "p", 2, time.Minute) // skips on a store without seats
	const racers, limit = 8, 3
	cs := make([]store.Store, racers)
	for i := range cs {
		cs[i] = client(t, dsn)
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	got := make([]store.Lease, racers)
	errs := make([]error, racers)
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = cs[i].Acquire(ctx, seatReq("race", fmt.Sprint("h", i), limit, time.Minute))
		}()
	}
	wg.Wait()
	tokens := map[int64]bool{}
	for i, err := range errs {
		switch {
		case err == nil:
			tokens[got[i].Token] = true
		case !errors.Is(err, store.ErrBusy):
			t.Fatalf("racer %d: %v, want a seat or busy", i, err)
		}
	}
	if len(tokens) != limit {
		t.Fatalf("%d distinct seats granted to %d racers, want %d", len(tokens), racers, limit)
	}
	if ls := seatsOf(t, cs[0], "race"); len(ls) != limit {
		t.Fatalf("Leases lists %d seats, want %d: %+v", len(ls), limit, ls)
	}
}
