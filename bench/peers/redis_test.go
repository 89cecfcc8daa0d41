package peers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store/redis"
	"github.com/once-run/once/store/storetest"
)

// --- benchmarks: p50/p99 of acquire+release against bsm/redislock and go-redsync, same server ---

// BenchmarkRedis measures the peers of store/redis' BenchmarkSuite/Contended on the same server: one
// acquire+release round (busy counts as a round) with 1 and 16 contenders, each with its own
// client, of bsm/redislock (SET NX PX + Lua release, no fencing token, no ledger) and go-redsync
// (one-node Redlock, TryLock).
func BenchmarkRedis(b *testing.B) {
	base := storetest.ServerDSN(b, "ONCE_TEST_REDIS", "redis")
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("redislock/c%d", n), func(b *testing.B) {
			key := "bench-redislock-" + storetest.RandHex(b)
			storetest.RunContended(b, n, func(i int) (storetest.Op, func()) {
				c := rawClient(b, base)
				lc := redislock.New(c)
				return func(ctx context.Context) error {
					l, err := lc.Obtain(ctx, key, time.Minute, nil)
					if errors.Is(err, redislock.ErrNotObtained) {
						return nil
					}
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}, func() { c.Close() }
			})
		})
		b.Run(fmt.Sprintf("redsync/c%d", n), func(b *testing.B) {
			key := "bench-redsync-" + storetest.RandHex(b)
			storetest.RunContended(b, n, func(i int) (storetest.Op, func()) {
				c := rawClient(b, base)
				rs := redsync.New(rsgoredis.NewPool(c))
				return func(ctx context.Context) error {
					m := rs.NewMutex(key, redsync.WithExpiry(time.Minute), redsync.WithTries(1))
					err := m.TryLockContext(ctx)
					var taken *redsync.ErrTaken
					if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
						return nil
					}
					if err != nil {
						return err
					}
					_, err = m.UnlockContext(ctx)
					return err
				}, func() { c.Close() }
			})
		})
	}
}

func rawClient(b *testing.B, dsn string) *goredis.Client {
	cfg, err := redis.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Opts.DisableIdentity = true
	return goredis.NewClient(cfg.Opts)
}

// BenchmarkRedisInterleaved runs one client of store/redis and one of bsm/redislock round-robin on
// one goroutine (storetest.RunInterleaved), so that the machine's load hits both alike: the
// once/redislock-p50-x metric is the ratio the goal is stated in.
func BenchmarkRedisInterleaved(b *testing.B) {
	base := storetest.ServerDSN(b, "ONCE_TEST_REDIS", "redis")
	op, done := storetest.LeaseRound(b, storetest.WithPrefix(b, base), "h")
	defer done()
	c := rawClient(b, base)
	defer c.Close()
	lc := redislock.New(c)
	key := "bench-redislock-" + storetest.RandHex(b)
	storetest.RunInterleaved(b, []storetest.Named{
		{Name: "once", Op: op},
		{Name: "redislock", Op: func(ctx context.Context) error {
			l, err := lc.Obtain(ctx, key, time.Minute, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	})
}
