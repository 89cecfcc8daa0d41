package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/once-run/once/store"
)

// newClient makes the client of cfg's mode and the name errors give it.
func newClient(cfg Config) (goredis.UniversalClient, string) {
	o := cfg.Opts
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// A call gives up at its ctx's deadline, not only at read_timeout (3s by default): Open's first
	// contact is bounded by store.Connecting, and a frozen server must not hold it longer.
	o.ContextTimeoutEnabled = true
	// Pipelines share the pool of single commands. go-redis gives them a pool of their own by
	// default, so a once run, which pipelines its open, first acquire and begin and then sends its
	// finish alone, dialled and greeted a second connection for the finish (a round trip more, and
	// 256 KiB of pipeline buffers).
	o.PipelinePoolSize = -1
	switch cfg.Mode {
	case ModeCluster:
		return goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: cfg.Addrs, Username: o.Username, Password: o.Password, Protocol: o.Protocol, ClientName: o.ClientName,
			MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: true,
			PoolFIFO: o.PoolFIFO, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns,
			MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns, ConnMaxIdleTime: o.ConnMaxIdleTime,
			ConnMaxLifetime: o.ConnMaxLifetime, TLSConfig: o.TLSConfig, DisableIdentity: true,
			MaintNotificationsConfig: o.MaintNotificationsConfig, PipelinePoolSize: o.PipelinePoolSize,
		}), "cluster " + strings.Join(cfg.Addrs, ",")
	case ModeSentinel:
		return goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: cfg.Master, SentinelAddrs: cfg.Addrs, SentinelUsername: cfg.SentinelUser, SentinelPassword: cfg.SentinelPassword,
			Username: o.Username, Password: o.Password, DB: o.DB, Protocol: o.Protocol, ClientName: o.ClientName,
			MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: true,
			PoolFIFO: o.PoolFIFO, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns,
			MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns, ConnMaxIdleTime: o.ConnMaxIdleTime,
			ConnMaxLifetime: o.ConnMaxLifetime, TLSConfig: o.TLSConfig, DisableIdentity: true,
			PipelinePoolSize: o.PipelinePoolSize,
		}), fmt.Sprintf("master %q of sentinels %s", cfg.Master, strings.Join(cfg.Addrs, ","))
	}
	return goredis.NewClient(o), o.Addr
}

// sentinelRefused is why the sentinels of cfg refused its sentinel credentials, "" when they did not
// (or none answered): go-redis reports an AUTH the sentinels refuse as "all sentinels … unreachable",
// so Open asks them once more itself, on that failure only.
func sentinelRefused(ctx context.Context, cfg Config) string {
	for _, a := range cfg.Addrs {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: a, Username: cfg.SentinelUser, Password: cfg.SentinelPassword,
			DialTimeout: cfg.Opts.DialTimeout, TLSConfig: cfg.Opts.TLSConfig, DisableIdentity: true, MaxRetries: -1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		err := sc.Ping(ctx).Err()
		_ = sc.Close()
		if err == nil {
			return ""
		}
		if msg := err.Error(); strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
			strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "AUTH") {
			return fmt.Sprintf("sentinel %s: %s", a, strings.ReplaceAll(msg, "\n", " "))
		}
	}
	return ""
}

// node is the connection pool of the server that holds key: the server (or Sentinel's master), or
// the cluster master of key's slot. Commands that must share a connection with a write (WAIT) go
// through it.
func (s *Store) node(ctx context.Context, key string) (*goredis.Client, error) {
	if cc, ok := s.c.(*goredis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return s.c.(*goredis.Client), nil
}

// scan calls fn with every key that matches pattern: on every master in a cluster, which SCAN
// covers one node of.
func (s *Store) scan(ctx context.Context, pattern string, fn func(key string) error) error {
	one := func(ctx context.Context, c *goredis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			if err := fn(it.Val()); err != nil {
				return err
			}
		}
		return it.Err()
	}
	if cc, ok := s.c.(*goredis.ClusterClient); ok {
		var mu = make(chan struct{}, 1) // ForEachMaster runs fn concurrently: one at a time here
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return one(ctx, c)
		})
	}
	return one(ctx, s.c.(*goredis.Client))
}

// durable runs sc on the node of keys[0] and, with ?wait=N, WAIT N in the same connection (WAIT
// counts the replicas that have this connection's writes). It returns the script's reply, and an
// error wrapping store.ErrUnavailable when fewer replicas acknowledged within wait_timeout: the write
// stands on the master, but a failover now could lose it. Without ?wait it is sc.Run.
func (s *Store) durable(ctx context.Context, sc *goredis.Script, what string, keys []string, args ...any) (*goredis.Cmd, error) {
	if s.wait == 0 {
		return sc.Run(ctx, s.c, keys, args...), nil
	}
	n, err := s.node(ctx, keys[0])
	if err != nil {
		return nil, s.mapErr(err)
	}
	p := n.Pipeline()
	res := sc.Eval(ctx, p, keys, args...) // the body: no NOSCRIPT to recover from inside the pipeline
	w := p.Do(ctx, "WAIT", s.wait, s.waitTimeout.Milliseconds())
	_, _ = p.Exec(ctx)
	if res.Err() != nil {
		return res, nil
	}
	acks, err := w.Int64()
	if err != nil {
		return res, s.mapErr(err)
	}
	if acks < int64(s.wait) {
		return res, fmt.Errorf("%w: redis at %s: %d of %d replicas acknowledged the %s within %s (?wait=%d): a failover now could lose it; check the replicas with INFO replication, or lower ?wait",
			store.ErrUnavailable, s.addr, acks, s.wait, what, s.waitTimeout, s.wait)
	}
	return res, nil
}
