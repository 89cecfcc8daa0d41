package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// Regression test for the chaos harness's clock faults (issue 7): with lease expiry on each
// process's wall clock, a process whose clock read an hour ahead took over a live lease, and a
// holder an hour behind wrote a lease the others read as long expired: two executions at once.
// The store's clock is now the machine's boot clock from one epoch per boot, so no process's
// wall clock decides whether a lease is live.
func TestLeaseIgnoresOneProcessWallClock(t *testing.T) {
	ctx := context.Background()
	for _, first := range []time.Duration{0, time.Hour, -time.Hour} {
		path := filepath.Join(t.TempDir(), "once.db")
		open := func(skew time.Duration) *sqlite.Store {
			s, err := sqlite.Open(ctx, path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			sqlite.SkewWall(s, skew)
			return s
		}
		// The first process of the boot fixes the epoch, whatever its clock says.
		if _, err := open(first).Leases(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name         string
			holder, next time.Duration
		}{
			{"next ahead", 0, time.Hour},
			{"holder behind", -time.Hour, 0},
			{"holder ahead", time.Hour, 0},
			{"next behind", 0, -time.Hour},
		} {
			task := c.name
			h, n := open(c.holder), open(c.next)
			l, err := h.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", TTL: 2 * time.Second})
			if err != nil {
				t.Fatalf("first %s, %s: acquire: %v", first, c.name, err)
			}
			_, err = n.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "n", TTL: 2 * time.Second})
			var be *store.BusyError
			if !errors.As(err, &be) || be.Lease.Token != l.Token {
				t.Fatalf("first %s, %s: a live lease was granted again: %v", first, c.name, err)
			}
			if _, err := h.Renew(ctx, l, 2*time.Second); err != nil {
				t.Fatalf("first %s, %s: renew: %v", first, c.name, err)
			}
			ls, err := n.Leases(ctx)
			if err != nil || len(ls) == 0 {
				t.Fatalf("first %s, %s: the other process does not see the live lease: %v %v", first, c.name, ls, err)
			}
			if err := h.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "n", TTL: time.Second}); err != nil {
				t.Fatalf("first %s, %s: acquire after release: %v", first, c.name, err)
			}
		}
	}
}

// An expired lease is taken over after its TTL by the boot clock, whatever the wall clocks say.
func TestLeaseExpiresByBootClock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "once.db")
	h, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	n, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	sqlite.SkewWall(n, -time.Hour)
	if _, err := h.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	l, err := n.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "n", TTL: time.Second})
	if err != nil || l.Token != 2 {
		t.Fatalf("takeover after the TTL: %+v %v", l, err)
	}
}

// The epoch of a boot may be fixed by a process whose wall clock was wrong (a board without a
// real-time clock before NTP, a VM restored from a snapshot): expiry is unaffected, and times
// still read as each host's wall clock, a lease's Expires − Acquired still the TTL.
func TestTimesShownOnWallClock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "once.db")
	early, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	sqlite.SkewWall(early, -5*time.Hour)
	if _, err := early.Acquire(ctx, store.AcquireRequest{Task: "boot", Holder: "early", TTL: time.Millisecond}); err != nil {
		t.Fatal(err) // fixes this boot's epoch five hours early
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	near := func(what string, got time.Time, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("%s = %s, want about %s", what, got, want)
		}
	}
	now := time.Now()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	near("Acquired", l.Acquired, now)
	if d := l.Expires.Sub(l.Acquired); d != time.Minute {
		t.Errorf("Expires - Acquired = %s, want the TTL", d)
	}
	a, err := s.Begin(ctx, store.Attempt{Task: "t", Slot: "s", RunID: "r1", Number: 1, Holder: "h", Token: l.Token})
	if err != nil {
		t.Fatal(err)
	}
	near("StartedAt", a.StartedAt, now)
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("Leases: %v %v", ls, err)
	}
	near("listed Expires", ls[0].Expires, now.Add(time.Minute))
	_, err = early.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "e", TTL: time.Second})
	var be *store.BusyError
	if !errors.As(err, &be) {
		t.Fatalf("acquire of a live lease: %v", err)
	}
	near("Expires as the early process shows it", be.Lease.Expires, now.Add(time.Minute-5*time.Hour))
	sn, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near("Now", sn, time.Now())
}
