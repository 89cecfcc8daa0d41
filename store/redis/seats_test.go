package redis

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func seatOf(t *testing.T, s *Store, task, holder string, limit int, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t, time.Minute), store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + holder, TTL: ttl, Limit: limit})
	if err != nil {
		t.Fatalf("seat of %s: %v", holder, err)
	}
	return l
}

func openT(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(ctxT(t, time.Minute), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSeatSummary: while seats are live the lease key is their summary — the latest seat, an
// expiry no earlier than any seat's — so the exclusive acquire (an older once's too: the same
// SET NX) is busy; Leases lists the seats as Acquire returned them, not the summary; once every
// seat is released the key is gone and the task is free.
func TestSeatSummary(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	long := seatOf(t, s, "job", "a", 3, time.Minute)
	short := seatOf(t, s, "job", "b", 3, 10*time.Second)
	v, err := s.c.Get(ctx, s.tkey("job", "lease")).Result()
	if err != nil {
		t.Fatal(err)
	}
	var lv leaseValue
	if err := json.Unmarshal([]byte(v), &lv); err != nil || lv.T != "2" || lv.H != "b" || lv.L != "3" {
		t.Fatalf("summary %s, %v: want the latest seat's (token 2 of b, l 3)", v, err)
	}
	if pttl := s.c.PTTL(ctx, s.tkey("job", "lease")).Val(); pttl < 50*time.Second {
		t.Fatalf("summary lives %s, want at least the longer seat's ~1m", pttl)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "run-x", TTL: time.Minute})
	var be *store.BusyError
	if !errors.As(err, &be) || be.Lease.Token != short.Token {
		t.Fatalf("exclusive acquire while seats are live: %v, want busy naming the latest seat", err)
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 2 || ls[0] != long || ls[1] != short {
		t.Fatalf("Leases: %+v, %v; want %+v and %+v", ls, err, long, short)
	}
	for _, l := range []store.Lease{short, long} {
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("release of seat %d: %v", l.Token, err)
		}
	}
	if n := s.c.Exists(ctx, s.tkey("job", "lease")).Val(); n != 0 {
		t.Fatal("the summary outlived the released seats")
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("Leases after the releases: %+v, %v", ls, err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "run-x", TTL: time.Minute}); err != nil {
		t.Fatalf("exclusive acquire after the seats: %v", err)
	}
}

// TestSeatsReplaced: an exclusive Acquire with Replace over live seats takes over from the latest
// (Replaced, with its Limit) and ends every seat: their renewals, releases and ledger writes are
// refused, and the seats hash is gone.
func TestSeatsReplaced(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	a := seatOf(t, s, "job", "a", 2, time.Minute)
	b := seatOf(t, s, "job", "b", 2, time.Minute)
	x, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "run-x", TTL: time.Minute, Replace: true})
	if err != nil || x.Replaced == nil || x.Replaced.Token != b.Token || x.Replaced.Limit != 2 || x.Token != b.Token+1 {
		t.Fatalf("replace over seats: %+v, %v; want token %d replacing seat %d", x, err, b.Token+1, b.Token)
	}
	for _, l := range []store.Lease{a, b} {
		if _, err := s.Renew(ctx, l, time.Minute); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("renew of seat %d after the replace: %v", l.Token, err)
		}
		if err := s.Release(ctx, l); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("release of seat %d after the replace: %v", l.Token, err)
		}
		_, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "s", RunID: "r" + l.Holder, Number: 1, Holder: l.Holder, Token: l.Token})
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("begin with seat %d after the replace: %v", l.Token, err)
		}
	}
	if n := s.c.Exists(ctx, s.tkey("job", "seats")).Val(); n != 0 {
		t.Error("the seats hash outlived the exclusive grant")
	}
	if err := s.Release(ctx, x); err != nil {
		t.Fatal(err)
	}
}

// TestSeatsAfterOldExclusive: an older once grants the exclusive lease without deleting the seats
// hash (its script predates seats); the seats left in it are not current — the counter is not a
// seat's — so their tokens are refused, and the next seat acquire starts afresh.
func TestSeatsAfterOldExclusive(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := context.Background()
	a := seatOf(t, s, "job", "a", 2, time.Minute)
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The old acquire: HINCRBY and SET NX, nothing else.
	n := s.c.HIncrBy(ctx, s.tkey("job", "fence"), "n", 1).Val()
	old, _ := json.Marshal(leaseValue{T: "2", H: "old", R: "run-old", A: "1", X: "2"})
	if n != 2 || !s.c.SetNX(ctx, s.tkey("job", "lease"), old, time.Second).Val() {
		t.Fatalf("old acquire: counter %d", n)
	}
	_, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "s", RunID: "run-a", Number: 1, Holder: "a", Token: a.Token})
	if !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("begin with a seat older than the exclusive grant: %v", err)
	}
	if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("release of a seat older than the exclusive grant: %v", err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "c", RunID: "run-c", TTL: time.Minute, Limit: 2}); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("seat while the old exclusive grant is live: %v", err)
	}
	s.c.Del(ctx, s.tkey("job", "lease"))
	c := seatOf(t, s, "job", "c", 2, time.Minute)
	if keys := s.c.HKeys(ctx, s.tkey("job", "seats")).Val(); len(keys) != 1 || keys[0] != "3" || c.Token != 3 {
		t.Fatalf("seats after the old exclusive grant: %v (seat %d), want only token 3", keys, c.Token)
	}
}

// TestSeatWaitUnacknowledged: with ?wait=1 and no replica a seat is not handed out, and it is
// released again: the task is not left with a live seat.
func TestSeatWaitUnacknowledged(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx := ctxT(t, time.Minute)
	w := openT(t, dsn+"&wait=1&wait_timeout=100ms")
	_, err := w.Acquire(ctx, store.AcquireRequest{Task: "w", Holder: "h", RunID: "r1", TTL: time.Minute, Limit: 2})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged the lease grant") {
		t.Fatalf("seat without a replica: %v", err)
	}
	s := openT(t, dsn)
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("Leases after the unacknowledged seat: %+v, %v; want none", ls, err)
	}
	if l, err := s.Acquire(ctx, store.AcquireRequest{Task: "w", Holder: "x", RunID: "rx", TTL: time.Minute}); err != nil || l.Token != 2 {
		t.Fatalf("exclusive acquire after the unacknowledged seat: %+v, %v; want token 2", l, err)
	}
}

// TestSeatsAfterExclusive: this once's free exclusive grant leaves the hash of expired or released
// seats (the next seat acquire deletes it), but it ends their fence: the counter is the grant's
// token, no seat's, so a seat's renewal, release and ledger writes are refused, during the grant
// and after its release; and the next seat acquire starts afresh.
func TestSeatsAfterExclusive(t *testing.T) {
	s := openT(t, storetest.WithPrefix(t, serverDSN(t)))
	ctx := ctxT(t, time.Minute)
	a := seatOf(t, s, "job", "a", 2, time.Minute)
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	x, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "x", RunID: "run-x", TTL: time.Minute})
	if err != nil || x.Token != a.Token+1 {
		t.Fatalf("exclusive grant after the seat: %+v, %v", x, err)
	}
	for _, phase := range []string{"during", "after"} {
		if _, err := s.Renew(ctx, a, time.Minute); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("renew of the seat %s the exclusive grant: %v", phase, err)
		}
		if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("release of the seat %s the exclusive grant: %v", phase, err)
		}
		_, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "s-" + phase, RunID: "run-a-" + phase, Number: 1, Holder: "a", Token: a.Token})
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("begin with the seat %s the exclusive grant: %v", phase, err)
		}
		if phase == "during" {
			if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "c", RunID: "run-c", TTL: time.Minute, Limit: 2}); !errors.Is(err, store.ErrBusy) {
				t.Fatalf("seat during the exclusive grant: %v", err)
			}
			if err := s.Release(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := seatOf(t, s, "job", "c", 2, time.Minute)
	if keys := s.c.HKeys(ctx, s.tkey("job", "seats")).Val(); len(keys) != 1 || c.Token != x.Token+1 || keys[0] != strconv.FormatInt(c.Token, 10) {
		t.Fatalf("seats after the exclusive grant: %v (seat %d), want only %d", keys, c.Token, x.Token+1)
	}
}
