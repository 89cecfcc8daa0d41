package mysql

import (
	"os"
	"strconv"
	"testing"

	"github.com/once-run/once/internal/sqlstore/sqltest"
)

// BenchmarkLastSuccess: a task's last success with ONCE_BENCH_FAILURES (default 20,000) failures
// after it, read as before and as now (docs/benchmarks.md).
func BenchmarkLastSuccess(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("ONCE_BENCH_FAILURES")); err == nil && v >= 0 {
		n = v
	}
	ctx := b.Context()
	s, err := Open(ctx, withPrefix(b, serverDSN(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sqltest.SeedFailing(b, s.Store, "flaky", n)
	if _, err := s.DB.ExecContext(ctx, "ANALYZE TABLE "+s.Prefix+"attempts"); err != nil {
		b.Fatal(err)
	}
	sqltest.BenchmarkLastSuccess(b, s.Store, "flaky", n)
}

// TestLastSuccessAgreesWithTheKindRead: ReadLastSuccess against the read it replaced on
// randomised histories (sqltest.LastSuccessAgrees).
func TestLastSuccessAgreesWithTheKindRead(t *testing.T) {
	s, err := Open(t.Context(), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.LastSuccessAgrees(t, s.Store)
}
