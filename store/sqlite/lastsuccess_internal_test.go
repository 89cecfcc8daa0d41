package sqlite

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// seedFailing writes task's history straight into s's tables: one succeeded attempt, then
// failures failed attempts (a slot each, a second apart, ending now), in one statement.
func seedFailing(tb testing.TB, s *Store, task string, failures int) {
	tb.Helper()
	base := time.Now().Add(-time.Duration(failures+1) * time.Second).UnixMicro()
	if _, err := s.db.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO `+s.t.attempts+` (task, slot, number, run_id, state, holder, token, started_at, ended_at)
		SELECT ?2, printf('s%07d', i), 1, ?2 || '-r' || i, CASE WHEN i = 0 THEN 'succeeded' ELSE 'failed' END, 'h', 1,
			?3 + i * 1000000, ?3 + i * 1000000 + 1000 FROM n`, failures, task, base); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkLastSuccess: a task's last success with ONCE_BENCH_FAILURES (default 20,000) failures
// after it, read as once serve and the metrics did before (History{Task, Kind: succeeded, Limit:
// 1}: a walk back to the success) and as they do now (store.ReadLastSuccess), beside 20 tasks of
// 2,000 attempts each (docs/benchmarks.md).
func BenchmarkLastSuccess(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("ONCE_BENCH_FAILURES")); err == nil && v >= 0 {
		n = v
	}
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "once.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	seedFailing(b, s, "flaky", n)
	for i := range 20 {
		seedFailing(b, s, "other"+strconv.Itoa(i), 2000)
	}
	if _, err := s.db.Exec("ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Run("kind=succeeded", func(b *testing.B) {
		for b.Loop() {
			es, err := s.History(b.Context(), store.HistoryQuery{Task: "flaky", Kind: store.Succeeded, Limit: 1})
			if err != nil || len(es) != 1 {
				b.Fatalf("%d entries, %v", len(es), err)
			}
		}
	})
	b.Run("ReadLastSuccess", func(b *testing.B) {
		for b.Loop() {
			ls, err := store.ReadLastSuccess(b.Context(), s, "flaky")
			if err != nil || ls.Attempt != nil != (n < store.SuccessScan) {
				b.Fatalf("%+v, %v", ls, err)
			}
		}
	})
}

// TestLastSuccessAgreesWithTheKindRead: on randomised histories (every state, running attempts
// among them, many attempts starting at the same microsecond), ReadLastSuccess gives the attempt
// the read it replaced gives whenever it is among the newest attempts read, "never" and "not
// known" exactly at the bound (storetest.CompareLastSuccess).
func TestLastSuccessAgreesWithTheKindRead(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "once.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	states := []string{"succeeded", "failed", "failed", "unknown", "running"}
	base := time.Now().Add(-time.Hour).UnixMicro()
	for k := range 60 {
		task := "rnd" + strconv.Itoa(k)
		n := rng.IntN(25)
		for i := range n {
			at := base + int64(rng.IntN(n/2+1)) // ties, and starts out of insertion order
			var ended any = at + 500
			st := states[rng.IntN(len(states))]
			if st == "running" {
				ended = nil
			}
			if _, err := s.db.Exec(`INSERT INTO `+s.t.attempts+` (task, slot, number, run_id, state, holder, token, started_at, ended_at)
				VALUES (?1, ?2, 1, ?3, ?4, 'h', 1, ?5, ?6)`, task, "s"+strconv.Itoa(i), task+"-r"+strconv.Itoa(i), st, at, ended); err != nil {
				t.Fatal(err)
			}
		}
		storetest.CompareLastSuccess(t, s, task)
	}
}
