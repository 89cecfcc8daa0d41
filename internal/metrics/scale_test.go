package metrics

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// listing is a store that is a store.TaskLister (the SQLite store of this version is not), by
// the history walk of store.ListTasks.
type listing struct{ *counting }

func (s listing) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	return store.ListTasks(ctx, s.counting.Store, after, limit)
}

// TestMaxTasksBoundsTheOutput: 10,000 tasks, 1,000 exported; the scrape's output has series of
// 1,000 tasks only and says how many were left out.
func TestMaxTasksBoundsTheOutput(t *testing.T) {
	const tasks, max = 10000, 1000
	for _, lister := range []bool{false, true} {
		t.Run(fmt.Sprintf("lister=%v", lister), func(t *testing.T) {
			st, path := openStore(t)
			l := &ledger{tb: t, st: st}
			l.run("task-0", "first", store.Succeeded) // creates the ledger
			seedAttempts(t, path, tasks, tasks)
			var s store.Store = &counting{Store: st}
			if lister {
				s = listing{s.(*counting)}
			}
			c := newCollector(t, Config{Store: s, MaxTasks: max})
			got := scrape(t, c)
			want(t, got, map[string]float64{`once_tasks`: max, `once_tasks_left_out`: tasks - max})
			names := map[string]bool{}
			for k := range got {
				if i := strings.Index(k, `task="`); i >= 0 {
					names[k[i+6:i+6+strings.IndexByte(k[i+6:], '"')]] = true
				}
			}
			if len(names) != max {
				t.Errorf("series of %d tasks, want %d", len(names), max)
			}
			rec := httptest.NewRecorder()
			c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			lines := strings.Count(rec.Body.String(), "\n")
			t.Logf("/metrics: %d lines, %d bytes for %d tasks exported of %d", lines, rec.Body.Len(), max, tasks)
			if per := 40; lines > max*per+500 {
				t.Errorf("/metrics has %d lines, want at most %d per task exported", lines, per)
			}
		})
	}
}

// TestFirstScrapeDoesNotReadHistory: at 200,000 attempts the first scrape reads a bounded part
// of history (its window and each task's newest entries), and the next one what is new.
func TestFirstScrapeDoesNotReadHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 200,000 attempts")
	}
	const n, tasks = 200000, 100
	st, path := openStore(t)
	l := &ledger{tb: t, st: st}
	l.run("task-0", "first", store.Succeeded)
	t0 := time.Now()
	seedAttempts(t, path, tasks, n)
	t.Logf("seeded %d attempts in %v", n, time.Since(t0))
	cs := &counting{Store: st}
	c := newCollector(t, Config{Store: cs})
	t0 = time.Now()
	got := scrape(t, c)
	first, calls := cs.entries.Load(), cs.calls.Load()
	t.Logf("first scrape: %v, %d History calls, %d entries", time.Since(t0), calls, first)
	if limit := int64(bootstrapScan + tasks*taskScan + 1000); first > limit {
		t.Errorf("first scrape read %d entries of history, want at most %d", first, limit)
	}
	want(t, got, map[string]float64{`once_tasks`: tasks, `once_store_up`: 1,
		`once_attempts_total{state="succeeded",task="task-7"}`:          0,
		`once_task_last_attempt_state{state="succeeded",task="task-7"}`: 1})
	if _, ok := got[`once_task_last_success_timestamp_seconds{task="task-7"}`]; !ok {
		t.Error("no last success for task-7")
	}

	l.run("task-7", "new", store.Failed)
	t0 = time.Now()
	got = scrape(t, c)
	second := cs.entries.Load() - first
	t.Logf("second scrape: %v, %d entries", time.Since(t0), second)
	if second > tailPage {
		t.Errorf("second scrape read %d entries, want only what is new (and the overlap)", second)
	}
	want(t, got, map[string]float64{`once_attempts_total{state="failed",task="task-7"}`: 1,
		`once_attempts_total{state="succeeded",task="task-7"}`: 0})
}
