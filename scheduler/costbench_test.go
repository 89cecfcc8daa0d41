package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// benchStore opens the store of ONCE_BENCH_STORE (default an SQLite file), and N of
// ONCE_BENCH_JOBS (default 200).
func benchStore(b *testing.B) (keyedStore, int) {
	n := 200
	if s := os.Getenv("ONCE_BENCH_JOBS"); s != "" {
		fmt.Sscan(s, &n)
	}
	dsn := os.Getenv("ONCE_BENCH_STORE")
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(b.TempDir(), "once.db")
	}
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s.(keyedStore), n
}

// BenchmarkStartCost: one node starting with N hourly jobs (ONCE_BENCH_JOBS, default 200) on
// ONCE_BENCH_STORE, each with 12 slots behind its newest one that a stopped node queued as a
// catch-up and dropped (holes: the newest 8 followed up, 4 recorded missed at once), while N
// leases of other tasks are held (a busy fleet: each read of the leases lists them all). It
// reports the Leases calls and the time until every job's holes were handled. See
// docs/benchmarks.md ("once daemon").
func BenchmarkStartCost(b *testing.B) {
	s, n := benchStore(b)
	ctx := context.Background()
	prefix := fmt.Sprintf("sc%d-", time.Now().UnixNano())
	hourly := scheduler.QuietSchedule(time.Hour)
	sp, _ := workJob("h", hourly, nil).Spec()
	newest := sp.Prev(time.Now())
	old := sp.Prev(newest.Start.Add(-12*time.Hour - time.Nanosecond))
	var js []scheduler.Job
	for i := range n {
		name := fmt.Sprintf("%sjob-%04d", prefix, i)
		for _, sl := range []string{old.Value, newest.Value} {
			if _, err := once.Do(ctx, once.Options{Store: s, Task: name, Slot: sl, TTL: time.Minute}, func(context.Context, *once.Run) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		var marks []string
		for sl := sp.Next(old.Start); sl.Start.Before(newest.Start); sl = sp.Next(sl.Start) {
			marks = append(marks, "queued "+name+" "+sl.Value)
		}
		if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "once.scheduler.recorded", Keys: marks, Claimant: store.Claimant{RunID: "record bench"}}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Acquire(ctx, store.AcquireRequest{Task: prefix + fmt.Sprintf("other-%04d", i), Holder: "elsewhere", RunID: "other", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		j := workJob(name, hourly, func(context.Context, *once.Run) error { return nil })
		j.CatchUp, j.CatchUpMax = 30*time.Minute, 1
		js = append(js, j)
	}
	// The seeded entries older than MaxClockOffset (2 s), as after a stop: a start shares a read of
	// the leases only for jobs whose newest entry is older than it by that much (recentLeases).
	time.Sleep(2500 * time.Millisecond)
	for range b.N {
		reads := &leaseReads{keyedStore: s}
		var done atomic.Int64
		all := make(chan struct{})
		var closeAll sync.Once
		log := slog.New(&onMessage{msg: "slots left without a record by a node that stopped: recorded missed unless a node runs them", do: func() {
			if done.Add(1) == int64(n) {
				closeAll.Do(func() { close(all) })
			}
		}})
		sch, err := scheduler.New(scheduler.Config{Store: reads, Jobs: js, Node: "bench", Poll: time.Minute, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		start := time.Now()
		go sch.Run(runCtx)
		select {
		case <-all:
		case <-time.After(10 * time.Minute):
			b.Fatalf("%d of %d jobs' holes handled in 10 minutes", done.Load(), n)
		}
		took := time.Since(start)
		cancel()
		b.ReportMetric(float64(reads.n.Load()), "leases-calls")
		b.ReportMetric(float64(took.Milliseconds()), "start-ms")
	}
}

// BenchmarkIdlePoll: one node with N jobs due daily (ONCE_BENCH_JOBS, default 200) on
// ONCE_BENCH_STORE, polling every 100 ms for 5 s with nothing due (from its second poll: after
// the start's accounts): the control keys (pauses, triggers) it looks up by name and the scope
// pages it reads, per poll, and the time those reads take per poll.
func BenchmarkIdlePoll(b *testing.B) {
	s, n := benchStore(b)
	prefix := fmt.Sprintf("ip%d-", time.Now().UnixNano())
	var js []scheduler.Job
	for i := range n {
		js = append(js, workJob(fmt.Sprintf("%sdaily-%04d", prefix, i), scheduler.QuietSchedule(24*time.Hour), func(context.Context, *once.Run) error { return nil }))
	}
	for range b.N {
		reads := &timedControl{controlReads: controlReads{keyedStore: s}}
		sch, err := scheduler.New(scheduler.Config{Store: reads, Jobs: js, Node: "bench", Poll: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); sch.Run(ctx) }()
		// From the second poll on: the first is the start's, before the jobs' accounts.
		for end := time.Now().Add(10 * time.Minute); reads.polls.Load() < 2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				b.Fatal("no poll after the start in 10 minutes")
			}
		}
		looked0, pages0 := reads.counts()
		polls0, spent0 := reads.polls.Load(), reads.spent.Load()
		time.Sleep(5 * time.Second)
		cancel()
		<-done
		looked, pages := reads.counts()
		polls := float64(reads.polls.Load() - polls0)
		b.ReportMetric(float64(looked-looked0)/polls, "keys/poll")
		b.ReportMetric(float64(pages-pages0)/polls, "pages/poll")
		b.ReportMetric(float64(reads.spent.Load()-spent0)/polls/1e6, "read-ms/poll")
		b.ReportMetric(polls, "polls")
	}
}

// timedControl is controlReads that also counts polls (a read of the pause scope from its start)
// and the time spent in the control reads.
type timedControl struct {
	controlReads
	polls, spent atomic.Int64
}

func (c *timedControl) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if scope == scheduler.PauseScope && len(keys) > 0 && c.first(keys[0]) {
		c.polls.Add(1)
	}
	t := time.Now()
	defer func() { c.spent.Add(int64(time.Since(t))) }()
	return c.controlReads.Lookup(ctx, scope, keys)
}

func (c *timedControl) ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]store.Key, string, error) {
	if scope == scheduler.PauseScope && cursor == "" {
		c.polls.Add(1)
	}
	t := time.Now()
	defer func() { c.spent.Add(int64(time.Since(t))) }()
	return c.controlReads.ScopeKeys(ctx, scope, cursor, limit)
}

// first is whether name is the first job's (a poll's look-up of pauses starts with it).
func (c *timedControl) first(name string) bool {
	return len(name) > 10 && name[len(name)-10:] == "daily-0000"
}
