package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/store"
)

// BenchmarkAccountBehind: what a start's account costs a catch-up job whose window reaches behind
// its task's newest 20 entries (an every-minute job with a day's window, 25 fires on time, no
// catch-up ever queued: the common case), on ONCE_BENCH_STORE (default an SQLite file), for
// ONCE_BENCH_JOBS jobs (default 50), each accounted in turn as a start does: the time per job and
// the look-ups of the fleet's claims per job. The queued marks behind the entries (behindSlots)
// are what it looks up since 2026-12-07. See docs/benchmarks.md ("once daemon").
func BenchmarkAccountBehind(b *testing.B) {
	n := 50
	if s := os.Getenv("ONCE_BENCH_JOBS"); s != "" {
		fmt.Sscan(s, &n)
	}
	dsn := os.Getenv("ONCE_BENCH_STORE")
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(b.TempDir(), "once.db")
	}
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	g := &countLookups{keyed: st.(keyed)}
	prefix := fmt.Sprintf("ab%d-", time.Now().UnixNano())
	var jobs []Job
	for i := range n {
		jb := Job{Job: jobfile.Job{Name: fmt.Sprintf("%sjob-%03d", prefix, i), Schedule: "* * * * *", TZ: "UTC",
			TTL: time.Minute, CatchUp: 24 * time.Hour, CatchUpMax: 1}, Work: func(context.Context, *once.Run) error { return nil }}
		sp, err := jb.Spec()
		if err != nil {
			b.Fatal(err)
		}
		for k := 25; k >= 0; k-- { // the newest due slot last, as fires record them
			sl := sp.Prev(time.Now().Add(-time.Duration(k) * time.Minute))
			if _, err := once.Do(ctx, once.Options{Store: st, Task: jb.Name, Slot: sl.Value, TTL: time.Minute}, jb.Work); err != nil {
				b.Fatal(err)
			}
		}
		jobs = append(jobs, jb)
	}
	s, err := New(Config{Store: g, Jobs: jobs, Node: "bench", Poll: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		g.n.Store(0)
		start := time.Now()
		for _, jb := range jobs {
			s.account(ctx, s.jobs[jb.Name], time.Now())
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n)/1000, "ms/job")
		b.ReportMetric(float64(g.n.Load())/float64(n), "lookups/job")
	}
}

// countLookups counts the look-ups of the fleet's claims (recordedScope).
type countLookups struct {
	keyed
	n atomic.Int64
}

func (c *countLookups) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if scope == recordedScope {
		c.n.Add(1)
	}
	return c.keyed.Lookup(ctx, scope, keys)
}
