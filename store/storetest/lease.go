package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The lease cases: one holder at a time, expiry by the store's clock, renewals, fencing tokens.

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
	lb, err := b.Acquire(ctx, req)
	if time.Since(began) < ttl-200*time.Millisecond {
		wantBusy(t, "acquire at half the TTL", err, la)
	}
	// On a loaded machine the call at half the TTL may come after the expiry, and take the lease:
	// then it is the takeover, and a next Acquire would rightly find b's own grant busy.
	deadline := began.Add(ttl + granularity + 2*time.Second)
	for err != nil {
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
	// A machine that stalls longer than the TTL between two renewals (a loaded CI run did, 13 s
	// into a 7 s loop) loses the lease as it should: that check begins again on a new task, twice
	// at most, rather than failing the store.
	for i, task := range []string{"job", "job-2", "job-3"} {
		stall := renewWhileHeld(t, a, b, task)
		if stall == 0 {
			return
		}
		t.Logf("attempt %d: the machine stalled %s between two calls, longer than the TTL: the lease lapsed as it should; again on a new task", i+1, stall.Round(time.Millisecond))
	}
	t.Fatal("the machine stalled longer than the TTL in each of three attempts")
}

// renewWhileHeld renews a lease of task past its TTL, then checks that it held throughout. It
// returns the stall when a call came later than the TTL after the last one that held the lease
// (the lease may have lapsed: nothing is checked), else 0.
func renewWhileHeld(t *testing.T, a, b store.Store, task string) time.Duration {
	ctx := ctxT(t)
	// Renewed every 400 ms: a TTL of 6 s leaves a loaded machine 5.6 s between two renewals (at
	// 1.5 s one stalled CI run lost the lease between them; at 3 s, on SQLite's prefix variant,
	// whose parallel subtests share one file and so one write lock, two fresh-clone runs did).
	const ttl = 6 * time.Second
	began := time.Now()
	l := acquire(t, a, task, "a", ttl)
	held := time.Now() // when the lease was last known held: the end of the last call that held it
	first := l
	stalled := func() time.Duration {
		if d := time.Since(held); d >= ttl-timeSlack {
			return d
		}
		return 0
	}
	// A store that announces lost leases must not announce its holder's own renewals.
	var lost <-chan struct{}
	if n, ok := a.(store.LossNotifier); ok {
		lost = n.Lost(l)
	}
	for time.Since(began) < ttl+granularity+500*time.Millisecond {
		time.Sleep(400 * time.Millisecond)
		nl, err := a.Renew(ctx, l, ttl)
		if err != nil {
			if d := stalled(); d > 0 && errors.Is(err, store.ErrNotHeld) {
				return d
			}
			t.Fatalf("renew after %s: %v", time.Since(began), err)
		}
		held = time.Now()
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
		if d := stalled(); d > 0 {
			return d
		}
		t.Fatal("LossNotifier reported the lease lost while its holder renewed it")
	default:
	}
	_, err := b.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "b", RunID: "run-b", TTL: ttl})
	if d := stalled(); d > 0 && err == nil {
		return d
	}
	wantBusy(t, "acquire past the original TTL of a renewed lease", err, l)
	wantLease(t, b, l)
	return 0
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
	// A machine that stalls longer than the 1 s TTL between the acquire and the first listing (a
	// loaded clean-clone run did, on SQLite's prefix variant, whose parallel subtests share one
	// file's write lock) lists the lease expired, as it should: again on a new task, twice at most.
	var l store.Lease
	task := "job"
	for i := 0; ; i++ {
		start := time.Now()
		l = acquire(t, a, task, "a", time.Second)
		if leaseOf(t, b, task) != nil {
			break
		}
		if stall := time.Since(start); stall < time.Second || i == 2 {
			t.Fatalf("fresh lease not listed by Leases (%s after the acquire began)", stall.Round(time.Millisecond))
		} else {
			t.Logf("attempt %d: the machine stalled %s, longer than the TTL, before the lease was listed; again on a new task", i+1, stall.Round(time.Millisecond))
		}
		task = fmt.Sprintf("job-%d", i+2)
	}
	deadline := time.Now().Add(time.Second + granularity + 2*time.Second)
	for leaseOf(t, b, task) != nil {
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
	l2 := acquire(t, b, task, "b", time.Minute)
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

// testStoreClosed: a closed store refuses every call with ErrUnavailable, as a store that cannot
// be reached (a caller tells it by errors.Is, like every other outcome), takes no lease for a
// caller that goes on using it, and closing it again is harmless and returns nil.
func testStoreClosed(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	ctx := ctxT(t)
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
	}
	if _, err := s.Leases(ctx); err != nil { // used once: a pool with a connection to close
		t.Fatalf("Leases: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close again: %v, want nil", err)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "x", Holder: "a", RunID: "run-a", TTL: time.Minute})
	wantErr(t, "Acquire after Close", err, store.ErrUnavailable)
	_, err = s.Slot(ctx, "x", "s")
	wantErr(t, "Slot after Close", err, store.ErrUnavailable)
	_, err = s.Leases(ctx)
	wantErr(t, "Leases after Close", err, store.ErrUnavailable)
	if held, err := client(t, dsn).Leases(ctx); err != nil || len(held) != 0 {
		t.Fatalf("Leases by another client: %+v, %v; want none (the closed store took no lease)", held, err)
	}
}
