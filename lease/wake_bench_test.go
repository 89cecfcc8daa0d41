package lease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

// blindWait is the peer: the wait once had before issue 12, and the usual lock client's retry
// loop — back off 50 ms doubling to 1 s (with jitter), whatever the busy answer says.
func blindWait(ctx context.Context, s store.Leaser, req store.AcquireRequest, wait time.Duration) (time.Time, error) {
	giveUp := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for {
		g, err := s.Acquire(ctx, req)
		if err == nil {
			return time.Now(), s.Release(ctx, g)
		}
		if !errors.Is(err, store.ErrBusy) || time.Until(giveUp) <= 0 {
			return time.Time{}, err
		}
		time.Sleep(min(backoff+rand.N(backoff/2+1), time.Until(giveUp)))
		backoff = min(backoff*2, time.Second)
	}
}

// BenchmarkWakeUp: b.N waiters, each on a task whose holder died, staggered 25 ms apart (one store client for them all: a tighter stagger measures the client's queue); how
// long after the expiry each held the lease, as p50/p99 metrics (ms), for once's wait and for the
// blind backoff, on every store in the environment (bench/wait-wakeup.sh).
func BenchmarkWakeUp(b *testing.B) {
	for name, s := range wakeStores(b, "sqlite", "postgres", "mysql", "redis", "etcd", "zk") {
		for _, w := range []struct {
			name string
			wait func(ctx context.Context, req store.AcquireRequest) (time.Time, error)
		}{
			{"once", func(ctx context.Context, req store.AcquireRequest) (time.Time, error) {
				l, err := lease.Acquire(ctx, s, req, 20*time.Second)
				if err != nil {
					return time.Time{}, err
				}
				return time.Now(), l.Release(ctx) // held now; the release is not part of the wait
			}},
			{"blind-backoff", func(ctx context.Context, req store.AcquireRequest) (time.Time, error) {
				return blindWait(ctx, s, req, 20*time.Second)
			}},
		} {
			b.Run(name+"/"+w.name, func(b *testing.B) {
				if name == "etcd" {
					b.Log("etcd grants leases in whole seconds (TTLs are rounded up)")
				}
				late, _, _ := wakeLatencies(b, s, b.N, 25*time.Millisecond, func(ctx context.Context, req store.AcquireRequest) (time.Time, time.Time, error) {
					held, err := w.wait(ctx, req)
					return held, held, err
				})
				b.ReportMetric(float64(pct(late, 0.5))/1e6, "p50-ms")
				b.ReportMetric(float64(pct(late, 0.99))/1e6, "p99-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
