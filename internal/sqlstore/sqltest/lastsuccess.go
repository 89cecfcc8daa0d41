package sqltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// SeedFailing writes task's history straight into s's tables: one succeeded attempt, then
// failures failed attempts (a slot each, a second apart, ending now), as a task failing since its
// last success has. Multi-row INSERTs of 1,000 rows.
func SeedFailing(tb testing.TB, s *sqlstore.Store, task string, failures int) {
	tb.Helper()
	ctx := context.Background()
	base := time.Now().UTC().Add(-time.Duration(failures+1) * time.Second)
	for from := 0; from <= failures; from += 1000 {
		var vals []string
		var args []any
		for i := from; i <= failures && i < from+1000; i++ {
			state := "failed"
			if i == 0 {
				state = "succeeded"
			}
			at := base.Add(time.Duration(i) * time.Second)
			vals = append(vals, "(?, ?, 1, ?, ?, 'h', 1, ?, ?, '', '')")
			args = append(args, task, fmt.Sprintf("s%07d", i), fmt.Sprintf("%s-r%d", task, i), state, at, at.Add(time.Millisecond))
		}
		if _, err := s.DB.ExecContext(ctx, s.Q(`INSERT INTO {p}attempts (task, slot, attempt, run_id, state, holder, token,
			started_at, ended_at, checkpoint, note) VALUES `+strings.Join(vals, ", ")), args...); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkLastSuccess times a task's last success on s, failures failed attempts after it
// (seeded once per task name by SeedFailing): "kind=succeeded" is the read once serve and the
// metrics made before (History{Task, Kind: succeeded, Limit: 1}: a walk back to the success),
// "ReadLastSuccess" the read they make now (the newest store.SuccessScan attempts at most).
func BenchmarkLastSuccess(b *testing.B, s *sqlstore.Store, task string, failures int) {
	ctx := context.Background()
	b.Run("kind=succeeded", func(b *testing.B) {
		for b.Loop() {
			es, err := s.History(ctx, store.HistoryQuery{Task: task, Kind: store.Succeeded, Limit: 1})
			if err != nil || len(es) != 1 {
				b.Fatalf("%d entries, %v", len(es), err)
			}
		}
	})
	b.Run("ReadLastSuccess", func(b *testing.B) {
		for b.Loop() {
			ls, err := store.ReadLastSuccess(ctx, s, task)
			if err != nil || ls.Attempt != nil != (failures < store.SuccessScan) {
				b.Fatalf("%+v, %v", ls, err)
			}
		}
	})
}

// BenchmarkSeededLastSuccess seeds task "flaky" of s with ONCE_BENCH_FAILURES failures after its
// success (20,000 by default), has the server update the attempts table's statistics (analyze:
// the statement before the table's name, "ANALYZE" or "ANALYZE TABLE") and runs
// BenchmarkLastSuccess on it.
func BenchmarkSeededLastSuccess(b *testing.B, s *sqlstore.Store, analyze string) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("ONCE_BENCH_FAILURES")); err == nil && v >= 0 {
		n = v
	}
	SeedFailing(b, s, "flaky", n)
	if _, err := s.DB.ExecContext(b.Context(), analyze+" "+s.Prefix+"attempts"); err != nil {
		b.Fatal(err)
	}
	BenchmarkLastSuccess(b, s, "flaky", n)
}

// LastSuccessAgrees writes randomised histories straight into s's tables (every state, running
// attempts among them, many attempts starting at the same microsecond) and checks ReadLastSuccess
// against the read it replaced on each (storetest.CompareLastSuccess).
func LastSuccessAgrees(t *testing.T, s *sqlstore.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	states := []string{"succeeded", "failed", "failed", "unknown", "running"}
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	for k := range 40 {
		task := "rnd" + strconv.Itoa(k)
		n := rng.IntN(25)
		for i := range n {
			at := base.Add(time.Duration(rng.IntN(n/2+1)) * time.Microsecond) // ties, out of order
			var ended any = at.Add(time.Millisecond)
			st := states[rng.IntN(len(states))]
			if st == "running" {
				ended = nil
			}
			if _, err := s.DB.ExecContext(t.Context(), s.Q(`INSERT INTO {p}attempts (task, slot, attempt, run_id, state, holder, token,
				started_at, ended_at, checkpoint, note) VALUES (?, ?, 1, ?, ?, 'h', 1, ?, ?, '', '')`),
				task, "s"+strconv.Itoa(i), task+"-r"+strconv.Itoa(i), st, at, ended); err != nil {
				t.Fatal(err)
			}
		}
		storetest.CompareLastSuccess(t, s, task)
	}
}
