// Package storetest is the conformance suite every store backend runs against a real server.
//
// A backend's test calls Run with a Harness whose DSN func hands out a fresh, isolated
// namespace per call; the backend's package must be imported by that test so its init()
// registers the scheme. The suite only uses store.Open and the store.Store interface, and
// opens the same DSN several times to play separate clients (processes, hosts).
//
// Timing assumptions: lease TTLs are at least 1s in the timing tests and a backend may round
// a TTL up to whole seconds; every wait is bounded by TTL + 2s.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// Harness tells the suite how to reach a backend.
type Harness struct {
	// DSN returns the DSN of a fresh, empty, isolated store (a new file, database or ?prefix=).
	// Every call returns a namespace no other call returns. The suite opens it with store.Open,
	// several times when it needs several clients.
	DSN func(t *testing.T) string
}

// Tolerances the suite allows a backend.
const (
	// granularity is how much a backend may round a TTL up (whole seconds).
	granularity = time.Second
	// timeSlack covers time representation (ms vs µs) and two clients reading one clock.
	timeSlack = 50 * time.Millisecond
	// opTimeout bounds any single store call.
	opTimeout = 15 * time.Second
)

// Run runs the conformance suite. Subtests run in parallel, each on its own DSN.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.DSN == nil {
		t.Fatal("storetest: Harness.DSN is nil")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"LeaseExclusive", testLeaseExclusive},
		{"LeaseExpiryTakeover", testLeaseExpiry},
		{"LeaseRenew", testLeaseRenew},
		{"LeaseNotOwner", testLeaseNotOwner},
		{"LeaseRelease", testLeaseRelease},
		{"LeaseReleaseExpired", testLeaseReleaseExpired},
		{"LeaseTokensIncrease", testTokensIncrease},
		{"LeaseTasksIndependent", testTasksIndependent},
		{"StoreClock", testStoreClock},
		{"LedgerBeginFinish", testBeginFinish},
		{"LedgerFinishUnknown", testFinishUnknown},
		{"LedgerStaleToken", testStaleToken},
		{"LedgerAbandonResolve", testAbandonResolve},
		{"LedgerReport", testReport},
		{"LedgerEventsHistory", testEventsHistory},
		{"LedgerReviewFailures", testReviewFailures},
		{"LedgerResolveIllegal", testResolveIllegal},
		{"LedgerBeginRace", testBeginRace},
		{"LedgerLimits", testLimits},
		{"LedgerWaitingOrder", testWaitingOrder},
		{"LedgerHistoryPages", testHistoryPages},
		{"LedgerPrune", testPrune},
		{"LedgerPruneForget", testPruneForget},
		{"Start", testStart},
		{"FinishRelease", testFinishRelease},
		{"RecordLazy", testRecordLazy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// RunBenchmarks runs the suite's benchmarks: AcquireRelease (one uncontended client).
//
// Harness.DSN takes a *testing.T, which a benchmark does not have: it is called with a
// stand-in T whose cleanups never run, so a benchmark harness should not rely on t.Cleanup
// or t.TempDir.
func RunBenchmarks(b *testing.B, h Harness) {
	b.Run("AcquireRelease", func(b *testing.B) {
		dsn := benchDSN(b, h)
		ctx := context.Background()
		s, err := store.Open(ctx, dsn)
		if err != nil {
			b.Fatalf("open: %v", err)
		}
		defer s.Close()
		req := store.AcquireRequest{Task: "bench", Holder: "bench", RunID: "r", TTL: time.Minute}
		b.ResetTimer()
		for b.Loop() {
			l, err := s.Acquire(ctx, req)
			if err != nil {
				b.Fatalf("acquire: %v", err)
			}
			if err := s.Release(ctx, l); err != nil {
				b.Fatalf("release: %v", err)
			}
		}
	})
}

func benchDSN(b *testing.B, h Harness) string {
	var dsn string
	done := make(chan bool)
	t := &testing.T{}
	go func() {
		ok := false
		defer func() { done <- ok }()
		dsn = h.DSN(t)
		ok = true
	}()
	ok := <-done
	switch {
	case t.Skipped():
		b.Skip("storetest: Harness.DSN skipped (no server?)")
	case !ok || t.Failed():
		b.Fatal("storetest: Harness.DSN failed")
	}
	return dsn
}

// --- helpers ---

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// client opens a separate client on dsn, closed when the test ends.
func client(t *testing.T, dsn string) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func acquire(t *testing.T, s store.Store, task, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + holder, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", task, holder, err)
	}
	if l.Task != task || l.Holder != holder || l.RunID != "run-"+holder || l.Token <= 0 {
		t.Fatalf("Acquire(%s by %s) returned %+v", task, holder, l)
	}
	checkTTL(t, l, ttl)
	return l
}

// checkTTL: expires - acquired is the TTL, possibly rounded up to the store's granularity.
func checkTTL(t *testing.T, l store.Lease, ttl time.Duration) {
	t.Helper()
	d := l.Expires.Sub(l.Acquired)
	if d < ttl-timeSlack || d > ttl+granularity+timeSlack {
		t.Errorf("lease %s: expires-acquired = %s, want %s (rounded up by at most %s)", l.Task, d, ttl, granularity)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func wantBusy(t *testing.T, what string, err error, holder store.Lease) {
	t.Helper()
	var be *store.BusyError
	if !errors.As(err, &be) || !errors.Is(err, store.ErrBusy) {
		t.Fatalf("%s: got %v, want *store.BusyError", what, err)
	}
	if be.Lease.Holder != holder.Holder || be.Lease.Token != holder.Token || be.Lease.RunID != holder.RunID {
		t.Fatalf("%s: BusyError names %+v, want holder %q token %d run %q", what, be.Lease, holder.Holder, holder.Token, holder.RunID)
	}
	if err.Error() == "" || strings.Contains(err.Error(), "\n") {
		t.Errorf("%s: busy error message %q is not one line", what, err.Error())
	}
}

// leaseOf returns task's lease as Leases lists it, or nil.
func leaseOf(t *testing.T, s store.Store, task string) *store.Lease {
	t.Helper()
	ls, err := s.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	var found *store.Lease
	for i := range ls {
		if ls[i].Task == task {
			if found != nil {
				t.Fatalf("Leases lists task %s twice: %+v", task, ls)
			}
			found = &ls[i]
		}
	}
	return found
}

func sameLease(a, b store.Lease) bool {
	return a.Task == b.Task && a.Holder == b.Holder && a.RunID == b.RunID && a.Token == b.Token &&
		absDur(a.Acquired.Sub(b.Acquired)) <= timeSlack && absDur(a.Expires.Sub(b.Expires)) <= timeSlack
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func wantLease(t *testing.T, s store.Store, want store.Lease) {
	t.Helper()
	got := leaseOf(t, s, want.Task)
	if got == nil {
		t.Fatalf("Leases does not list %s, want %+v", want.Task, want)
	}
	if !sameLease(*got, want) {
		t.Fatalf("Leases lists %+v, want %+v", *got, want)
	}
}

// --- lease tests ---

func testLeaseExclusive(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	const n = 16
	clients := make([]store.Store, n)
	for i := range clients {
		clients[i] = client(t, dsn)
	}
	ctx := ctxT(t)
	start := make(chan struct{})
	leases := make([]store.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			leases[i], errs[i] = clients[i].Acquire(ctx, store.AcquireRequest{
				Task: "job", Holder: fmt.Sprintf("host-%d", i), RunID: fmt.Sprintf("run-%d", i), TTL: 30 * time.Second})
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("two holders: %+v and %+v", leases[winner], leases[i])
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no contender won: %v", errs)
	}
	w := leases[winner]
	if w.Holder != fmt.Sprintf("host-%d", winner) || w.RunID != fmt.Sprintf("run-%d", winner) || w.Token <= 0 {
		t.Fatalf("winner lease %+v", w)
	}
	checkTTL(t, w, 30*time.Second)
	for i, err := range errs {
		if i != winner {
			wantBusy(t, fmt.Sprintf("contender %d", i), err, w)
		}
	}
	wantLease(t, clients[(winner+1)%n], w)
}

func testLeaseExpiry(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	const ttl = 1500 * time.Millisecond
	began := time.Now()
	la := acquire(t, a, "job", "a", ttl)
	ctx := ctxT(t)
	req := store.AcquireRequest{Task: "job", Holder: "b", RunID: "run-b", TTL: 30 * time.Second}
	_, err := b.Acquire(ctx, req)
	wantBusy(t, "acquire before expiry", err, la)
	time.Sleep(ttl / 2)
	_, err = b.Acquire(ctx, req)
	if time.Since(began) < ttl-200*time.Millisecond {
		wantBusy(t, "acquire at half the TTL", err, la)
	}
	var lb store.Lease
	deadline := began.Add(ttl + granularity + 2*time.Second)
	for {
		lb, err = b.Acquire(ctx, req)
		if err == nil {
			break
		}
		wantBusy(t, "acquire while waiting for expiry", err, la)
		if time.Now().After(deadline) {
			t.Fatalf("lease with TTL %s not taken over after %s", ttl, time.Since(began))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lb.Acquired.Before(la.Expires.Add(-timeSlack)) {
		t.Fatalf("taken over at %s, before the old grant expired at %s", lb.Acquired, la.Expires)
	}
	if lb.Token <= la.Token {
		t.Fatalf("token after expiry %d, want > %d", lb.Token, la.Token)
	}
	_, err = a.Renew(ctx, la, ttl)
	wantErr(t, "renew after takeover", err, store.ErrNotHeld)
	wantErr(t, "release after takeover", a.Release(ctx, la), store.ErrNotHeld)
	wantLease(t, a, lb)
}

func testLeaseRenew(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const ttl = 1500 * time.Millisecond
	began := time.Now()
	l := acquire(t, a, "job", "a", ttl)
	first := l
	// A store that announces lost leases must not announce its holder's own renewals.
	var lost <-chan struct{}
	if n, ok := a.(store.LossNotifier); ok {
		lost = n.Lost(l)
	}
	for time.Since(began) < ttl+granularity+500*time.Millisecond {
		time.Sleep(400 * time.Millisecond)
		nl, err := a.Renew(ctx, l, ttl)
		if err != nil {
			t.Fatalf("renew after %s: %v", time.Since(began), err)
		}
		if nl.Token != l.Token || nl.Holder != l.Holder || nl.Task != l.Task || nl.RunID != l.RunID {
			t.Fatalf("renew changed the grant: %+v -> %+v", l, nl)
		}
		if nl.Expires.Before(l.Expires) {
			t.Fatalf("renew moved expiry back: %s -> %s", l.Expires, nl.Expires)
		}
		l = nl
	}
	if !l.Expires.After(first.Expires) {
		t.Fatalf("renewals did not extend the lease: %s", l.Expires)
	}
	select {
	case <-lost:
		t.Fatal("LossNotifier reported the lease lost while its holder renewed it")
	default:
	}
	_, err := b.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "b", RunID: "run-b", TTL: ttl})
	wantBusy(t, "acquire past the original TTL of a renewed lease", err, l)
	wantLease(t, b, l)
}

func testLeaseNotOwner(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, a, "job", "a", 30*time.Second)
	wrongHolder, tokenUp, tokenDown, otherTask := l, l, l, l
	wrongHolder.Holder = "b"
	tokenUp.Token++
	tokenDown.Token--
	otherTask.Task = "never-acquired"
	for name, bad := range map[string]store.Lease{"wrong holder": wrongHolder, "newer token": tokenUp, "older token": tokenDown, "other task": otherTask} {
		_, err := b.Renew(ctx, bad, time.Minute)
		wantErr(t, "renew with "+name, err, store.ErrNotHeld)
		wantErr(t, "release with "+name, b.Release(ctx, bad), store.ErrNotHeld)
	}
	// The same holder string is not an identity proof.
	_, err := b.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "a", RunID: "run-a2", TTL: time.Minute})
	wantBusy(t, "second acquire by the same holder", err, l)
	wantLease(t, b, l)
}

func testLeaseRelease(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	la := acquire(t, a, "job", "a", time.Minute)
	if err := a.Release(ctx, la); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := leaseOf(t, b, "job"); got != nil {
		t.Fatalf("released lease still listed: %+v", *got)
	}
	lb := acquire(t, b, "job", "b", time.Minute)
	if lb.Token <= la.Token {
		t.Fatalf("token after release %d, want > %d", lb.Token, la.Token)
	}
	_, err := a.Renew(ctx, la, time.Minute)
	wantErr(t, "renew of a released grant", err, store.ErrNotHeld)
	wantErr(t, "release of a replaced grant", a.Release(ctx, la), store.ErrNotHeld)
	wantLease(t, a, lb)
}

func testLeaseReleaseExpired(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, a, "job", "a", time.Second)
	if leaseOf(t, b, "job") == nil {
		t.Fatal("fresh lease not listed by Leases")
	}
	deadline := time.Now().Add(time.Second + granularity + 2*time.Second)
	for leaseOf(t, b, "job") != nil {
		if time.Now().After(deadline) {
			t.Fatal("Leases still lists a lease past its TTL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Expired but nobody took over: still the latest token, release succeeds.
	if err := a.Release(ctx, l); err != nil {
		t.Fatalf("release of an expired grant nobody took over: %v", err)
	}
	_, err := a.Renew(ctx, l, time.Minute)
	wantErr(t, "renew of an expired, released grant", err, store.ErrNotHeld)
	l2 := acquire(t, b, "job", "b", time.Minute)
	if l2.Token <= l.Token {
		t.Fatalf("token %d after %d", l2.Token, l.Token)
	}
}

func testTokensIncrease(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	ctx := ctxT(t)
	var last int64
	next := func(s store.Store, holder string) {
		t.Helper()
		l := acquire(t, s, "job", holder, time.Minute)
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	// Clients closed by the test itself, so never closed twice (some clients panic on that).
	open := func() store.Store {
		t.Helper()
		s, err := store.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
		}
		return s
	}
	a := open()
	b, closed := open(), false
	t.Cleanup(func() {
		if !closed {
			_ = a.Close()
			_ = b.Close()
		}
	})
	next(a, "a")
	next(b, "b")
	next(a, "a")
	next(a, "a")
	// Restart: close every client, reopen.
	closed = true
	for _, s := range []store.Store{a, b} {
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	c := client(t, dsn)
	next(c, "c")
	next(client(t, dsn), "d")
}

func testTasksIndependent(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	la := acquire(t, a, "x", "a", time.Minute)
	lb := acquire(t, b, "y", "b", time.Minute)
	ls, err := a.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if len(ls) != 2 {
		t.Fatalf("Leases = %+v, want x and y", ls)
	}
	wantLease(t, b, la)
	wantLease(t, a, lb)
}

// testStoreClock: the API carries no client time, so two clients' grants agree on the clock
// and TTL arithmetic is the store's.
func testStoreClock(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	const ttl = 10 * time.Second
	la := acquire(t, a, "x", "a", ttl)
	lb := acquire(t, b, "y", "b", ttl)
	if d := lb.Acquired.Sub(la.Acquired); d < -timeSlack || d > 5*time.Second {
		t.Fatalf("two clients acquiring back to back disagree: %s then %s", la.Acquired, lb.Acquired)
	}
	if d := lb.Expires.Sub(la.Expires); d < -granularity-timeSlack || d > 5*time.Second+granularity {
		t.Fatalf("expiries disagree: %s and %s", la.Expires, lb.Expires)
	}
	for _, s := range []store.Store{a, b} {
		wantLease(t, s, la)
		wantLease(t, s, lb)
	}
	if c, ok := a.(store.Clock); ok {
		now, err := c.Now(ctxT(t))
		if err != nil {
			t.Fatalf("Now: %v", err)
		}
		if now.Before(lb.Acquired.Add(-timeSlack)) || now.After(la.Expires) {
			t.Fatalf("store clock %s is outside [%s, %s]", now, lb.Acquired, la.Expires)
		}
	}
}

// --- ledger tests ---

func begin(t *testing.T, s store.Store, l store.Lease, slot, runID string, n int) store.Attempt {
	t.Helper()
	a, err := s.Begin(ctxT(t), store.Attempt{Task: l.Task, Slot: slot, RunID: runID, Number: n, Holder: l.Holder, Token: l.Token})
	if err != nil {
		t.Fatalf("Begin(%s/%s #%d run %s): %v", l.Task, slot, n, runID, err)
	}
	if a.State != store.Running || a.Number != n || a.RunID != runID || a.Task != l.Task || a.Slot != slot ||
		a.Token != l.Token || a.StartedAt.IsZero() || a.EndedAt != nil {
		t.Fatalf("Begin returned %+v", a)
	}
	return a
}

func finish(t *testing.T, s store.Store, runID string, token int64, st store.State, code int) store.Attempt {
	t.Helper()
	a, err := s.Finish(ctxT(t), runID, token, store.Outcome{State: st, ExitCode: &code})
	if err != nil {
		t.Fatalf("Finish(%s, %s): %v", runID, st, err)
	}
	if a.State != st || a.EndedAt == nil || a.ExitCode == nil || *a.ExitCode != code || a.RunID != runID {
		t.Fatalf("Finish returned %+v", a)
	}
	return a
}

func slotState(t *testing.T, s store.Store, task, slot string) store.SlotState {
	t.Helper()
	st, err := s.Slot(ctxT(t), task, slot)
	if err != nil {
		t.Fatalf("Slot(%s, %s): %v", task, slot, err)
	}
	return st
}

func history(t *testing.T, s store.Store, q store.HistoryQuery) []store.Entry {
	t.Helper()
	es, err := s.History(ctxT(t), q)
	if err != nil {
		t.Fatalf("History(%+v): %v", q, err)
	}
	return es
}

func entryRuns(es []store.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s:%s:%s", e.Task, e.Slot, e.State, e.RunID)
	}
	return b.String()
}

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

func toEntries(as []store.Attempt) []store.Entry {
	es := make([]store.Entry, len(as))
	for i, a := range as {
		es[i] = store.Entry{Attempt: a}
	}
	return es
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

// pause separates history timestamps for backends with coarse clocks.
func pause() { time.Sleep(5 * time.Millisecond) }

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
