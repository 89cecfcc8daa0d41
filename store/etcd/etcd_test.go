package etcd

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func serverDSN(tb testing.TB) string { return storetest.ServerDSN(tb, "ONCE_TEST_ETCD", "etcd") }

// withPrefix returns the server DSN with a fresh ?prefix=.
func withPrefix(tb testing.TB) string {
	return serverDSN(tb) + "?prefix=t" + storetest.RandHex(tb)
}

func harness() storetest.Harness {
	return storetest.Harness{DSN: func(tb testing.TB) string { return withPrefix(tb) }}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness()) }

// TestKeysForgetBatched: Forget walks the scope a page at a time (kvstore.Keys.Forget), with the
// answers of one pass over the whole scope.
func TestKeysForgetBatched(t *testing.T) { storetest.KeysForgetBatched(t, harness()) }

// BenchmarkSuite: the suite's benchmarks (docs/benchmarks.md).
func BenchmarkSuite(b *testing.B) { storetest.RunBenchmarks(b, harness()) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLost: a lease revoked behind the holder's back (as etcd does on expiry) closes Lost at once.
func TestLost(t *testing.T) {
	dsn := withPrefix(t)
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lost := s.Lost(l)
	select {
	case <-lost:
		t.Fatal("lost before anything happened")
	case <-time.After(300 * time.Millisecond):
	}
	_, id, err := s.current(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := s.c.revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
		t.Logf("loss noticed after %s", time.Since(began))
	case <-time.After(5 * time.Second):
		t.Fatal("revoked lease not reported lost")
	}
	_, err = s.Renew(ctx, l, 30*time.Second)
	if !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("renew after revocation: %v", err)
	}
}

// TestRestart: etcd stops and starts while a lease is held. While it is down calls fail with
// ErrUnavailable; afterwards the grant is either still the same (renew keeps the token) or lost
// (renew says ErrNotHeld and Lost is closed), never granted to a second holder while kept.
func TestRestart(t *testing.T) {
	dsn := withPrefix(t)
	ctl := os.Getenv("ONCE_TEST_ETCD_CTL")
	if ctl == "" {
		t.Skip("ONCE_TEST_ETCD_CTL is not set (a server of your own)")
	}
	ctx := ctxT(t, 90*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h", RunID: "run", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lost := s.Lost(l)
	start := storetest.Outage(t, ctl)
	storetest.RenewWhileDown(t, ctx, s, l, 10*time.Second, 3*time.Second)
	start()
	other, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	l2, rerr := s.Renew(ctx, l, 10*time.Second)
	_, aerr := other.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h2", RunID: "run2", TTL: 10 * time.Second})
	switch {
	case rerr == nil:
		if l2.Token != l.Token || !errors.Is(aerr, store.ErrBusy) {
			t.Fatalf("kept lease %+v but other acquire: %v", l2, aerr)
		}
		if err := s.Release(ctx, l2); err != nil {
			t.Fatal(err)
		}
	case errors.Is(rerr, store.ErrNotHeld):
		select {
		case <-lost:
		case <-time.After(5 * time.Second):
			t.Fatal("lease lost but Lost not closed")
		}
	default:
		t.Fatalf("renew after restart: %v", rerr)
	}
	l3, err := other.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h3", RunID: "run3", TTL: 10 * time.Second})
	if errors.Is(err, store.ErrBusy) && aerr == nil {
		err = nil // other already holds it
	}
	if err != nil || (aerr != nil && l3.Token <= l.Token) {
		t.Fatalf("acquire after the restart: %+v, %v", l3, err)
	}
}

func TestBadDSN(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"etcd://h:1?prefix=a/b", "prefix"},
		{"etcd://h:1?dial_timeout=0s", `"dial_timeout" is "0s"`},
		{"etcd://u:sekrit@h:1?x=1", `"x"`},
		{"etcd://u:sekrit@h:1/x", "xxxxx"},
		{"etcd://:sekrit@h:1", "without a user"},
		{"etcd://h:1?prefix=teamA;x", `"prefix"`},
		{"etcd://h:1?prefix=a.b", `"prefix"`},
		{"etcd://h:1?prefx=b", `did you mean "prefix"`},
		{"etcd://h:1?prefix=a%zz", `"prefix"`},
		{"etcd://h:1#x", "'#'"},
		{"etcd://h:1,,h2:2", "empty"},
		{"etcd://h:1/path", "path"},
		{"etcd://h:1?dial_timeout=soon", "dial_timeout"},
	} {
		_, err := ParseDSN(c.dsn)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sekrit") {
			t.Errorf("ParseDSN(%q) = %v; want ErrBadDSN mentioning %q", c.dsn, err, c.want)
		}
	}
	cfg, err := ParseDSN("etcd://alice:p%40w@h1:2379,h2?prefix=blue&dial_timeout=2s")
	if err != nil || cfg.Prefix != "blue" || cfg.Username != "alice" || cfg.Password != "p@w" || len(cfg.Endpoints) != 2 ||
		cfg.Endpoints[1] != "h2:2379" || cfg.Dial != 2*time.Second {
		t.Fatalf("ParseDSN = %+v, %v", cfg, err)
	}
	_, err = Open(ctxT(t, 10*time.Second), "etcd://127.0.0.1:1?dial_timeout=1s")
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open of a closed port: %v", err)
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{"etcd://127.0.0.1:2379", "etcds://u:p@h:1?ca=%2Fca.pem&cert=c&key=k&prefix=x", "etcds://h?cert=c", "etcd://h?ca=x", "etcds://h?skip_verify=maybe", "etcd://u:p@h1:1,h2:2/?prefix=a.b", "etcd://h?prefix=", "etcd://:p@h", "etcd://h/x", "etcd://h?dial_timeout=1s&prefix=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, store.ErrBadDSN) {
				t.Fatalf("ParseDSN(%q): %v does not wrap ErrBadDSN", dsn, err)
			}
			return
		}
		if store.CheckPrefix(cfg.Prefix) != nil || len(cfg.Endpoints) == 0 || cfg.Dial <= 0 {
			t.Fatalf("ParseDSN(%q) = %+v", dsn, cfg)
		}
		for _, e := range cfg.Endpoints {
			if e == "" || strings.ContainsAny(e, "@/?,") {
				t.Fatalf("ParseDSN(%q) endpoint %q", dsn, e)
			}
		}
	})
}

// TestIdleLeaseReuse: an acquire uses an idle etcd lease whose TTL this process restarted within
// renewedJust as it is (its grant ends with that restart's TTL, less than store.ShortGrant short of
// the TTL asked), renews one restarted longer ago, or known only from a recorded wall time,
// alongside its transaction, and takes a new etcd lease when the idle one was revoked.
func TestIdleLeaseReuse(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl = 30 * time.Second
	req := store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: ttl}
	// acquire sets the idle lease's last restart to ago before now (sure: by the monotonic clock),
	// acquires and returns the grant, how long it was granted for and its etcd lease.
	acquire := func(ago time.Duration, sure bool) (store.Lease, time.Duration, int64) {
		t.Helper()
		s.mu.Lock()
		idle := s.idle[int64(ttl/time.Second)]
		if len(idle) != 1 {
			s.mu.Unlock()
			t.Fatalf("%d idle etcd leases, want 1", len(idle))
		}
		idle[0].fresh, idle[0].sure = time.Now().Add(-ago), sure
		s.mu.Unlock()
		l, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		_, id, err := s.current(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		return l, l.Expires.Sub(l.Acquired), id
	}
	release := func(l store.Lease) {
		t.Helper()
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := s.current(ctx, l)
	release(l)

	for try := 0; ; try++ {
		l, d, id2 := acquire(5*time.Millisecond, true)
		release(l)
		if d == ttl && try < 5 {
			continue // more than renewedJust passed before the acquire was sent (a pause): renewed
		}
		if id2 != id || d > ttl-5*time.Millisecond || d < ttl-store.ShortGrant {
			t.Fatalf("restarted 5ms before: etcd lease %d (want %d), granted %s (want %s less what passed since, less than %s)", id2, id, d, ttl, store.ShortGrant)
		}
		break
	}
	for _, c := range []struct {
		ago  time.Duration
		sure bool
	}{{time.Second, true}, {5 * time.Millisecond, false}} {
		l, d, id2 := acquire(c.ago, c.sure)
		release(l)
		if id2 != id || d != ttl {
			t.Fatalf("restarted %s before (known by the monotonic clock: %v): etcd lease %d (want %d), granted %s (want %s, renewed with it)", c.ago, c.sure, id2, id, d, ttl)
		}
	}

	s.mu.Lock()
	s.idle[int64(ttl/time.Second)][0].fresh = time.Now()
	s.mu.Unlock()
	if err := s.c.revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	l, err = s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, id2, _ := s.current(ctx, l)
	if d := l.Expires.Sub(l.Acquired); id2 == id || d != ttl {
		t.Fatalf("revoked behind its back: etcd lease %d (the revoked one: %d), granted %s (want %s)", id2, id, d, ttl)
	}
	release(l)
}
