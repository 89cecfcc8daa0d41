package peers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/once-run/once/store/etcd"
	"github.com/once-run/once/store/storetest"
)

// --- benchmarks: p50/p99 of acquire+release against concurrency.Mutex, same server ---

// BenchmarkEtcd measures the peer of store/etcd's BenchmarkSuite/Contended (the store's own gRPC over HTTP/2:
// keep-alive of a reused etcd lease alongside the acquire txn, then the release txn) on the same
// server: one acquire+release round (busy counts as a round) with 1 and 16 contenders, each with
// its own client, of etcd's concurrency.Mutex over gRPC with a session created once and reused
// (TryLock + Unlock; no per-run TTL, no ledger).
func BenchmarkEtcd(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("mutex/c%d", n), func(b *testing.B) {
			key := "/bench-mutex/" + storetest.RandHex(b)
			storetest.RunContended(b, n, func(i int) (storetest.Op, func()) {
				cfg, err := etcd.ParseDSN(storetest.ServerDSN(b, "ONCE_TEST_ETCD", "etcd"))
				if err != nil {
					b.Fatal(err)
				}
				c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: cfg.Dial, Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				sess, err := concurrency.NewSession(c, concurrency.WithTTL(60))
				if err != nil {
					b.Fatal(err)
				}
				m := concurrency.NewMutex(sess, key)
				return func(ctx context.Context) error {
					err := m.TryLock(ctx)
					if errors.Is(err, concurrency.ErrLocked) {
						return nil
					}
					if err != nil {
						return err
					}
					return m.Unlock(ctx)
				}, func() { sess.Close(); c.Close() }
			})
		})
	}
}
