package costs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// TestRunFlatInHistory holds what a run reads to what it decides: a run of a task with a long
// history costs, in round trips and in bytes the server sends, what a run of a task without one
// costs. The run reads its own slot and the attempts left running, never the task's past. Until
// the running index (issue 16) a run on Redis, etcd and ZooKeeper read every document of its task
// when it took the lease, to find what a vanished holder left running: a job due every minute for
// a year made each run read half a million documents.
func TestRunFlatInHistory(t *testing.T) {
	history := 60 // before the running index a run read all of them: 18 kB on Redis, 32 kB on etcd
	attempts := 300
	if testing.Short() {
		history, attempts = 50, 150
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, dsn, seed := openSeed(t, st)
			l, err := seed.Acquire(ctx, store.AcquireRequest{Task: "long", Holder: "seed:1", RunID: "seed", TTL: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			code := 0
			for i := range history {
				run := fmt.Sprintf("seed-%d", i)
				if _, err := seed.Begin(ctx, store.Attempt{Task: "long", Slot: fmt.Sprintf("h%05d", i), RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				if _, err := seed.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
					t.Fatal(err)
				}
			}
			if err := seed.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			// A task without a slot: every run is an attempt of the same slot.
			l, err = seed.Acquire(ctx, store.AcquireRequest{Task: "many", Holder: "seed:1", RunID: "seed", TTL: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for i := range attempts {
				run := fmt.Sprintf("many-%d", i)
				if _, err := seed.Begin(ctx, store.Attempt{Task: "many", RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				if _, err := seed.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
					t.Fatal(err)
				}
			}
			if err := seed.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			short := runCost(t, dsn, "short", "warm", "counted")
			long := runCost(t, dsn, "long", "warm", "counted")
			t.Logf("%s: a run of a task with %d slots done: %d round trips, %d bytes received; with none: %d, %d",
				st.name, history, long.trips, long.bytes, short.trips, short.bytes)
			if long.trips > short.trips+st.slack || long.bytes > short.bytes+1024 {
				t.Errorf("%s: a run of a task with %d slots done cost %d round trips and %d bytes, one with none %d and %d: a run reads the task's history",
					st.name, history, long.trips, long.bytes, short.trips, short.bytes)
			}
			few := runCost(t, dsn, "few", "", "")
			many := runCost(t, dsn, "many", "", "")
			t.Logf("%s: a run of a slot with %d attempts: %d round trips, %d bytes received; with one: %d, %d",
				st.name, attempts, many.trips, many.bytes, few.trips, few.bytes)
			// A key-value store's slot document keeps its last 8 to 40 attempts (internal/kvstore's
			// archives): at ~250 bytes each, up to ~10 kB more than a slot with one. Before, all
			// 300: ~80 kB on Redis and etcd (and a run a few thousand attempts later failed there).
			if many.trips > few.trips+st.slack+1 || many.bytes > few.bytes+12<<10 {
				t.Errorf("%s: a run of a slot with %d attempts cost %d round trips and %d bytes, one with one attempt %d and %d: a run reads the slot's history",
					st.name, attempts, many.trips, many.bytes, few.trips, few.bytes)
			}
		})
	}
}

// runCost runs task's slot warm (so that both tasks are past their first run), then counts a run
// of its slot counted on a fresh client through a relay.
func runCost(t *testing.T, dsn, task, warm, counted string) wire {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	work := func(context.Context, *once.Run) error { return nil }
	opts := once.Options{Task: task, Holder: "costs:1", TTL: time.Minute, LockDir: t.TempDir()}
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Slot = s, warm
	if res, err := once.Do(ctx, opts, work); err != nil || res.Decision != once.Ran {
		t.Fatalf("warm-up run of %s: %+v %v", task, res, err)
	}
	s.Close()
	relay, via := relayed(t, ctx, dsn)
	if s, err = store.Open(ctx, via); err != nil {
		t.Fatal(err)
	}
	t0, b0 := relay.Trips(), relay.Received()
	opts.Store, opts.Slot = s, counted
	if res, err := once.Do(ctx, opts, work); err != nil || res.Decision != once.Ran {
		t.Fatalf("run of %s: %+v %v", task, res, err)
	}
	time.Sleep(100 * time.Millisecond) // what the run started in the background (a watch) is sent
	got := wire{relay.Trips() - t0, relay.Received() - b0}
	s.Close()
	return got
}
