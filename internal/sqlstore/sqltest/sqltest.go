// Package sqltest holds test helpers shared by the SQL stores' tests: the server DSN from the
// environment and fresh ?prefix= namespaces.
package sqltest

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
)

// ServerDSN returns the DSN in the environment variable env (ONCE_TEST_POSTGRES, ONCE_TEST_MYSQL).
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
