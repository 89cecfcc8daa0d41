// Package sqltest holds test helpers shared by the SQL stores' tests: the server DSN from the
// environment, fresh ?prefix= namespaces and latency benchmarks with percentiles.
package sqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
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

// Op is one timed operation of a benchmark client.
type Op func(ctx context.Context) error

// RunContended runs b.N operations in total across n clients made by mk (each with its own
// connection), all at once, and reports the p50 and p99 latency of one operation as metrics.
func RunContended(b *testing.B, n int, mk func(i int) (Op, func())) {
	ctx := context.Background()
	ops := make([]Op, n)
	for i := range ops {
		op, done := mk(i)
		defer done()
		if err := op(ctx); err != nil { // warm up the connection
			b.Fatal(err)
		}
		ops[i] = op
	}
	lat := make([][]time.Duration, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	per := (b.N + n - 1) / n
	b.ResetTimer()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < per; j++ {
				t0 := time.Now()
				if err := ops[i](ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}(i)
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// Named is an operation with a name, for RunInterleaved.
type Named struct {
	Name string
	Op   Op
}

// RunInterleaved runs the operations round-robin b.N times each on one goroutine, so that load from
// elsewhere on the machine hits them all alike, and reports each one's p50 and p99 latency and its
// p50 as a ratio of the last operation's (the baseline).
func RunInterleaved(b *testing.B, ops []Named) {
	ctx := context.Background()
	lat := make([][]time.Duration, len(ops))
	for _, o := range ops { // warm up
		if err := o.Op(ctx); err != nil {
			b.Fatalf("%s: %v", o.Name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, o := range ops {
			t0 := time.Now()
			if err := o.Op(ctx); err != nil {
				b.Fatalf("%s: %v", o.Name, err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(ops))
	for k, o := range ops {
		l := lat[k]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		p50[k] = l[len(l)/2]
		b.ReportMetric(float64(p50[k].Microseconds()), o.Name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), o.Name+"-p99-µs")
	}
	base := p50[len(ops)-1]
	for k, o := range ops[:len(ops)-1] {
		if base > 0 {
			b.ReportMetric(float64(p50[k])/float64(base), o.Name+"/"+ops[len(ops)-1].Name+"-p50-x")
		}
	}
}
