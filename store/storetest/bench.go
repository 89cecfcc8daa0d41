package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// RunBenchmarks runs the suite's benchmarks on the store behind h: AcquireRelease (one
// uncontended client, ns/op), Contended/c1 and Contended/c16 (acquire+release rounds on one task
// by 1 and 16 clients at once, p50/p99 of a round) and, when the store implements store.Keys,
// ClaimBatch1000/dup0, dup50, dup100 (keys/s). Each uses a fresh DSN; what it leaves out it logs.
// A backend's own benchmarks (a peer library on the same server) use RunContended and LeaseRound
// so that their numbers compare with these.
func RunBenchmarks(b *testing.B, h Harness) {
	b.Run("AcquireRelease", func(b *testing.B) {
		ctx := context.Background()
		s := benchClient(b, h.DSN(b))
		req := store.AcquireRequest{Task: "bench", Holder: "bench", RunID: "r", TTL: time.Minute}
		b.ResetTimer()
		for b.Loop() {
			l, err := s.Acquire(ctx, req)
			if err != nil {
				b.Fatalf("acquire: %v", err)
			}
			if err := s.Release(ctx, l); err != nil {
				b.Fatalf("release: %v", err)
			}
		}
	})
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("Contended/c%d", n), func(b *testing.B) {
			dsn := h.DSN(b)
			RunContended(b, n, func(i int) (Op, func()) { return LeaseRound(b, dsn, fmt.Sprintf("h%d", i)) })
		})
	}
	probe := benchClient(b, h.DSN(b))
	if !capKeys.has(probe) {
		b.Logf("storetest: %T does not implement store.Keys: skipped ClaimBatch1000", probe)
		return
	}
	runKeysBenchmarks(b, h)
}

// benchClient opens a client on dsn, closed when b ends.
func benchClient(b *testing.B, dsn string) store.Store {
	b.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		b.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// runKeysBenchmarks measures Claim in batches of 1,000 keys (one client) at 0%, 50% and 100%
// duplicates, reporting keys/s.
func runKeysBenchmarks(b *testing.B, h Harness) {
	const batch = 1000
	for _, dup := range []int{0, 50, 100} {
		b.Run(fmt.Sprintf("ClaimBatch1000/dup%d", dup), func(b *testing.B) {
			ctx := context.Background()
			k := benchClient(b, h.DSN(b)).(store.Keys)
			next := 0
			keys := make([]string, batch)
			b.ResetTimer()
			for b.Loop() {
				// dup% of each batch repeats keys of the previous batch; the rest are new.
				old := batch * dup / 100
				for i := range keys {
					if i < old && next >= batch {
						keys[i] = fmt.Sprintf("key-%012d", next-batch+i)
					} else {
						keys[i] = fmt.Sprintf("key-%012d", next)
						next++
					}
				}
				if _, err := k.Claim(ctx, store.ClaimRequest{Scope: "bench", Keys: keys}); err != nil {
					b.Fatalf("claim: %v", err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// Op is one timed operation of a benchmark client.
type Op func(ctx context.Context) error

// LeaseRound opens a client of its own on dsn and returns one acquire+release round of task
// "bench" by holder (a busy answer counts as a round done), and the func that closes the client.
func LeaseRound(tb testing.TB, dsn, holder string) (Op, func()) {
	tb.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
	}
	req := store.AcquireRequest{Task: "bench", Holder: holder, RunID: "r", TTL: time.Minute}
	return func(ctx context.Context) error {
		l, err := s.Acquire(ctx, req)
		if errors.Is(err, store.ErrBusy) {
			return nil
		}
		if err != nil {
			return err
		}
		return s.Release(ctx, l)
	}, func() { _ = s.Close() }
}

// RunContended runs b.N operations in total across n clients made by mk (each with its own
// connection), all at once, and reports the p50 and p99 latency of one operation as metrics.
func RunContended(b *testing.B, n int, mk func(i int) (Op, func())) {
	ctx := context.Background()
	ops := make([]Op, n)
	for i := range ops {
		op, done := mk(i)
		defer done()
		if err := op(ctx); err != nil { // warm up the connection
			b.Fatal(err)
		}
		ops[i] = op
	}
	lat := make([][]time.Duration, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	per := (b.N + n - 1) / n
	b.ResetTimer()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < per; j++ {
				t0 := time.Now()
				if err := ops[i](ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}(i)
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// Named is an operation with a name, for RunInterleaved.
type Named struct {
	Name string
	Op   Op
}

// RunInterleaved runs the operations round-robin b.N times each on one goroutine, so that load from
// elsewhere on the machine hits them all alike, and reports each one's p50 and p99 latency and its
// p50 as a ratio of the last operation's (the baseline).
func RunInterleaved(b *testing.B, ops []Named) {
	ctx := context.Background()
	lat := make([][]time.Duration, len(ops))
	for _, o := range ops { // warm up
		if err := o.Op(ctx); err != nil {
			b.Fatalf("%s: %v", o.Name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, o := range ops {
			t0 := time.Now()
			if err := o.Op(ctx); err != nil {
				b.Fatalf("%s: %v", o.Name, err)
			}
			lat[k] = append(lat[k], time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(ops))
	for k, o := range ops {
		l := lat[k]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		p50[k] = l[len(l)/2]
		b.ReportMetric(float64(p50[k].Microseconds()), o.Name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), o.Name+"-p99-µs")
	}
	base := p50[len(ops)-1]
	for k, o := range ops[:len(ops)-1] {
		if base > 0 {
			b.ReportMetric(float64(p50[k])/float64(base), o.Name+"/"+ops[len(ops)-1].Name+"-p50-x")
		}
	}
}
