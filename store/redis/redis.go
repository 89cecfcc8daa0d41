// Package redis is the Redis store: redis://[user:password@]host[:port][/db][?prefix=name] and
// rediss:// for TLS; redis+cluster:// for a Redis Cluster and redis+sentinel:// for the master a set
// of sentinels names (ParseDSN).
//
// Leases are SET NX PX keys whose value names the owner, set by one Lua script that also bumps the
// task's fencing counter, all stamped by Redis's own clock (TIME inside the script): an uncontended
// acquire is one round trip. Renew and release are owner-checked scripts (holder and token). The
// ledger is internal/kvstore: one document per (task, slot), written by a compare-and-set script
// that is fenced by the task's counter. Seats (AcquireRequest.Limit, seats.go) are a hash of the
// task's, summarised in its lease key while any is live. Every key of a task shares the hash tag {prefix:task}, so a
// task's scripts touch one Redis Cluster slot.
//
// Redis without persistence forgets everything on restart. The store notices when it can: each
// script checks the task's counter against the prefix epoch and the highest token this client has
// seen, and refuses with ErrLedgerLost instead of treating slots as never run. See
// docs/stores/redis.md for what remains undetectable.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

func init() {
	open := func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }
	store.Register("redis", open, store.TakesPassword)
	store.Register("rediss", open, store.TakesPassword)
	for _, scheme := range []string{"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
		store.Register(scheme, open, store.TakesPassword)
	}
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

// ErrLedgerLost is returned (wrapping store.ErrUnavailable) when the store finds that Redis lost
// keys it had written: a restart without persistence, a FLUSHALL, or eviction under maxmemory.
var ErrLedgerLost = fmt.Errorf("%w: the Redis ledger was lost (restart without persistence, flush or eviction); "+
	"enable appendonly yes with appendfsync always, set maxmemory-policy noeviction, then check with once history what ran", store.ErrUnavailable)

// Store is a Redis store. Safe for concurrent use.
type Store struct {
	closeOnce      sync.Once
	closeErr       error
	c              goredis.UniversalClient // *goredis.Client (one server, Sentinel) or *goredis.ClusterClient
	mode           Mode
	prefix         string
	addr           string // what errors name: the server, the cluster's seeds or the sentinels' master
	epoch          string
	epochJSON      string // the epoch as a JSON string (jsonString), in the lease values
	wait           int    // replicas a grant and a ledger write wait for (WAIT), 0: none
	waitTimeout    time.Duration
	kvstore.Ledger // the run ledger (store.Ledger), written once for the KV stores
	*kvstore.Keys  // business keys (store.Keys), written once for the KV stores (keys.go)

	mu     sync.Mutex
	hwm    map[string]int64 // highest token seen per task: a counter below it means Redis lost data
	known  map[string]bool  // tasks this client added to the task index
	scopes map[string]bool  // scopes this client added to the scope index (keys.go)

	histBuilt atomic.Bool // the history index was seen built (history.go)
	kindBuilt atomic.Bool // the indexes of a kind were seen built (history.go)
}

// quiet drops go-redis's own log lines (pool dial retries); the store reports errors itself.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

var quietOnce sync.Once

// Open connects, checks the server and initialises the prefix (its epoch marker).
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	// go-redis logs dial failures to stderr by itself; errors reach the caller mapped instead.
	quietOnce.Do(func() { goredis.SetLogger(quiet{}) })
	set := cfg.Opts.DialTimeout // the DSN's dial_timeout, 0 when not given
	c, addr := newClient(cfg)
	s := &Store{c: c, mode: cfg.Mode, prefix: cfg.Prefix, addr: addr, wait: cfg.Wait, waitTimeout: cfg.WaitTimeout,
		hwm: map[string]int64{}, known: map[string]bool{}}
	s.Ledger = kvstore.NewLedger(kv{s})
	s.Keys = &kvstore.Keys{KV: keyKV{s}, Name: "redis", Runs: kv{s}}
	cctx, cancel, bound := store.Connecting(ctx, set)
	defer cancel()
	if err := s.init(cctx); err != nil {
		_ = s.c.Close()
		if cctx.Err() != nil && ctx.Err() == nil {
			err := store.Unreached("redis at "+s.addr, bound)
			if cfg.Opts.TLSConfig != nil {
				// A plain server waits for the end of a line that the TLS ClientHello never sends.
				err = fmt.Errorf("%w, and that it serves TLS (else use redis://)", err)
			}
			return nil, err
		}
		if cfg.Mode == ModeSentinel && errors.Is(err, store.ErrUnavailable) {
			if why := sentinelRefused(cctx, cfg); why != "" {
				return nil, fmt.Errorf("%w: redis %s: the sentinels refused the credentials (%s); give the sentinels' own user and password as ?sentinel_user= and ?sentinel_password= (the master's go in user:password@)",
					store.ErrUnavailable, s.addr, why)
			}
		}
		return nil, err
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	fresh := strconv.FormatInt(time.Now().UnixMicro(), 10) + "-" + hex.EncodeToString(b)
	key := s.key("epoch")
	// One pipelined round trip: the epoch marker made if missing, read back, and the persistence
	// settings (once per server and process).
	p := s.c.Pipeline()
	setnx := p.SetNX(ctx, key, fresh, 0)
	get := p.Get(ctx, key)
	var conf *goredis.MapStringStringCmd
	if _, done := checked.LoadOrStore(s.addr, true); !done {
		conf = p.ConfigGet(ctx, "append*")
	}
	_, execErr := p.Exec(ctx)
	if err := setnx.Err(); err != nil {
		return s.mapErr(err)
	}
	epoch, err := get.Result()
	if err == nil && epoch == "" {
		// A pipeline that never reached a server (Sentinel without a master) sets no command's
		// error: Exec's is the one.
		err = execErr
		if err == nil {
			err = errors.New("the epoch marker read back empty")
		}
	}
	if err != nil {
		return s.mapErr(err)
	}
	s.epoch, s.epochJSON = epoch, jsonString(epoch)
	if conf != nil {
		s.warnPersistence(conf)
	}
	return nil
}

// Close closes the connection pool. Leases are not released. Closing again returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.c.Close() })
	return s.closeErr
}

// key names a prefix-wide key; tkey names a key of task, hash-tagged by task.
func (s *Store) key(name string) string { return "{" + s.prefix + "}:" + name }
func (s *Store) tkey(task, name string) string {
	return "{" + s.prefix + ":" + escape(task) + "}:" + name
}

// The replacers are built once: strings.NewReplacer allocates ~7 KB of tables, and tkey runs on
// every call (built per call, they were most of a lease round's bytes and 42 of its 103 allocations).
var (
	escaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	unescaper = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")
)

// escape keeps task names from closing the hash tag early.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return escaper.Replace(s)
}

// unescape undoes escape.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return unescaper.Replace(s)
}

// scopeKnown reports whether this client already added scope to the scope index.
func (s *Store) scopeKnown(scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scopes[scope]
}

func (s *Store) knowScope(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scopes == nil {
		s.scopes = map[string]bool{}
	}
	s.scopes[scope] = true
}

// indexed reports whether this client already added task to the task index.
func (s *Store) indexed(task string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[task]
}

// markIndexed remembers that task is in the task index.
func (s *Store) markIndexed(task string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[task] = true
}

func (s *Store) seen(task string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hwm[task]
}

func (s *Store) see(task string, token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token > s.hwm[task] {
		s.hwm[task] = token
	}
}

// mapErr maps every go-redis error to a store sentinel, in one line, without the password.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return fmt.Errorf("%w: redis at %s: %s; check that the server is running and reachable", store.ErrUnavailable, s.addr, msg)
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("%w: redis at %s refused the credentials: %s; check user and password in the DSN", store.ErrUnavailable, s.addr, msg)
	case msg == "LOST", strings.HasPrefix(msg, "ERR LOST"):
		return ErrLedgerLost
	case strings.HasPrefix(msg, "CLUSTERDOWN"):
		return fmt.Errorf("%w: redis %s: %s; check CLUSTER INFO on its nodes", store.ErrUnavailable, s.addr, msg)
	case strings.Contains(msg, "sentinels specified in configuration are unreachable"):
		return fmt.Errorf("%w: redis %s: no sentinel answered with the master's address; check the sentinels' addresses, that they run, and that ?master= is a name they monitor (SENTINEL MASTERS)", store.ErrUnavailable, s.addr)
	}
	return fmt.Errorf("%w: redis at %s: %s", store.ErrUnavailable, s.addr, strings.ReplaceAll(msg, "\n", " "))
}

// check is the ledger-loss guard shared by the scripts. KEYS[1] is the task's counter hash, KEYS[2]
// its lease key, KEYS[3] its slot set, KEYS[4] its seats (taskKeys); ARGV[1] the prefix epoch, ARGV[2] the highest token this
// client saw. It returns the counter (0 when none) or raises "LOST".
const check = `
local function check()
  local f = redis.call('HMGET', KEYS[1], 'n', 'e')
  local n = tonumber(f[1])
  if n == nil then
    if tonumber(ARGV[2]) > 0 or redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) > 0 then
      return redis.error_reply('LOST')
    end
    return 0
  end
  if f[2] ~= ARGV[1] or n < tonumber(ARGV[2]) then return redis.error_reply('LOST') end
  return n
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`
