package mysql

import (
	"testing"

	"github.com/once-run/once/internal/sqlstore/sqltest"
)

// BenchmarkLastSuccess: a task's last success with ONCE_BENCH_FAILURES (default 20,000) failures
// after it, read as before and as now (docs/benchmarks.md).
func BenchmarkLastSuccess(b *testing.B) {
	s, err := Open(b.Context(), withPrefix(b, serverDSN(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sqltest.BenchmarkSeededLastSuccess(b, s.Store, "ANALYZE TABLE")
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
