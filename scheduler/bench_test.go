package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/postgres"
)

// BenchmarkFleetBurst: 3 nodes × N jobs due at the same second (every 30 s), on the store of
// ONCE_BENCH_STORE (default an SQLite file): fire lag (the attempt's start by the store's clock
// minus the slot's start) p50 and p99 over the slots of one burst, command jobs (a shim and
// `true` per run) and Go function jobs. ONCE_BENCH_JOBS sets N (default 200). See
// docs/benchmarks.md ("once daemon") and bench/daemon.sh for the whole-process figures.
func BenchmarkFleetBurst(b *testing.B) {
	n := 200
	if s := os.Getenv("ONCE_BENCH_JOBS"); s != "" {
		fmt.Sscan(s, &n)
	}
	for _, kind := range []string{"command", "func"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				lags := fleetBurst(b, n, kind == "command")
				slices.Sort(lags)
				b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "p50-lag-ms")
				b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "p99-lag-ms")
				b.ReportMetric(float64(len(lags)), "slots")
			}
		})
	}
}

func fleetBurst(b *testing.B, n int, command bool) []time.Duration {
	dsn := os.Getenv("ONCE_BENCH_STORE")
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(b.TempDir(), "once.db")
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += fmt.Sprintf("%sprefix=bench%d_%d", sep, os.Getpid(), time.Now().UnixNano()%1e6)
	ctx := context.Background()
	var jobs []scheduler.Job
	for i := range n {
		j := scheduler.Job{Job: jobfile.Job{Name: fmt.Sprintf("job-%04d", i), Schedule: "*/30 * * * * *", TZ: "UTC", Command: []string{"true"}}}
		if !command {
			j.Work = func(context.Context, *once.Run) error { return nil }
		}
		jobs = append(jobs, j)
	}
	var stores []store.Store
	var cancels []func()
	for i := range 3 {
		s, err := store.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		stores = append(stores, s)
		sch, err := scheduler.New(scheduler.Config{Store: s, Jobs: jobs, Node: fmt.Sprintf("node-%d", i), TailSize: -1})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); sch.Run(rctx) }()
		cancels = append(cancels, func() { cancel(); <-done })
	}
	// The second burst after every node has started (the first may find them still starting),
	// 30 s apart so that one burst's slots have all ended before the next (a lag beyond the
	// period would make the next slot an overlap, skipped).
	now := time.Now()
	burst := now.Truncate(30 * time.Second).Add(60 * time.Second)
	time.Sleep(time.Until(burst.Add(25 * time.Second)))
	for _, c := range cancels {
		c()
	}
	var lags []time.Duration
	for i := range n {
		h, err := stores[0].History(ctx, store.HistoryQuery{Task: fmt.Sprintf("job-%04d", i), Slot: burst.UTC().Format("2006-01-02T15:04:05-07:00")})
		if err != nil {
			b.Fatal(err)
		}
		var at *store.Entry
		for k := range h {
			if h[k].State.IsAttempt() {
				if at != nil {
					b.Fatalf("job %d slot %s ran twice: %+v", i, burst, h)
				}
				at = &h[k]
			}
		}
		if at == nil {
			b.Fatalf("job %d slot %s did not run: %+v", i, burst, h)
		}
		lags = append(lags, at.StartedAt.Sub(burst))
	}
	for _, s := range stores {
		s.Close()
	}
	return lags
}
