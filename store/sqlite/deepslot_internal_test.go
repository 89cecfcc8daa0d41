package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// BenchmarkDeepSlot times Slot and Slots on a slot "" holding ONCE_BENCH_SLOT_ATTEMPTS attempts
// (20,000 by default), all succeeded (task "ok") or all failed, none resolved (task "fail"),
// beside a task "week" of 1,000 slots of one attempt each (a backfill's block), as
// sqltest.BenchmarkDeepSlot on the servers. ONCE_BENCH_SQLITE names a ledger to keep for the next
// run (seeded once), else a fresh one.
func BenchmarkDeepSlot(b *testing.B) {
	n := storetest.DeepSlotAttempts()
	path := os.Getenv("ONCE_BENCH_SQLITE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "once.db")
	}
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if st, err := s.Slot(ctx, "ok", ""); err != nil {
		b.Fatal(err)
	} else if st.Last == nil {
		seedDeepSlots(b, s, n)
	}
	storetest.BenchmarkSlotReads(b, s, n)
}

// seedDeepSlots writes BenchmarkDeepSlot's tasks straight into s's attempts table.
func seedDeepSlots(b testing.TB, s *Store, n int) {
	for _, q := range []struct {
		task, state, slot, number string
		n                         int
	}{{"ok", "succeeded", "''", "i", n}, {"fail", "failed", "''", "i", n}, {"week", "succeeded", "printf('m%08d', i - 1)", "1", store.MaxSlotsRead}} {
		if _, err := s.db.Exec(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
			INSERT INTO `+s.t.attempts+` (task, slot, number, run_id, state, holder, token, started_at, ended_at)
			SELECT ?, `+q.slot+`, `+q.number+`, ? || i, ?, 'h', 1, i * 1000, i * 1000 + 1 FROM c`, q.n, q.task, q.task+"-", q.state); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.db.Exec("ANALYZE"); err != nil {
		b.Fatal(err)
	}
}
