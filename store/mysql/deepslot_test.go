package mysql

import (
	"testing"

	"github.com/once-run/once/internal/sqlstore/sqltest"
)

// BenchmarkDeepSlot: Slot and Slots on a slot of ONCE_BENCH_SLOT_ATTEMPTS attempts (default
// 20,000; ONCE_BENCH_PREFIX keeps the seeded ledger for the next run), docs/benchmarks.md.
func BenchmarkDeepSlot(b *testing.B) {
	s, err := Open(b.Context(), sqltest.BenchDSN(b, serverDSN(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sqltest.BenchmarkDeepSlot(b, s.Store, "ANALYZE TABLE")
}

// TestSlotsAgreeDeep: Slots reads slots of more than store.MaxFailures failures, resolved among
// them or not, as Slot does (sqltest.SlotsAgreeDeep).
func TestSlotsAgreeDeep(t *testing.T) {
	s, err := Open(t.Context(), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.SlotsAgreeDeep(t, s.Store)
}
