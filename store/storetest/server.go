package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"os/exec"
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
		req := os.Getenv("ONCE_TEST_REQUIRE")
		if req == "all" || strings.Contains(req, backend) {
			tb.Fatalf("%s is not set but ONCE_TEST_REQUIRE=%s requires %s; run ./scripts/test", env, req, backend)
		}
		tb.Skipf("%s is not set; ./scripts/test starts a private server", env)
	}
	return dsn
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
