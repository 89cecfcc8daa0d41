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
