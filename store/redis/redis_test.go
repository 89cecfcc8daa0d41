package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func serverDSN(tb testing.TB) string { return storetest.ServerDSN(tb, "ONCE_TEST_REDIS", "redis") }

func harness() storetest.Harness {
	return storetest.Harness{DSN: func(tb testing.TB) string { return storetest.WithPrefix(tb, serverDSN(tb)) }}
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

// TestRestart: the server stops and starts (with its append-only file) while a lease is held.
// While down, calls fail with ErrUnavailable; afterwards the lease is still the same grant and
// nobody else can take it.
func TestRestart(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctl := os.Getenv("ONCE_TEST_REDIS_CTL")
	if ctl == "" {
		t.Skip("ONCE_TEST_REDIS_CTL is not set (a server of your own)")
	}
	ctx := ctxT(t, 60*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h", RunID: "run", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "r", Slot: "s", RunID: "run", Number: 1, Holder: "h", Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	start := storetest.Outage(t, ctl)
	storetest.RenewWhileDown(t, ctx, s, l, 30*time.Second, 5*time.Second)
	start()
	other, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h2", RunID: "run2", TTL: time.Minute})
	if !errors.Is(err, store.ErrBusy) {
		t.Fatalf("acquire by another client after restart: %v, want busy", err)
	}
	l2, err := s.Renew(ctx, l, 30*time.Second)
	if err != nil || l2.Token != l.Token {
		t.Fatalf("renew after restart = %+v, %v", l2, err)
	}
	if err := s.Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
	l3, err := other.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h2", RunID: "run2", TTL: time.Minute})
	if err != nil || l3.Token <= l.Token {
		t.Fatalf("acquire after release = %+v, %v; want token > %d", l3, err, l.Token)
	}
	if st, err := other.Slot(ctx, "r", "s"); err != nil || st.Last == nil || st.Last.RunID != "run" {
		t.Fatalf("ledger after restart: %+v, %v", st, err)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startVolatileRedis starts a redis-server without any persistence on a free port and returns its
// address and a restart func.
func startVolatileRedis(t *testing.T) (string, func()) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH")
	}
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return
			}
			if i > 100 {
				t.Fatal("volatile redis did not start")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	start()
	t.Cleanup(stop)
	return addr, func() { stop(); start() }
}

// TestLedgerLoss: Redis without persistence restarts under a client that holds a lease and has
// recorded an attempt. The client reports ErrLedgerLost instead of treating the slot as never run;
// a client opened after the loss re-initialises the prefix, and the old client still refuses.
func TestLedgerLoss(t *testing.T) {
	addr, restart := startVolatileRedis(t)
	dsn := "redis://" + addr + "/0?prefix=loss"
	ctx := ctxT(t, 60*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "d", RunID: "r1", Number: 1, Holder: "h", Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Succeeded}); err != nil {
		t.Fatal(err)
	}
	restart()
	_, err = s.Slot(ctx, "job", "d")
	if !errors.Is(err, ErrLedgerLost) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("slot after a volatile restart: %v, want ErrLedgerLost", err)
	}
	t.Log(err)
	_, err = s.Renew(ctx, l, time.Minute)
	wantLost(t, "renew", err)
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r2", TTL: time.Minute})
	wantLost(t, "acquire", err)
	_, err = s.History(ctx, store.HistoryQuery{})
	wantLost(t, "history", err)
	// A new client cannot know (documented); it starts a new epoch, which the old client notices.
	n, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "n", RunID: "r3", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "other", Holder: "h", RunID: "r4", TTL: time.Minute})
	_, err2 := s.Leases(ctx)
	if !errors.Is(err2, ErrLedgerLost) {
		t.Fatalf("leases by the old client after re-initialisation: %v", err2)
	}
	_ = err
	_, err = s.Slot(ctx, "job", "d")
	wantLost(t, "slot after re-initialisation", err)
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrLedgerLost) {
		t.Fatalf("%s after a volatile restart: %v, want ErrLedgerLost", what, err)
	}
}

func TestBadDSN(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"redis://h:1/0?prefix=a{b", "prefix"},
		{"redis://u:sekrit@h:1/x", "xxxxx"},
		{"redis://h:1/0?nosuch=1", "nosuch"},
		{"redis://h:1/0?dial_timeout=0", `"dial_timeout" is "0"`},
		{"redis://h:1/0?dial_timeout=-1", `"dial_timeout"`},
		{"redis://h:1/0?dial_timeout=2h", `"dial_timeout"`},
		{"redis://h:1/0?dial_timeout=36028797018963973", `"dial_timeout"`},
		{"redis+cluster://h:1,h:2?dial_timeout=0", `"dial_timeout"`},
		{"http://h/", "redis://"},
		{"redis://h:1/13?prefix=teamA;x", `"prefix"`},
		{"redis://h:1/13?prefix=teamb;x", `"prefix"`},
		{"redis://h:1/13?prefx=teamb", `"prefx"`},
		{"redis://h:1/13?prefix=a%zz", `"prefix"`},
		{"redis://h:1/13?prefix=", `"prefix"`},
		{"redis://h:1/13?prefix=a&prefix=b", `"prefix"`},
		{"redis://h:1/13#prefix=a", "'#'"},
		{"redis://h:1/13?db=2", `"db"`},
		{"redis://h:1/13?skip_verify=true", `"skip_verify"`},
		{"redis://h:1/13?dial_timeout=soon", "dial_timeout"},
		{"redis://h:1/-5?prefix=a", `invalid database number "-5"`}, // go-redis selected none: database 0
		{"redis://h:1/-0", `"-0"`},
		{"redis://h:1/0?pool_size=-1", `"pool_size"`},                                           // go-redis panicked in NewClient
		{"redis://h:1/0?protocol=4", `"protocol"`}, {"redis://h:1/0?protocol=0", `give 2 or 3`}, // go-redis took any number
		{"redis://h:1/0?pool_size=99999999999999", `"pool_size"`},
		{"redis://h:1/0?min_idle_conns=2147483648", `"min_idle_conns"`},
		{"redis://h:1/0?max_idle_conns=-1", `"max_idle_conns"`},
		{"redis+cluster://h:1,h:2?max_active_conns=1001", `"max_active_conns"`},
	} {
		_, err := ParseDSN(c.dsn)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sekrit") {
			t.Errorf("ParseDSN(%q) = %v; want ErrBadDSN mentioning %q", c.dsn, err, c.want)
		}
	}
	cfg, err := ParseDSN("rediss://alice:pw@h:6380/3?prefix=blue")
	if err != nil || cfg.Prefix != "blue" || cfg.Opts.DB != 3 || cfg.Opts.Username != "alice" || cfg.Opts.Password != "pw" || cfg.Opts.TLSConfig == nil {
		t.Fatalf("ParseDSN = %+v, %v", cfg, err)
	}
	// Unreachable server: ErrUnavailable naming the address, one line.
	_, err = Open(ctxT(t, 10*time.Second), "redis://127.0.0.1:1/0")
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open of a closed port: %v", err)
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{"redis://127.0.0.1:6379/0", "redis+cluster://u:p@a:1,b:2/?prefix=x", "rediss+sentinel://:p@a,b:2/1?master=m&sentinel_password=q&wait=1", "redis+cluster://a:1,,[::1]:2", "redis+sentinel://h", "rediss://u:p@h:1/2?prefix=a.b", "redis://h/0?prefix=", "redis://:p@h", "redis://h/x", "redis://[::1]:5/1?dial_timeout=1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, store.ErrBadDSN) {
				t.Fatalf("ParseDSN(%q): %v does not wrap ErrBadDSN", dsn, err)
			}
			if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Contains(err.Error(), pw) && !strings.Contains(store.Redact(dsn), pw) {
					t.Fatalf("error %q leaks the password", err)
				}
			}
			return
		}
		if store.CheckPrefix(cfg.Prefix) != nil || cfg.Opts == nil {
			t.Fatalf("ParseDSN(%q) = %+v", dsn, cfg)
		}
	})
}

// TestEscape: task names cannot close the hash tag early, and unescape undoes escape.
func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, out string }{
		{"plain", "plain"}, {"", ""}, {"a{b}c", "a%7Bb%7Dc"}, {"100%", "100%25"}, {"%7B", "%257B"}, {"}{%", "%7D%7B%25"},
	} {
		if got := escape(c.in); got != c.out {
			t.Errorf("escape(%q) = %q, want %q", c.in, got, c.out)
		}
		if got := unescape(c.out); got != c.in {
			t.Errorf("unescape(%q) = %q, want %q", c.out, got, c.in)
		}
	}
}

// TestAcquireReply: Acquire builds the grant from the script's token and time instead of decoding
// the value it stored; what it returns is what the value says (Leases decodes it), and a second
// acquire's BusyError carries the same grant. The holder and run id need JSON escaping.
func TestAcquireReply(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx := ctxT(t, 30*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, ttl := range []time.Duration{time.Minute, 1234567 * time.Microsecond} {
		task := fmt.Sprintf("reply-%d", i)
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: `h "q" \ / ü`, RunID: "r/1 <&>", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if l.Expires.Sub(l.Acquired) != time.Duration(ttlMillis(ttl))*time.Millisecond {
			t.Errorf("acquired %s, expires %s: want ttl %s rounded up to ms", l.Acquired, l.Expires, ttl)
		}
		ls, err := s.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range ls {
			if g.Task == task {
				found = true
				if g != l {
					t.Errorf("Leases lists %+v, Acquire returned %+v", g, l)
				}
			}
		}
		if !found {
			t.Errorf("Leases does not list %s", task)
		}
		_, err = s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "other", RunID: "r2", TTL: ttl})
		var be *store.BusyError
		if !errors.As(err, &be) || be.Lease != l {
			t.Errorf("second acquire: %v, want busy with %+v", err, l)
		}
	}
}
