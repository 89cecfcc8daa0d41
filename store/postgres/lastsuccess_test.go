package postgres

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store"
)

// analyzed is a node of EXPLAIN (ANALYZE, FORMAT JSON): what it read.
type analyzed struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	ActualRows   float64    `json:"Actual Rows"`
	Loops        float64    `json:"Actual Loops"`
	Removed      float64    `json:"Rows Removed by Filter"`
	Plans        []analyzed `json:"Plans"`
}

// attemptRows is how many attempt rows the plan under n read from its indexes (returned or
// filtered out).
func (n analyzed) attemptRows(table string) float64 {
	var r float64
	if n.RelationName == table && n.IndexName != table+"_pkey" {
		r += (n.ActualRows + n.Removed) * n.Loops
	}
	for _, c := range n.Plans {
		r += c.attemptRows(table)
	}
	return r
}

// TestLastSuccessReadsAtMostTheScan: at 20,000 failures since a task's last success, the read of
// its last success (once serve's task list, the metrics) reads at most store.SuccessScan attempt
// rows, by the server's own count (EXPLAIN ANALYZE), and the count catches the read made before
// (a kind filter: every failure since the success).
func TestLastSuccessReadsAtMostTheScan(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, err := Open(ctx, withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const failures = 20000
	sqltest.SeedFailing(t, s.Store, "flaky", failures)
	sqltest.SeedFailing(t, s.Store, "fine", 0)
	for i := range 20 { // newer history of other tasks, more than the flaky task's
		sqltest.SeedFailing(t, s.Store, "other"+strconv.Itoa(i), 2000)
	}
	if _, err := s.DB.ExecContext(ctx, "ANALYZE "+s.Prefix+"attempts"); err != nil {
		t.Fatal(err)
	}
	rows := func(query string, args ...any) float64 {
		t.Helper()
		var out string
		if err := s.DB.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query, args...).Scan(&out); err != nil {
			t.Fatalf("explain %s: %v", query, err)
		}
		var plans []struct{ Plan analyzed }
		if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
			t.Fatalf("explain output %s: %v", out, err)
		}
		return plans[0].Plan.attemptRows(s.Prefix + "attempts")
	}
	if n := rows(s.NewestSuccessQuery(store.SuccessScan), "flaky"); n > store.SuccessScan {
		t.Errorf("the last success read %v attempt rows, want at most %d", n, store.SuccessScan)
	}
	if n := rows(s.AttemptsUpToQuery(store.SuccessScan+1), "flaky"); n > store.SuccessScan+1 {
		t.Errorf("the count of attempts read %v rows, want at most %d", n, store.SuccessScan+1)
	}
	before, args, err := s.HistoryQuery(store.HistoryQuery{Task: "flaky", Kind: store.Succeeded, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := rows(before, args...); n < failures {
		t.Errorf("the check does not catch a walk: the kind filter read %v rows, want at least %d", n, failures)
	}
	if ls, err := store.ReadLastSuccess(ctx, s, "flaky"); err != nil || ls.Attempt != nil || !ls.Unknown || ls.Looked != store.SuccessScan {
		t.Errorf("flaky: %+v, %v: want not known after %d attempts", ls, err, store.SuccessScan)
	}
	if ls, err := store.ReadLastSuccess(ctx, s, "fine"); err != nil || ls.Attempt == nil || ls.Attempt.Task != "fine" {
		t.Errorf("fine: %+v, %v: want its success", ls, err)
	}
}

// BenchmarkLastSuccess: a task's last success with ONCE_BENCH_FAILURES (default 20,000) failures
// after it, read as before and as now (docs/benchmarks.md).
func BenchmarkLastSuccess(b *testing.B) {
	s, err := Open(b.Context(), withPrefix(b, serverDSN(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sqltest.BenchmarkSeededLastSuccess(b, s.Store, "ANALYZE")
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
