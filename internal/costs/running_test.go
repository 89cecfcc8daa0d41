package costs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// seedGone writes an attempt of each of n tasks on dsn's store, each begun under its task's
// lease, which is then released; the first gone are left running (no Finish), as a holder killed
// with kill -9 whose lease expired leaves them: their holder is gone.
func seedGone(tb testing.TB, ctx context.Context, dsn string, n, gone int) {
	tb.Helper()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		task := fmt.Sprintf("gone-%03d", i)
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "dead:1", RunID: task, TTL: time.Minute})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: "s", RunID: task, Holder: l.Holder, Token: l.Token}); err != nil {
			tb.Fatal(err)
		}
		if i >= gone {
			code := 0
			if _, err := s.Finish(ctx, task, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := s.Release(ctx, l); err != nil {
			tb.Fatal(err)
		}
	}
}

// readRunningCost counts the round trips of one store.ReadRunning on a fresh client through a
// relay, and checks that it lists want attempts, all with their holder gone.
func readRunningCost(tb testing.TB, ctx context.Context, dsn string, want int) int64 {
	tb.Helper()
	relay, via := relayed(tb, ctx, dsn)
	s, err := store.Open(ctx, via)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	t0 := relay.Trips()
	rr, _, err := store.ReadRunning(ctx, s, store.MaxRunningList)
	if err != nil {
		tb.Fatal(err)
	}
	trips := relay.Trips() - t0
	if len(rr.Attempts) != want {
		tb.Fatalf("ReadRunning listed %d attempts, want %d", len(rr.Attempts), want)
	}
	for _, r := range rr.Attempts {
		if r.Lease != store.LeaseGone || !r.Settleable() {
			tb.Fatalf("%s: lease %s, held by %v: want gone and settleable", r.Task, r.Lease, r.HeldBy)
		}
	}
	return trips
}

// fewestTrips is the fewest round trips of three readRunningCost on dsn. A loaded machine can
// split a pipelined burst of reads into many turns (a response arrives before the next request
// is sent), never join a serial read's turns, so the fewest is the read's own cost.
func fewestTrips(tb testing.TB, ctx context.Context, dsn string, want int) int64 {
	tb.Helper()
	fewest := readRunningCost(tb, ctx, dsn, want)
	for range 2 {
		fewest = min(fewest, readRunningCost(tb, ctx, dsn, want))
	}
	return fewest
}

// TestReadRunningFlatInGone holds what once status's RUNNING and once serve's overview read
// (store.ReadRunning) to a number of round trips that does not grow with the attempts whose holder
// is gone: of 50 tasks, 50 such attempts cost what one costs. Before, each was read again by a
// Slot of its own, one after another: 100 round trips more on a store with 100 (0.1 s at 1 ms a
// round trip). (What grows with the tasks, on MySQL and the key-value stores, is RunningLister's
// and Leases' own cost.)
func TestReadRunningFlatInGone(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var trips [2]int64
			for i, n := range []int{1, 50} {
				dsn := countedDSN(t, st)
				seedGone(t, ctx, dsn, 50, n)
				trips[i] = fewestTrips(t, ctx, dsn, n)
			}
			t.Logf("%s: ReadRunning with 1 attempt whose holder is gone: %d round trips; with 50: %d", st.name, trips[0], trips[1])
			// A read per attempt would add 49. ZooKeeper's reads of the tasks and of the 50
			// documents are sent in parallel (pipelined): one turn each on a quiet machine (11 both
			// ways), more when a loaded one delays some (37 once in a clean-clone run, hence the
			// fewest of three reads); half the attempts is the bound.
			if trips[1] >= trips[0]+25 {
				t.Errorf("%s: ReadRunning with 50 attempts whose holder is gone took %d round trips, with one %d: it reads per attempt", st.name, trips[1], trips[0])
			}
		})
	}
}

// BenchmarkReadRunningRTT times store.ReadRunning with 100 attempts whose holder is gone (100
// tasks) over a network whose round trip is 1 ms (BenchmarkRunRTT's relay): once status's
// RUNNING and once serve's overview (docs/benchmarks.md).
func BenchmarkReadRunningRTT(b *testing.B) {
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			dsn := storetest.WithPrefix(b, storetest.ServerDSN(b, st.env, st.name))
			seedGone(b, ctx, dsn, store.MaxRunningList, store.MaxRunningList)
			relay, via := relayed(b, ctx, dsn)
			relay.Delay = 500 * time.Microsecond
			s, err := store.Open(ctx, via)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			t0 := relay.Trips()
			for b.Loop() {
				rr, _, err := store.ReadRunning(ctx, s, store.MaxRunningList)
				if err != nil || len(rr.Attempts) != store.MaxRunningList {
					b.Fatalf("%d attempts, %v", len(rr.Attempts), err)
				}
			}
			b.ReportMetric(float64(relay.Trips()-t0)/float64(b.N), "trips/op")
		})
	}
}
