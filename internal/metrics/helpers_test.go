package metrics

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

// openStore opens a fresh SQLite store; path is its file.
func openStore(tb testing.TB) (st store.Store, path string) {
	tb.Helper()
	path = filepath.Join(tb.TempDir(), "once.db")
	st, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st, path
}

// counting is a store that counts the History entries it returns (a wrapper of a real store).
type counting struct {
	store.Store
	entries atomic.Int64
	calls   atomic.Int64
}

func (s *counting) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	es, err := s.Store.History(ctx, q)
	s.calls.Add(1)
	s.entries.Add(int64(len(es)))
	return es, err
}

// HistoryPageSize passes the store's paging on, so that EachHistory reads it as it would the store.
func (s *counting) HistoryPageSize() int {
	if p, ok := s.Store.(store.HistoryPager); ok {
		return p.HistoryPageSize()
	}
	return 0
}

func newCollector(tb testing.TB, c Config) *Collector {
	tb.Helper()
	if c.MinInterval == 0 {
		c.MinInterval = -1 // every scrape reads
	}
	col, err := New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return col
}

// scrape serves c's handler and returns every sample of its own families (once_*) by name and
// labels as the text format writes them (labels sorted): `once_attempts_total{state="failed",task="t"}`;
// histograms as _count and _sum. The text is parsed by the Prometheus client's own parser, which
// fails on anything the format does not allow.
func scrape(tb testing.TB, c *Collector) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, f := range gather(tb, c) {
		if !strings.HasPrefix(f.GetName(), "once_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := func(suffix string) string {
				return f.GetName() + suffix + labels(m.GetLabel())
			}
			switch {
			case m.GetGauge() != nil:
				out[key("")] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key("")] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// gather serves c's handler and parses what it wrote with the Prometheus client's parser.
func gather(tb testing.TB, c *Collector) map[string]*dto.MetricFamily {
	tb.Helper()
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		tb.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		tb.Fatalf("/metrics is not valid text format: %v", err)
	}
	return fams
}

func labels(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	var s []string
	for _, l := range ls {
		s = append(s, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(s)
	return "{" + strings.Join(s, ",") + "}"
}

// want checks samples of a scrape: a value, or absent for NaN.
func want(tb testing.TB, got map[string]float64, w map[string]float64) {
	tb.Helper()
	for k, v := range w {
		g, ok := got[k]
		switch {
		case v != v: // NaN: must be absent
			if ok {
				tb.Errorf("%s = %v, want no such series", k, g)
			}
		case !ok:
			tb.Errorf("%s missing, want %v", k, v)
		case g != v:
			tb.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// ledger drives the store as the guard does.
type ledger struct {
	tb testing.TB
	st store.Store
	n  int
}

func (l *ledger) ctx() context.Context { return context.Background() }

func (l *ledger) acquire(task, holder string, ttl time.Duration) store.Lease {
	l.tb.Helper()
	ls, err := l.st.Acquire(l.ctx(), store.AcquireRequest{Task: task, Holder: holder, RunID: "lease-" + holder, TTL: ttl})
	if err != nil {
		l.tb.Fatal(err)
	}
	return ls
}

func (l *ledger) begin(ls store.Lease, slot string) store.Attempt {
	l.tb.Helper()
	st, err := l.st.Slot(l.ctx(), ls.Task, slot)
	if err != nil {
		l.tb.Fatal(err)
	}
	n := 1
	if st.Last != nil {
		n = st.Last.Number + 1
	}
	l.n++
	a, err := l.st.Begin(l.ctx(), store.Attempt{Task: ls.Task, Slot: slot, RunID: fmt.Sprintf("run-%d", l.n), Number: n,
		Holder: ls.Holder, Token: ls.Token, State: store.Running})
	if err != nil {
		l.tb.Fatal(err)
	}
	return a
}

func (l *ledger) finish(ls store.Lease, a store.Attempt, state store.State) store.Attempt {
	l.tb.Helper()
	out, err := l.st.Finish(l.ctx(), a.RunID, ls.Token, store.Outcome{State: state})
	if err != nil {
		l.tb.Fatal(err)
	}
	return out
}

func (l *ledger) release(ls store.Lease) {
	l.tb.Helper()
	if err := l.st.Release(l.ctx(), ls); err != nil {
		l.tb.Fatal(err)
	}
}

// run is one whole run of task's slot that ends as state.
func (l *ledger) run(task, slot string, state store.State) store.Attempt {
	l.tb.Helper()
	ls := l.acquire(task, "h", time.Minute)
	a := l.finish(ls, l.begin(ls, slot), state)
	l.release(ls)
	return a
}

func (l *ledger) event(task, slot string, kind store.State) {
	l.tb.Helper()
	if err := l.st.Record(l.ctx(), store.Event{Task: task, Slot: slot, Kind: kind, RunID: fmt.Sprintf("ev-%d", l.n), Holder: "h"}); err != nil {
		l.tb.Fatal(err)
	}
	l.n++
}

func ts(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

// seedAttempts writes n succeeded attempts over tasks task-0 … task-(tasks-1), one slot each, a
// second apart and ending now, straight into the SQLite ledger at path (which the store created),
// in one statement: the Ledger API makes two durable commits per attempt, minutes for a history
// this long.
func seedAttempts(tb testing.TB, path string, tasks, n int) {
	tb.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	base := time.Now().Add(-time.Duration(n) * time.Second).UnixMicro()
	if _, err := db.Exec(`INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at, note)
		WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?)
		SELECT 'task-' || (i % ?), printf('s%07d', i), 1, printf('r%07d', i), 'succeeded', 'seed', 1,
			? + i * 1000000, ? + i * 1000000 + 500000, '' FROM seq`, n, tasks, base, base); err != nil {
		tb.Fatal(err)
	}
}

// need finds a program on PATH, or skips the test; it fails instead when ONCE_TEST_REQUIRE asks for
// everything or for name (as the test command does).
func need(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "prometheus") {
			t.Fatalf("%s not found, but ONCE_TEST_REQUIRE=%s requires it: scripts/testenv/prometheus.sh installs it (apt-get install %s)", name, r, pkg)
		}
		t.Skipf("%s not found (Debian package %s; scripts/testenv/prometheus.sh installs it): not tested against a real Prometheus", name, pkg)
	}
	return p
}
