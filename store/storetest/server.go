package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The test servers: every backend's tests (and the packages that test against a real store) find
// their server in the environment, which ./scripts/test and ./scripts/with-servers set, and take a
// fresh namespace of it per test.

// ServerDSN returns the DSN in the environment variable env (ONCE_TEST_POSTGRES, ONCE_TEST_MYSQL,
// ONCE_TEST_REDIS, ONCE_TEST_ETCD, ONCE_TEST_ZK).
// When it is unset the test is skipped, unless ONCE_TEST_REQUIRE is "all" or contains backend: then
// it fails, because a skipped backend must fail CI.
func ServerDSN(tb testing.TB, env, backend string) string {
	tb.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		if req, ok := required(backend); ok {
			tb.Fatalf("%s is not set but ONCE_TEST_REQUIRE=%s requires %s; run ./scripts/test", env, req, backend)
		}
		tb.Skipf("%s is not set; ./scripts/test starts a private server", env)
	}
	return dsn
}

// EachStore runs fn in a parallel subtest of t per store, named for it: SQLite in a file of the
// subtest's own, and each networked backend on a fresh prefix of the server the environment names
// (ServerDSN: skipped when unset, failed when ONCE_TEST_REQUIRE requires it). The store is opened
// with store.Open (the caller imports the backends) and closed when the subtest ends.
func EachStore(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Helper()
	for _, b := range []struct{ name, env string }{
		{"sqlite", ""}, {"postgres", "ONCE_TEST_POSTGRES"}, {"mysql", "ONCE_TEST_MYSQL"}, {"redis", "ONCE_TEST_REDIS"},
		{"etcd", "ONCE_TEST_ETCD"}, {"zk", "ONCE_TEST_ZK"},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite://" + filepath.Join(t.TempDir(), "once.db")
			if b.env != "" {
				dsn = WithPrefix(t, ServerDSN(t, b.env, b.name))
			}
			s, err := store.Open(context.Background(), dsn)
			if err != nil {
				t.Fatalf("%s: %v", b.name, err)
			}
			t.Cleanup(func() { s.Close() })
			fn(t, s)
		})
	}
}

// RandHex returns 12 random hex digits.
func RandHex(tb testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// WithPrefix returns dsn with a fresh ?prefix=t<random>.
func WithPrefix(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("test DSN: %v", err)
	}
	q := u.Query()
	q.Set("prefix", "t"+RandHex(tb))
	u.RawQuery = q.Encode()
	return u.String()
}

// Outage stops the private test server with its control script ctl ("stop", then "start": the
// *_CTL scripts ./scripts/test sets) and returns the func that starts it again. If the test ends
// before that, a cleanup starts it, so one failing test does not leave the server down for the rest.
func Outage(t *testing.T, ctl string) (start func()) {
	t.Helper()
	if out, err := exec.Command(ctl, "stop").CombinedOutput(); err != nil {
		t.Fatalf("ctl stop: %v %s", err, out)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			_ = exec.Command(ctl, "start").Run()
		}
	})
	return func() {
		t.Helper()
		if out, err := exec.Command(ctl, "start").CombinedOutput(); err != nil {
			t.Fatalf("ctl start: %v %s", err, out)
		}
		started = true
	}
}

// RenewWhileDown checks that renewing l while the server is down fails with store.ErrUnavailable
// within the given time: a clean error for the guard to act on, not a hang.
func RenewWhileDown(t *testing.T, ctx context.Context, s store.Store, l store.Lease, ttl, within time.Duration) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if _, err := s.Renew(dctx, l, ttl); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("renew while the server is down: %v, want ErrUnavailable", err)
	}
}

// required reports whether ONCE_TEST_REQUIRE ("all", or names) requires backend, and its value.
func required(backend string) (string, bool) {
	req := os.Getenv("ONCE_TEST_REQUIRE")
	return req, req == "all" || strings.Contains(req, backend)
}

// Server is a networked test server the environment gives.
type Server struct {
	Name string // the backend: postgres, mysql, redis, etcd, zk
	DSN  string // from ONCE_TEST_<NAME>
	Ctl  string // its control script (ONCE_TEST_<NAME>_CTL), "" for a server of your own
}

// Servers returns the networked test servers the environment gives, in a fixed order, and logs each
// one it does not; one that ONCE_TEST_REQUIRE requires fails tb instead.
func Servers(tb testing.TB) []Server {
	tb.Helper()
	var out []Server
	for _, b := range []struct{ name, env string }{
		{"postgres", "ONCE_TEST_POSTGRES"}, {"mysql", "ONCE_TEST_MYSQL"}, {"redis", "ONCE_TEST_REDIS"},
		{"etcd", "ONCE_TEST_ETCD"}, {"zk", "ONCE_TEST_ZK"},
	} {
		dsn := os.Getenv(b.env)
		if dsn == "" {
			if req, ok := required(b.name); ok {
				tb.Fatalf("%s is required (ONCE_TEST_REQUIRE=%s) but %s is not set: run ./scripts/test", b.name, req, b.env)
			}
			tb.Logf("%s: skipped (%s not set)", b.name, b.env)
			continue
		}
		out = append(out, Server{Name: b.name, DSN: dsn, Ctl: os.Getenv(b.env + "_CTL")})
	}
	return out
}
