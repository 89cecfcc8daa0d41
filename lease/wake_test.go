package lease_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/postgres"
	_ "github.com/once-run/once/store/redis"
	"github.com/once-run/once/store/storetest"
	_ "github.com/once-run/once/store/zk"
)

// wakeStores are the stores a waiter's wake-up is measured on: SQLite, and each networked store
// whose server the environment names (./scripts/test starts them; ONCE_TEST_REQUIRE makes a
// missing one fail). Each gets a fresh prefix.
func wakeStores(tb testing.TB, names ...string) map[string]store.Store {
	out := map[string]store.Store{}
	path := filepath.Join(tb.TempDir(), "once.db")
	envs := map[string]string{"postgres": "ONCE_TEST_POSTGRES", "mysql": "ONCE_TEST_MYSQL", "redis": "ONCE_TEST_REDIS",
		"etcd": "ONCE_TEST_ETCD", "zk": "ONCE_TEST_ZK"}
	for _, name := range names {
		dsn := "sqlite://" + path
		if env := envs[name]; env != "" {
			base := os.Getenv(env)
			if base == "" {
				if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, name) {
					tb.Fatalf("%s is not set but ONCE_TEST_REQUIRE=%s requires %s; run ./scripts/test", env, r, name)
				}
				tb.Logf("%s is not set: %s is not measured", env, name)
				continue
			}
			dsn = base + "?prefix=t" + storetest.RandHex(tb)
			if strings.Contains(base, "?") {
				dsn = storetest.WithPrefix(tb, base)
			}
		}
		s, err := store.Open(context.Background(), dsn)
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		tb.Cleanup(func() { s.Close() })
		out[name] = s
	}
	return out
}

// clockOffset is the store's clock minus this host's, from the fastest of a few round trips (0
// for a store that cannot tell its time), and how far off that may be: half the fastest round
// trip, tens of milliseconds on a loaded machine.
func clockOffset(tb testing.TB, s store.Store) (off, within time.Duration) {
	c, ok := s.(store.Clock)
	if !ok {
		return 0, 0
	}
	best := time.Hour
	for range 10 {
		t0 := time.Now()
		st, err := c.Now(context.Background())
		rtt := time.Since(t0)
		if err != nil {
			tb.Fatal(err)
		}
		if rtt < best {
			best, off = rtt, st.Sub(t0.Add(rtt/2))
		}
	}
	return off, best / 2
}

// wakeLatencies makes n tasks held by a holder that died (leases that expire 400 ms + i·step after
// they were taken), starts a waiter on each with acquire, and returns how long after each
// expiry — by the store's clock, brought to this host's — its waiter held the lease (held: the
// instant acquire returns first), and sent the try that won (its second instant; a waiter that
// does not know it gives held twice), each sorted, and how far off bringing the clocks together
// may be (clockOffset, before and after, and how far the offset moved between them).
func wakeLatencies(tb testing.TB, s store.Store, n int, step time.Duration,
	acquire func(ctx context.Context, req store.AcquireRequest) (held, sent time.Time, err error)) (lateHeld, lateSent []time.Duration, within time.Duration) {
	ctx := context.Background()
	off, within := clockOffset(tb, s)
	run := storetest.RandHex(tb)
	expires := make([]time.Time, n)
	for i := range n {
		g, err := s.Acquire(ctx, store.AcquireRequest{Task: fmt.Sprintf("wake-%s-%d", run, i), Holder: "dead:1", RunID: "dead",
			TTL: 400*time.Millisecond + time.Duration(i)*step})
		if err != nil {
			tb.Fatal(err)
		}
		expires[i] = g.Expires.Add(-off)
	}
	lateHeld, lateSent = make([]time.Duration, n), make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			held, sent, err := acquire(ctx, store.AcquireRequest{Task: fmt.Sprintf("wake-%s-%d", run, i), Holder: "waiter:2", RunID: "w", TTL: 10 * time.Second})
			if err != nil {
				tb.Errorf("waiter %d: %v", i, err)
				held, sent = time.Now(), time.Now()
			}
			lateHeld[i], lateSent[i] = held.Sub(expires[i]), sent.Sub(expires[i])
		})
	}
	wg.Wait()
	slices.Sort(lateHeld)
	slices.Sort(lateSent)
	// The two clocks may move apart during the round (SQLite's is the boot clock from an epoch,
	// the host's the wall clock, which NTP steers: 5 ms in a few seconds once, under load): how
	// far they did is as uncertain as the comparison.
	off2, within2 := clockOffset(tb, s)
	return lateHeld, lateSent, max(within, within2) + (off2 - off).Abs()
}

func pct(ds []time.Duration, p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }

// Issue 12: a waiter whose holder died holds the lease soon after the expiry its busy
// answer named — not after a blind backoff of up to a second (p50 0.3 s, p99 1 s). etcd is left
// out: it revokes expired leases on a timer of its own, about 500 ms late (bench/wait-wakeup.sh).
// A round is measured again (up to three) when it misses: on a loaded machine the scheduler's
// delays are in the figures too; a waiter that backs off blindly misses every round by far.
//
// What is compared with the expiry is when the waiter sent the try that won (tries, below), not when
// the store answered it: on a loaded CI machine SQLite's answers came up to 1.5 s after the expiry
// (40 writers, each committing, behind other packages' fsyncs), which says nothing about when the
// waiter woke. Both are logged.
func TestWaitWakesAtTheExpiry(t *testing.T) {
	for name, s := range wakeStores(t, "sqlite", "postgres", "mysql", "redis", "zk") {
		t.Run(name, func(t *testing.T) { // one store at a time: the machine's load is not the waiter's
			var rounds []string
			tr := &tries{Store: s}
			for range 3 {
				held, late, within := wakeLatencies(t, s, 40, 25*time.Millisecond, func(ctx context.Context, req store.AcquireRequest) (time.Time, time.Time, error) {
					l, err := lease.Acquire(ctx, tr, req, 10*time.Second)
					if err != nil {
						return time.Time{}, time.Time{}, err
					}
					return time.Now(), tr.last(req.Task), l.Release(ctx)
				})
				p50, p99 := pct(late, 0.5), pct(late, 0.99)
				rounds = append(rounds, fmt.Sprintf("winning try sent p50 %s p99 %s max %s, held p50 %s p99 %s",
					p50.Round(time.Microsecond), p99.Round(time.Microsecond), late[len(late)-1].Round(time.Microsecond),
					pct(held, 0.5).Round(time.Microsecond), pct(held, 0.99).Round(time.Microsecond)))
				// The clocks are brought together within half a round trip: a loaded machine's 50 ms
				// round trip shifted every figure by -26 ms once.
				if held[0] < -5*time.Millisecond-within {
					t.Fatalf("held %s before the expiry (clocks compared within %s): the store's clock and this host's disagree: %v", -held[0], within, held)
				}
				// Speed is measured by bench/wait-wakeup.sh; this only tells waking at the expiry (p50 of a
				// few ms, tens under load) from blind backoff (p50 of 450 ms and more), with a margin wide
				// enough for a loaded CI machine.
				if p50 <= 150*time.Millisecond {
					t.Logf("%s: held after the expiry: %s", name, strings.Join(rounds, "; "))
					return
				}
			}
			t.Errorf("%s: held after the expiry, want p50 ≤ 150ms (waking at the expiry, not backing off): %s", name, strings.Join(rounds, "; "))
		})
	}
}

// tries is a store whose Acquire notes when each task's last try was sent, so that a test can tell
// when a waiter woke from how long the store took to answer. It is a store.Clock when its store is
// (lease.Acquire reads the clock to place the expiry it is told).
type tries struct {
	store.Store
	mu   sync.Mutex
	sent map[string]time.Time // task → its last try
}

func (t *tries) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	t.mu.Lock()
	if t.sent == nil {
		t.sent = map[string]time.Time{}
	}
	t.sent[req.Task] = time.Now()
	t.mu.Unlock()
	return t.Store.Acquire(ctx, req)
}

func (t *tries) Now(ctx context.Context) (time.Time, error) {
	if c, ok := t.Store.(store.Clock); ok {
		return c.Now(ctx)
	}
	return time.Time{}, fmt.Errorf("%T has no clock", t.Store)
}

// last is when task's last try was sent.
func (t *tries) last(task string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[task]
}
