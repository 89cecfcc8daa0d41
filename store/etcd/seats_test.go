package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestSeatLost: a seat whose etcd lease is revoked (as etcd does on expiry) closes its Lost
// channel and not the other seat's; a seat already gone when Lost is called closes it at once.
func TestSeatLost(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := func(h string) store.AcquireRequest {
		return store.AcquireRequest{Task: "job", Holder: h, RunID: "run-" + h, TTL: 30 * time.Second, Limit: 2}
	}
	a, err := s.Acquire(ctx, req("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, req("b"))
	if err != nil {
		t.Fatal(err)
	}
	lostA, lostB := s.Lost(a), s.Lost(b)
	kv, err := s.liveSeat(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the watches are set up
	if err := s.c.revoke(ctx, int64(kv.Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lostA:
	case <-time.After(5 * time.Second):
		t.Fatal("revoked seat not reported lost")
	}
	select {
	case <-lostB:
		t.Fatal("the other seat reported lost")
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := s.Renew(ctx, a, 30*time.Second); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("renew of the revoked seat: %v", err)
	}
	select {
	case <-s.Lost(a):
	case <-time.After(5 * time.Second):
		t.Fatal("Lost of a seat already gone did not close")
	}
}

// TestReplaceSeats: an exclusive Acquire with Replace ends the live seats (their Lost closes,
// their writes are refused) and reports one of them as Replaced.
func TestReplaceSeats(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "a", RunID: "run-a", TTL: 30 * time.Second, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "s", RunID: "run-a", Holder: "a", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	lost := s.Lost(a)
	x, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "run-x", TTL: 30 * time.Second, Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	if x.Replaced == nil || x.Replaced.Token != a.Token || x.Token <= a.Token {
		t.Fatalf("replace over a seat: %+v, replaced %+v", x, x.Replaced)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("replaced seat not reported lost")
	}
	if err := s.Report(ctx, "run-a", a.Token, store.Report{Note: "late"}); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("write of a replaced seat: %v", err)
	}
	if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("release of a replaced seat: %v", err)
	}
}
