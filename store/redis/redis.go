// Package redis is the Redis store: redis://[user:password@]host[:port][/db][?prefix=name] and
// rediss:// for TLS.
//
// Leases are SET NX PX keys whose value names the owner, set by one Lua script that also bumps the
// task's fencing counter, all stamped by Redis's own clock (TIME inside the script): an uncontended
// acquire is one round trip. Renew and release are owner-checked scripts (holder and token). The
// ledger is internal/kvledger: one document per (task, slot), written by a compare-and-set script
// that is fenced by the task's counter. Every key of a task shares the hash tag {prefix:task}, so a
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
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/once-run/once/internal/kvledger"
	"github.com/once-run/once/store"
)

func init() {
	open := func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }
	store.Register("redis", open, store.TakesPassword)
	store.Register("rediss", open, store.TakesPassword)
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

// ErrLedgerLost is returned (wrapping store.ErrUnavailable) when the store finds that Redis lost
// keys it had written: a restart without persistence, a FLUSHALL, or eviction under maxmemory.
var ErrLedgerLost = fmt.Errorf("%w: the Redis ledger was lost (restart without persistence, flush or eviction); "+
	"enable appendonly yes with appendfsync always, set maxmemory-policy noeviction, then check with once history what ran", store.ErrUnavailable)

// Config is a parsed DSN.
type Config struct {
	Opts   *goredis.Options
	Prefix string // key prefix, default "once"
}

// Params are the query parameters a redis:// DSN accepts (docs/stores/redis.md): prefix and
// go-redis's own URL options.
var Params = []string{
	"prefix", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "conn_max_idle_time", "conn_max_lifetime",
	"skip_verify",
}

var spec = store.QuerySpec{Store: "redis", Doc: "docs/stores/redis.md", Known: Params, Refused: map[string]string{
	"db":       "give the database number in the path: redis://host:6379/13",
	"password": "give it in the user info: redis://:PASSWORD@host, or use a password file",
}}

// ParseDSN parses a redis:// or rediss:// DSN strictly (store.ParseURL, Params; prefix default
// "once"). Errors wrap store.ErrBadDSN, name what is wrong and never contain the password.
func ParseDSN(dsn string) (Config, error) {
	u, q, err := store.ParseURL(spec, dsn, "redis", "rediss")
	if err != nil {
		return Config{}, err
	}
	if _, ok := q["skip_verify"]; ok && u.Scheme != "rediss" {
		return Config{}, fmt.Errorf("%w: redis parameter \"skip_verify\": only for TLS, rediss://", store.ErrBadDSN)
	}
	prefix, ok := q.Take("prefix")
	if !ok {
		prefix = "once"
	}
	u.RawQuery = q.Encode()
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		// go-redis names the option and the value it could not read; only net/url quotes the URL.
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = "not a valid URL"
		}
		return Config{}, fmt.Errorf("%w: %s: %s", store.ErrBadDSN, store.Redact(dsn), msg)
	}
	return Config{Opts: opts, Prefix: prefix}, nil
}

// Store is a Redis store. Safe for concurrent use.
type Store struct {
	c               *goredis.Client
	prefix          string
	addr            string
	epoch           string
	kvledger.Ledger // the run ledger (store.Ledger), written once for the KV stores

	mu    sync.Mutex
	hwm   map[string]int64 // highest token seen per task: a counter below it means Redis lost data
	known map[string]bool  // tasks this client added to the task index
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
	cfg.Opts.DisableIdentity = true
	cfg.Opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// A call gives up at its ctx's deadline, not only at read_timeout (3s by default): Open's first
	// contact is bounded by store.Connecting, and a frozen server must not hold it longer.
	cfg.Opts.ContextTimeoutEnabled = true
	set := cfg.Opts.DialTimeout // the DSN's dial_timeout, 0 when not given
	s := &Store{c: goredis.NewClient(cfg.Opts), prefix: cfg.Prefix, addr: cfg.Opts.Addr, hwm: map[string]int64{}, known: map[string]bool{}}
	s.Ledger = kvledger.Ledger{KV: kv{s}}
	cctx, cancel, bound := store.Connecting(ctx, set)
	defer cancel()
	if err := s.init(cctx); err != nil {
		_ = s.c.Close()
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, store.Unreached("redis at "+s.addr, bound)
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
	if _, err := s.c.SetNX(ctx, key, fresh, 0).Result(); err != nil {
		return s.mapErr(err)
	}
	epoch, err := s.c.Get(ctx, key).Result()
	if err != nil {
		return s.mapErr(err)
	}
	s.epoch = epoch
	s.checkPersistence(ctx)
	return nil
}

// checkPersistence warns (store.Warn: once per process and server) when Redis would not keep the
// ledger across a restart. CONFIG may be disabled (managed Redis): then nothing is said.
func (s *Store) checkPersistence(ctx context.Context) {
	if _, done := checked.LoadOrStore(s.addr, true); done {
		return
	}
	m, err := s.c.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return
	}
	if lvl, msg := durability(m); lvl != store.LevelOK {
		store.Warn("durability", durabilityMessage(s.addr, msg))
	}
}

// checked remembers the servers whose persistence this process asked about (one CONFIG GET each).
var checked sync.Map

// Close closes the connection pool. Leases are not released.
func (s *Store) Close() error { return s.c.Close() }

// key names a prefix-wide key; tkey names a key of task, hash-tagged by task.
func (s *Store) key(name string) string { return "{" + s.prefix + "}:" + name }
func (s *Store) tkey(task, name string) string {
	return "{" + s.prefix + ":" + escape(task) + "}:" + name
}

// escape keeps task names from closing the hash tag early.
func escape(s string) string {
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(s)
}

// indexed reports whether this client already added task to the task index.
func (s *Store) indexed(task string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[task]
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
	}
	return fmt.Errorf("%w: redis at %s: %s", store.ErrUnavailable, s.addr, strings.ReplaceAll(msg, "\n", " "))
}

// check is the ledger-loss guard shared by the scripts. KEYS[1] is the task's counter hash, KEYS[2]
// its lease key, KEYS[3] its slot set; ARGV[1] the prefix epoch, ARGV[2] the highest token this
// client saw. It returns the counter (0 when none) or raises "LOST".
const check = `
local function check()
  local f = redis.call('HMGET', KEYS[1], 'n', 'e')
  local n = tonumber(f[1])
  if n == nil then
    if tonumber(ARGV[2]) > 0 or redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
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

// acquire: ARGV[3] holder, ARGV[4] run id, ARGV[5] ttl in ms. Returns {'OK'|'BUSY', value}.
var acquireScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if cur then
  if tonumber(cjson.decode(cur).t) > n then return redis.error_reply('LOST') end
  return {'BUSY', cur}
end
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[1], 'e', ARGV[1])
local t = now()
local ttl = tonumber(ARGV[5])
local v = cjson.encode({t = string.format('%d', n), h = ARGV[3], r = ARGV[4],
  a = string.format('%d', t), x = string.format('%d', t + ttl * 1000)})
redis.call('SET', KEYS[2], v, 'NX', 'PX', ttl)
return {'OK', v}
`)

// renew: ARGV[3] holder, ARGV[4] token, ARGV[5] ttl in ms.
var renewScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'NOTHELD'} end
local c = cjson.decode(cur)
if c.h ~= ARGV[3] or c.t ~= ARGV[4] then return {'NOTHELD'} end
local ttl = tonumber(ARGV[5])
c.x = string.format('%d', now() + ttl * 1000)
local v = cjson.encode(c)
redis.call('SET', KEYS[2], v, 'XX', 'PX', ttl)
return {'OK', v}
`)

// release: ARGV[3] holder, ARGV[4] token. An expired grant nobody replaced (the counter is still
// its token) releases fine.
var releaseScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if not cur then
  if string.format('%d', n) == ARGV[4] then return {'OK'} end
  return {'NOTHELD'}
end
local c = cjson.decode(cur)
if c.h ~= ARGV[3] or c.t ~= ARGV[4] then return {'NOTHELD'} end
redis.call('DEL', KEYS[2])
return {'OK'}
`)

// load: KEYS[4] the slot document. Returns {counter, now µs, version, doc}.
var loadScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
local d = {}
if KEYS[4] then d = redis.call('HMGET', KEYS[4], 'v', 'd') end
return {n, string.format('%d', now()), d[1] or false, d[2] or false}
`)

// save: KEYS[4] the slot document, KEYS[5] the task's waiting index (a sorted set of slots by
// the time they started waiting); ARGV[3] version read, ARGV[4] token (0: not fenced), ARGV[5]
// document, ARGV[6] slot name, ARGV[7] when the slot started waiting in µs (empty: it does not wait).
var saveScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
if ARGV[4] ~= '0' and string.format('%d', n) ~= ARGV[4] then return {'NOTHELD', n} end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'n', 0, 'e', ARGV[1]) end
local v = tonumber(redis.call('HGET', KEYS[4], 'v') or '0')
if v ~= tonumber(ARGV[3]) then return {'STALE'} end
redis.call('HSET', KEYS[4], 'v', v + 1, 'd', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[6])
if ARGV[7] ~= '' then redis.call('ZADD', KEYS[5], ARGV[7], ARGV[6]) else redis.call('ZREM', KEYS[5], ARGV[6]) end
return {'OK'}
`)

// forget: KEYS[4] the slot document, KEYS[5] the task's waiting index; ARGV[3] version read,
// ARGV[4] slot name. Removes the document when it is still that version.
var forgetScript = goredis.NewScript(check + `
local n = check()
if type(n) == 'table' then return n end
local v = tonumber(redis.call('HGET', KEYS[4], 'v') or '0')
if v ~= tonumber(ARGV[3]) then return {'STALE'} end
redis.call('DEL', KEYS[4])
redis.call('SREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[5], ARGV[4])
return {'OK'}
`)

func (s *Store) taskKeys(task string) []string {
	return []string{s.tkey(task, "fence"), s.tkey(task, "lease"), s.tkey(task, "slots")}
}

func (s *Store) run(ctx context.Context, sc *goredis.Script, task string, keys []string, args ...any) ([]any, error) {
	args = append([]any{s.epoch, s.seen(task)}, args...)
	r, err := sc.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return nil, s.mapErr(err)
	}
	return r, nil
}

type leaseValue struct {
	T string `json:"t"`
	H string `json:"h"`
	R string `json:"r"`
	A string `json:"a"`
	X string `json:"x"`
}

func decodeLease(task string, v any) (store.Lease, error) {
	s, _ := v.(string)
	var lv leaseValue
	if err := json.Unmarshal([]byte(s), &lv); err != nil {
		return store.Lease{}, fmt.Errorf("%w: corrupt lease of task %q: %v", store.ErrUnavailable, task, err)
	}
	tok, err1 := strconv.ParseInt(lv.T, 10, 64)
	a, err2 := strconv.ParseInt(lv.A, 10, 64)
	x, err3 := strconv.ParseInt(lv.X, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return store.Lease{}, fmt.Errorf("%w: corrupt lease of task %q: %v", store.ErrUnavailable, task, err)
	}
	return store.Lease{Task: task, Holder: lv.H, RunID: lv.R, Token: tok, Acquired: time.UnixMicro(a), Expires: time.UnixMicro(x)}, nil
}

func ttlMillis(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Millisecond-1)/time.Millisecond))
}

// Acquire grants req.Task's lease when it is free: one round trip (the script and the task index
// are pipelined). See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if req.TTL < time.Millisecond {
		return store.Lease{}, fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	keys := s.taskKeys(req.Task)
	args := []any{s.epoch, s.seen(req.Task), req.Holder, req.RunID, ttlMillis(req.TTL)}
	var res *goredis.Cmd
	if s.indexed(req.Task) {
		res = acquireScript.Run(ctx, s.c, keys, args...)
	} else { // first acquire of the task by this client: index it in the same round trip
		p := s.c.Pipeline()
		add := p.SAdd(ctx, s.key("tasks"), req.Task)
		res = acquireScript.EvalSha(ctx, p, keys, args...)
		_, _ = p.Exec(ctx)
		if err := res.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			res = acquireScript.Run(ctx, s.c, keys, args...)
		}
		if add.Err() == nil {
			s.mu.Lock()
			s.known[req.Task] = true
			s.mu.Unlock()
		}
	}
	r, err := res.Slice()
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	l, err := decodeLease(req.Task, r[1])
	if err != nil {
		return store.Lease{}, err
	}
	s.see(req.Task, l.Token)
	if r[0] == "BUSY" {
		return store.Lease{}, &store.BusyError{Lease: l}
	}
	return l, nil
}

// Renew extends l by ttl from now by Redis's clock. See store.Leaser.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	r, err := s.run(ctx, renewScript, l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10), ttlMillis(ttl))
	if err != nil {
		return store.Lease{}, err
	}
	if r[0] != "OK" {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d held by %q is no longer the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return decodeLease(l.Task, r[1])
}

// Release gives l up. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	r, err := s.run(ctx, releaseScript, l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10))
	if err != nil {
		return err
	}
	if r[0] != "OK" {
		return fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return nil
}

// epochOK fails with ErrLedgerLost when the prefix's epoch marker is gone or replaced.
func (s *Store) epochOK(cmd *goredis.StringCmd) error {
	e, err := cmd.Result()
	if errors.Is(err, goredis.Nil) || err == nil && e != s.epoch {
		return ErrLedgerLost
	}
	return s.mapErr(err)
}

// Leases lists the unexpired grants.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	p := s.c.Pipeline()
	ep := p.Get(ctx, s.key("epoch"))
	tasks := p.SMembers(ctx, s.key("tasks"))
	_, _ = p.Exec(ctx)
	if err := s.epochOK(ep); err != nil {
		return nil, err
	}
	names, err := tasks.Result()
	if err != nil {
		return nil, s.mapErr(err)
	}
	p = s.c.Pipeline()
	gets := make([]*goredis.StringCmd, len(names))
	for i, t := range names {
		gets[i] = p.Get(ctx, s.tkey(t, "lease"))
	}
	_, _ = p.Exec(ctx)
	out := []store.Lease{}
	for i, g := range gets {
		v, err := g.Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, s.mapErr(err)
		}
		l, err := decodeLease(names[i], v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Now returns Redis's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	t, err := s.c.Time(ctx).Result()
	return t, s.mapErr(err)
}

// --- ledger: internal/kvledger over the scripts ---

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvledger.Doc, kvledger.Version, time.Time, error) {
	s := k.s
	keys := append(s.taskKeys(task), s.tkey(task, "d:"+slot))
	r, err := s.run(ctx, loadScript, task, keys)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	n, _ := r[0].(int64)
	s.see(task, n)
	us, _ := strconv.ParseInt(fmt.Sprint(r[1]), 10, 64)
	now := time.UnixMicro(us)
	if r[3] == nil {
		return nil, 0, now, nil
	}
	ver, _ := strconv.ParseInt(fmt.Sprint(r[2]), 10, 64)
	d, err := kvledger.Unmarshal([]byte(fmt.Sprint(r[3])))
	return d, ver, now, err
}

func (k kv) Save(ctx context.Context, d *kvledger.Doc, ver kvledger.Version, token int64, run string) error {
	s := k.s
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		if err := s.c.Set(ctx, s.key("run:"+run), b, 0).Err(); err != nil {
			return s.mapErr(err)
		}
	}
	if ver == 0 {
		if err := s.c.SAdd(ctx, s.key("tasks"), d.Task).Err(); err != nil {
			return s.mapErr(err)
		}
	}
	keys := append(s.taskKeys(d.Task), s.tkey(d.Task, "d:"+d.Slot), s.tkey(d.Task, "waiting"))
	since := ""
	if t, ok := d.Waits(); ok {
		since = strconv.FormatInt(t.UnixMicro(), 10)
	}
	r, err := s.run(ctx, saveScript, d.Task, keys, ver, token, d.Marshal(), d.Slot, since)
	if err != nil {
		return err
	}
	switch r[0] {
	case "OK":
		return nil
	case "STALE":
		return kvledger.ErrStale
	}
	return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %v)", store.ErrNotHeld, token, d.Task, r[1])
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	s := k.s
	b, err := s.c.Get(ctx, s.key("run:"+runID)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return "", "", fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
	}
	if err != nil {
		return "", "", s.mapErr(err)
	}
	var ts [2]string
	if err := json.Unmarshal(b, &ts); err != nil {
		return "", "", fmt.Errorf("%w: corrupt run index for %q", store.ErrUnavailable, runID)
	}
	return ts[0], ts[1], nil
}

func (k kv) Latest(ctx context.Context, task string) (int64, error) {
	s := k.s
	r, err := s.run(ctx, loadScript, task, s.taskKeys(task))
	if err != nil {
		return 0, err
	}
	n, _ := r[0].(int64)
	s.see(task, n)
	return n, nil
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvledger.Doc, error) {
	s := k.s
	tasks := []string{task}
	if task == "" {
		p := s.c.Pipeline()
		ep := p.Get(ctx, s.key("epoch"))
		tc := p.SMembers(ctx, s.key("tasks"))
		_, _ = p.Exec(ctx)
		if err := s.epochOK(ep); err != nil {
			return nil, err
		}
		var err error
		if tasks, err = tc.Result(); err != nil {
			return nil, s.mapErr(err)
		}
	}
	var out []*kvledger.Doc
	for _, t := range tasks {
		slots, err := s.c.SMembers(ctx, s.tkey(t, "slots")).Result()
		if err != nil {
			return nil, s.mapErr(err)
		}
		p := s.c.Pipeline()
		cmds := make([]*goredis.StringCmd, len(slots))
		for i, sl := range slots {
			cmds[i] = p.HGet(ctx, s.tkey(t, "d:"+sl), "d")
		}
		_, _ = p.Exec(ctx)
		for _, c := range cmds {
			b, err := c.Bytes()
			if errors.Is(err, goredis.Nil) {
				continue
			}
			if err != nil {
				return nil, s.mapErr(err)
			}
			d, err := kvledger.Unmarshal(b)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// waitingIndexed marks the prefix's waiting indexes as built (kvledger.KV.Index).
func (s *Store) waitingIndexed() string { return s.key("waiting-indexed") }

// Waiting reads every task's waiting index (one pipelined round trip for the tasks, one for the
// indexes, one for the documents): it costs the tasks and the slots waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvledger.Doc, bool, error) {
	s := k.s
	p := s.c.Pipeline()
	ep := p.Get(ctx, s.key("epoch"))
	marked := p.Exists(ctx, s.waitingIndexed())
	tc := p.SMembers(ctx, s.key("tasks"))
	_, _ = p.Exec(ctx)
	if err := s.epochOK(ep); err != nil {
		return nil, false, err
	}
	if n, err := marked.Result(); err != nil || n == 0 {
		return nil, false, s.mapErr(err)
	}
	tasks, err := tc.Result()
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	p = s.c.Pipeline()
	idx := make([]*goredis.StringSliceCmd, len(tasks))
	for i, t := range tasks {
		idx[i] = p.ZRange(ctx, s.tkey(t, "waiting"), 0, -1)
	}
	_, _ = p.Exec(ctx)
	p = s.c.Pipeline()
	var cmds []*goredis.StringCmd
	for i, t := range tasks {
		slots, err := idx[i].Result()
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		for _, sl := range slots {
			cmds = append(cmds, p.HGet(ctx, s.tkey(t, "d:"+sl), "d"))
		}
	}
	if len(cmds) == 0 {
		return nil, true, nil
	}
	_, _ = p.Exec(ctx)
	var out []*kvledger.Doc
	for _, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		d, err := kvledger.Unmarshal(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, true, nil
}

// Index adds the waiting documents to their tasks' indexes and marks the indexes built.
func (k kv) Index(ctx context.Context, docs []*kvledger.Doc) error {
	s := k.s
	p := s.c.Pipeline()
	for _, d := range docs {
		if t, ok := d.Waits(); ok {
			p.ZAdd(ctx, s.tkey(d.Task, "waiting"), goredis.Z{Score: float64(t.UnixMicro()), Member: d.Slot})
		}
	}
	p.Set(ctx, s.waitingIndexed(), "1", 0)
	_, err := p.Exec(ctx)
	return s.mapErr(err)
}

// Delete removes the document (and its index entries) when it is still version ver.
func (k kv) Delete(ctx context.Context, d *kvledger.Doc, ver kvledger.Version) error {
	s := k.s
	keys := append(s.taskKeys(d.Task), s.tkey(d.Task, "d:"+d.Slot), s.tkey(d.Task, "waiting"))
	r, err := s.run(ctx, forgetScript, d.Task, keys, ver, d.Slot)
	if err != nil {
		return err
	}
	if r[0] == "STALE" {
		return kvledger.ErrStale
	}
	return nil
}

// Unrun removes run ids from the run index.
func (k kv) Unrun(ctx context.Context, runs []string) error {
	s := k.s
	if len(runs) == 0 {
		return nil
	}
	keys := make([]string, len(runs))
	for i, r := range runs {
		keys[i] = s.key("run:" + r)
	}
	p := s.c.Pipeline()
	for _, key := range keys { // one DEL per key: in Redis Cluster they live in different slots
		p.Del(ctx, key)
	}
	_, err := p.Exec(ctx)
	return s.mapErr(err)
}
