package metrics

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// listing is a store that is a store.TaskLister (the SQLite store of this version is not), by
// the history walk of store.ListTasks; it counts the pages asked for.
type listing struct {
	*counting
	pages atomic.Int64
}

func (s *listing) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	s.pages.Add(1)
	return store.ListTasks(ctx, s.counting.Store, after, limit)
}

// TestMaxTasksBoundsTheOutput: 10,000 tasks, 1,000 exported; the scrape's output has series of
// 1,000 tasks only and says how many were left out.
func TestMaxTasksBoundsTheOutput(t *testing.T) {
	const tasks, max = 10000, 1000
	st, path := openStore(t)
	l := &ledger{tb: t, st: st}
	l.run("task-0", "first", store.Succeeded) // creates the ledger
	seedAttempts(t, path, tasks, tasks)
	c := newCollector(t, Config{Store: st, MaxTasks: max})
	// A scrape gives its first reads of new tasks a bounded time and carries the rest over to the
	// next scrapes: on a loaded machine the count of tasks seen converges over a few scrapes.
	got := scrape(t, c)
	for i := 0; i < 20 && got[`once_tasks_left_out`] < tasks-max; i++ {
		got = scrape(t, c)
	}
	want(t, got, map[string]float64{`once_tasks`: max, `once_tasks_left_out`: tasks - max})
	if n := len(taskNames(got)); n != max {
		t.Errorf("series of %d tasks, want %d", n, max)
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	lines := strings.Count(rec.Body.String(), "\n")
	t.Logf("/metrics: %d lines, %d bytes for %d tasks exported of %d", lines, rec.Body.Len(), max, tasks)
	if per := 40; lines > max*per+500 {
		t.Errorf("/metrics has %d lines, want at most %d per task exported", lines, per)
	}
}

// TestTaskLister: on a store that lists its tasks, the collector exports them (up to MaxTasks)
// and counts the others as left out.
func TestTaskLister(t *testing.T) {
	st, path := openStore(t)
	(&ledger{tb: t, st: st}).run("task-0", "first", store.Succeeded)
	seedAttempts(t, path, 50, 50)
	ls := &listing{counting: &counting{Store: st}}
	c := newCollector(t, Config{Store: ls, MaxTasks: 10})
	got := scrape(t, c)
	want(t, got, map[string]float64{`once_tasks`: 10, `once_tasks_left_out`: 40})
	if n := len(taskNames(got)); n != 10 {
		t.Errorf("series of %d tasks, want 10", n)
	}
	scrape(t, c)
	if n := ls.pages.Load(); n != 1 {
		t.Errorf("%d pages of tasks asked for in two scrapes, want 1 (every %v)", n, relistEvery)
	}
}

// taskNames are the values of the task label in a scrape.
func taskNames(got map[string]float64) map[string]bool {
	names := map[string]bool{}
	for k := range got {
		if i := strings.Index(k, `task="`); i >= 0 {
			names[k[i+6:i+6+strings.IndexByte(k[i+6:], '"')]] = true
		}
	}
	return names
}

// TestFirstScrapeDoesNotReadHistory: at 200,000 attempts (40,000 under the race detector, whose
// SQLite takes minutes to write more) the first scrapes read a bounded part of history — the
// window, and each task's newest entries — and the next one only what is new.
func TestFirstScrapeDoesNotReadHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 200,000 attempts")
	}
	n, tasks := 200000, 100
	if raceEnabled {
		n, tasks = 40000, 10
	}
	st, path := openStore(t)
	l := &ledger{tb: t, st: st}
	l.run("task-0", "first", store.Succeeded)
	t0 := time.Now()
	seedAttempts(t, path, tasks, n)
	t.Logf("seeded %d attempts in %v", n, time.Since(t0))
	cs := &counting{Store: st}
	// What is counted is entries read, not time: the timeout is long so that the first scrape (a
	// race-built test on a loaded machine took 5.0 s) is one bootstrap, not one resumed.
	c := newCollector(t, Config{Store: cs, Timeout: time.Minute})
	t0 = time.Now()
	got := scrape(t, c)
	t.Logf("first scrape: %v, %d History calls, %d entries; %d tasks of %d still to read", time.Since(t0),
		cs.calls.Load(), cs.entries.Load(), len(c.t.toLoad), len(c.t.tasks))
	for len(c.t.toLoad) > 0 { // a task's first read takes at most 0.5 s a scrape
		got = scrape(t, c)
	}
	first := cs.entries.Load()
	t.Logf("until every task was read: %v, %d History calls, %d entries", time.Since(t0), cs.calls.Load(), first)
	if limit := int64(bootstrapScan + tasks*taskScan + 1000); first > limit || first > int64(n)/3 {
		t.Errorf("the first scrapes read %d entries of history (of %d), want at most %d", first, n, limit)
	}
	want(t, got, map[string]float64{`once_tasks`: float64(tasks), `once_store_up`: 1,
		`once_attempts_total{state="succeeded",task="task-7"}`:          0,
		`once_task_last_attempt_state{state="succeeded",task="task-7"}`: 1})
	if _, ok := got[`once_task_last_success_timestamp_seconds{task="task-7"}`]; !ok {
		t.Error("no last success for task-7")
	}

	l.run("task-7", "new", store.Failed)
	t0 = time.Now()
	got = scrape(t, c)
	second := cs.entries.Load() - first
	t.Logf("next scrape: %v, %d entries", time.Since(t0), second)
	if second > 100 {
		t.Errorf("next scrape read %d entries, want only what is new (and the 10 s it reads again)", second)
	}
	want(t, got, map[string]float64{`once_attempts_total{state="failed",task="task-7"}`: 1,
		`once_attempts_total{state="succeeded",task="task-7"}`: 0})
}

// failingAfter fails one History call, the n-th, and counts the entries the others read.
type failingAfter struct {
	counting
	n, calls int
}

func (s *failingAfter) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	if s.calls++; s.calls == s.n {
		return nil, context.DeadlineExceeded
	}
	return s.counting.History(ctx, q)
}

// A bootstrap cut short by a failing read (a slow store's scrape timeout) goes on from where it
// stopped at the next scrape: it reads bootstrapScan entries in all, not again from the newest.
func TestBootstrapResumesAfterAFailedRead(t *testing.T) {
	st, path := openStore(t)
	seedAttempts(t, path, 10, 3*bootstrapScan)
	fs := &failingAfter{counting: counting{Store: st}, n: 3}
	tr := newTracker(fs, 100)
	ctx := context.Background()
	if err := tr.bootstrap(ctx, time.Now()); err == nil {
		t.Fatal("the first bootstrap did not fail")
	}
	read := fs.entries.Load()
	if tr.started || read == 0 {
		t.Fatalf("after the failed read: started %v, %d entries read", tr.started, read)
	}
	if err := tr.bootstrap(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !tr.started || len(tr.tasks) != 10 {
		t.Fatalf("started %v with %d tasks, want 10", tr.started, len(tr.tasks))
	}
	if got := fs.entries.Load(); got != bootstrapScan {
		t.Errorf("the bootstrap read %d entries in all (%d before the failure), want %d", got, read, bootstrapScan)
	}
}
