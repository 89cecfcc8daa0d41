package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
)

// grant is the body shared by the exclusive acquire scripts. ARGV[3] holder and ARGV[4] run id
// as JSON strings (jsonString), ARGV[5] ttl in ms, ARGV[7] the prefix epoch as a JSON string.
// take(n) sets the lease key, if it is free, to the grant of token n + 1 over counter n (check()'s)
// by Redis's clock: one SET NX GET answers whether it was free and, when not, with what (before
// Redis 7.0, NX with GET is a syntax error, and a GET and a SET do it). It returns the live value
// (nothing was written) or false, and the value, its time in µs and the ttl. bump(n) then moves
// the counter to the new token: the epoch is written with a new counter only (check() has just
// seen an existing one carry it), and with it the mark that the task's running index is built
// ('r': a new counter has no attempt to index).
//
// The value is written in one form (grantValue): JSON {t, h, r, a, x, e: the epoch}, which an
// older once and decodeLease read as before (e is new to them, and ignored). A release that
// sends the value it was granted finds it current from the value alone (releaseValueScript).
//
// Live seats keep the lease key set (their summary, seats.go), so the exclusive grant is busy
// while any is live. The counter's move ends the seats' fence (they are current only while it is a
// seat's token); the hash of the ended seats stays until the next seat acquire, which deletes it,
// as after an older once's grant (a replace deletes it at once).
const grant = `
local function take(n)
  local t = now()
  local ttl = tonumber(ARGV[5])
  local v = '{"t":"' .. string.format('%d', n + 1) .. '","h":' .. ARGV[3] .. ',"r":' .. ARGV[4] ..
    ',"a":"' .. string.format('%d', t) .. '","x":"' .. string.format('%d', t + ttl * 1000) .. '","e":' .. ARGV[7] .. '}'
  local cur = redis.pcall('SET', KEYS[2], v, 'NX', 'GET', 'PX', ttl)
  if type(cur) == 'table' then
    cur = redis.call('GET', KEYS[2])
    if not cur then redis.call('SET', KEYS[2], v, 'PX', ttl) end
  end
  return cur, v, t, ttl
end
local function bump(n)
  if n == 0 then redis.call('HSET', KEYS[1], 'e', ARGV[1], 'r', '1') end
  return redis.call('HINCRBY', KEYS[1], 'n', 1)
end
`

// acquire: grant's ARGV, and ARGV[6] '1' to replace a live grant (AcquireRequest.Replace).
// Returns {'BUSY', value} or {'OK', token, acquired µs[, replaced value[, live seats' tokens]]}:
// the caller knows the rest of the grant (holder, run id, expiry = acquired + ttl), so the value
// it would decode is not sent back. A replaced value that summarises seats comes with the tokens
// of the live seats the grant ends (store.Replacement).
var acquireScript = lazyScript(check + grant + acquireLua)

const acquireLua = `
local n = check()
if type(n) == 'table' then return n end
local cur, v, t, ttl = take(n)
local seats
if cur then
  local c = cjson.decode(cur)
  if tonumber(c.t) > n then return redis.error_reply('LOST') end
  if ARGV[6] ~= '1' then return {'BUSY', cur} end
  if c.l then
    seats = {}
    local all = redis.call('HGETALL', KEYS[4])
    for i = 2, #all, 2 do
      if tonumber(cjson.decode(all[i]).x) > t then seats[#seats + 1] = all[i - 1] end
    end
  end
  redis.call('SET', KEYS[2], v, 'PX', ttl)
  redis.call('DEL', KEYS[4])
end
n = bump(n)
if seats then return {'OK', n, t, cur, seats} end
if cur then return {'OK', n, t, cur} end
return {'OK', n, t}
`

// renew: ARGV[3] holder, ARGV[4] token, ARGV[5] ttl in ms, ARGV[6] the value the client holds
// (grantValue), ARGV[7] and ARGV[8] what comes before and after its expiry. That value is renewed
// in the same form (so that its release stays two calls); another (an older once's form) is
// decoded and written back by cjson, as before.
var renewScript = lazyScript(check + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if not cur then return {'NOTHELD'} end
local ttl = tonumber(ARGV[5])
local v
if cur == ARGV[6] then
  v = ARGV[7] .. string.format('%d', now() + ttl * 1000) .. ARGV[8]
else
  local c = cjson.decode(cur)
  if c.h ~= ARGV[3] or c.t ~= ARGV[4] or c.l then return {'NOTHELD'} end
  c.x = string.format('%d', now() + ttl * 1000)
  v = cjson.encode(c)
end
redis.call('SET', KEYS[2], v, 'XX', 'PX', ttl)
return {'OK', v}
`)

// releaseValue: KEYS[1] a task's lease key, ARGV[1] the value a grant was given (grantValue). It
// deletes the key, and returns 1, when it holds that value, as a peer lock's release does: the
// value names the token, the holder and this prefix's epoch, and the counter moved to that token
// in the script that set it. Else 0, and releaseScript decides.
var releaseValueScript = lazyScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// release: ARGV[3] holder, ARGV[4] token. An expired grant nobody replaced (the counter is still
// its token) releases fine.
var releaseScript = lazyScript(check + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if not cur then
  if string.format('%d', n) == ARGV[4] then return {'OK'} end
  return {'NOTHELD'}
end
local c = cjson.decode(cur)
if c.h ~= ARGV[3] or c.t ~= ARGV[4] or c.l then return {'NOTHELD'} end
redis.call('DEL', KEYS[2])
return {'OK'}
`)

// indexScript adds ARGV[1] to the task index: KEYS[1] the set of tasks (which Leases, Docs and
// Waiting read), KEYS[2] the same names in a sorted set of score 0, in byte order (Tasks). One
// script, so the sorted set never lacks a name the set has, but for names an older once added
// (Tasks then adds them). Both keys are the prefix's: one Cluster slot.
var indexScript = lazyScript(`
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
`)

// indexKeys are the keys of indexScript.
func (s *Store) indexKeys() []string { return []string{s.key("tasks"), s.key("task-names")} }

// taskKeys are KEYS[1..4] of every task script: check() reads them.
func (s *Store) taskKeys(task string) []string {
	return []string{s.tkey(task, "fence"), s.tkey(task, "lease"), s.tkey(task, "slots"), s.tkey(task, "seats")}
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
	L string `json:"l,omitempty"` // a seat's limit; on the lease key, marks the seats' summary
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
	var limit int
	var err4 error
	if lv.L != "" {
		limit, err4 = strconv.Atoi(lv.L)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return store.Lease{}, fmt.Errorf("%w: corrupt lease of task %q: %v", store.ErrUnavailable, task, err)
	}
	return store.Lease{Task: task, Holder: lv.H, RunID: lv.R, Token: tok, Acquired: time.UnixMicro(a), Expires: time.UnixMicro(x), Limit: limit}, nil
}

// grantArgs are the ARGV of grant's scripts for req; replace is ARGV[6].
func (s *Store) grantArgs(req store.AcquireRequest, replace string) []any {
	return []any{s.epoch, s.seen(req.Task), jsonString(req.Holder), jsonString(req.RunID), ttlMillis(req.TTL), replace, s.epochJSON}
}

// grantValue is the lease value grant writes for l, byte for byte, as what comes before its expiry
// (in µs) and what comes after.
func (s *Store) grantValue(l store.Lease) (before, after string) {
	before = `{"t":"` + strconv.FormatInt(l.Token, 10) + `","h":` + jsonString(l.Holder) + `,"r":` + jsonString(l.RunID) +
		`,"a":"` + strconv.FormatInt(l.Acquired.UnixMicro(), 10) + `","x":"`
	return before, `","e":` + s.epochJSON + `}`
}

// jsonString is str as a JSON string in the form grant's Lua concatenates: '"', '\' and the control
// characters below 0x20 escaped, every other byte as it is (as cjson writes them, invalid UTF-8
// included: decodeLease and cjson read it as before).
func jsonString(str string) string {
	var b strings.Builder
	b.Grow(len(str) + 2)
	b.WriteByte('"')
	for i := 0; i < len(str); i++ {
		switch c := str[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

const hexDigits = "0123456789abcdef"

func ttlMillis(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Millisecond-1)/time.Millisecond))
}

// Acquire grants req.Task's lease when it is free, or with req.Replace over a live grant (the
// value is overwritten in the same script), or with req.Limit >= 2 one of its seats (seats.go):
// one round trip (on a client's first acquire of the task, the task index's script is pipelined
// with it). See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if err := checkAcquire(req); err != nil {
		return store.Lease{}, err
	}
	sc, limit := acquireScript(), 0
	var args []any
	switch {
	case req.Limit >= 2:
		sc, limit = seatAcquireScript(), req.Limit
		args = []any{s.epoch, s.seen(req.Task), req.Holder, req.RunID, ttlMillis(req.TTL), strconv.Itoa(req.Limit)}
	case req.Replace:
		args = s.grantArgs(req, "1")
	default:
		args = s.grantArgs(req, "0")
	}
	res, unacked, err := s.sendAcquire(ctx, sc, req.Task, s.taskKeys(req.Task), args)
	if res == nil {
		return store.Lease{}, err
	}
	r, err := res.Slice()
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	l, err := s.granted(req, r, limit)
	if err != nil {
		return store.Lease{}, err
	}
	if unacked != nil {
		_ = s.Release(ctx, l) // a grant a failover could lose is not handed out; the token is spent
		return store.Lease{}, unacked
	}
	if len(r) >= 4 {
		old, err := decodeLease(req.Task, r[3])
		if err != nil {
			return store.Lease{}, err
		}
		tokens, err := replacedTokens(old, r[4:])
		if err != nil {
			_ = s.Release(ctx, l) // not handed out: the token is spent
			return store.Lease{}, fmt.Errorf("%w: redis at %s: acquire reply: %w", store.ErrUnavailable, s.addr, err)
		}
		l.Replaced = &store.Replacement{Lease: old, Tokens: tokens}
	}
	return l, nil
}

// replacedTokens reads the live seats' tokens an acquire with Replace sent after the value it
// replaced (seats), or is the replaced grant's token alone when it sent none.
func replacedTokens(old store.Lease, seats []any) ([]int64, error) {
	if len(seats) == 0 {
		return []int64{old.Token}, nil
	}
	list, ok := seats[0].([]any)
	if !ok {
		return nil, fmt.Errorf("seats %v are not a list", seats[0])
	}
	tokens := make([]int64, 0, len(list))
	for _, v := range list {
		str, ok := v.(string)
		t, err := strconv.ParseInt(str, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("seat token %v is not a number", v)
		}
		tokens = append(tokens, t)
	}
	slices.Sort(tokens)
	return tokens, nil
}

// granted reads an acquire script's reply r to req: {'BUSY', value} is the *store.BusyError,
// {'OK', token, acquired µs, …} the grant (of a seat of limit, when limit >= 2).
func (s *Store) granted(req store.AcquireRequest, r []any, limit int) (store.Lease, error) {
	if len(r) > 0 && r[0] == "BUSY" {
		if len(r) < 2 {
			return store.Lease{}, fmt.Errorf("%w: redis at %s: unexpected acquire reply %v", store.ErrUnavailable, s.addr, r)
		}
		l, err := decodeLease(req.Task, r[1])
		if err != nil {
			return store.Lease{}, err
		}
		s.see(req.Task, l.Token)
		return store.Lease{}, &store.BusyError{Lease: l}
	}
	var tok, a int64
	ok := len(r) >= 3 && r[0] == "OK"
	if ok {
		tok, ok = r[1].(int64)
	}
	if ok {
		a, ok = r[2].(int64)
	}
	if !ok {
		return store.Lease{}, fmt.Errorf("%w: redis at %s: unexpected acquire reply %v", store.ErrUnavailable, s.addr, r)
	}
	s.see(req.Task, tok)
	return store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: tok,
		Acquired: time.UnixMicro(a), Expires: time.UnixMicro(a + ttlMillis(req.TTL)*1000), Limit: limit}, nil
}

// sendAcquire runs an acquire script (sc): with ?wait, after indexing the task and followed by WAIT
// (unacked: the grant did not reach enough replicas); else in one round trip, pipelined with the
// task index's script on a client's first acquire of the task. A nil reply comes with its error.
func (s *Store) sendAcquire(ctx context.Context, sc *goredis.Script, task string, keys []string, args []any) (res *goredis.Cmd, unacked, err error) {
	switch {
	case s.wait > 0:
		if !s.indexed(task) {
			if err := indexScript().Run(ctx, s.c, s.indexKeys(), task).Err(); err != nil {
				return nil, nil, s.mapErr(err)
			}
			s.markIndexed(task)
		}
		res, err := s.durable(ctx, sc, "lease grant", keys, args...)
		if res == nil {
			return nil, nil, err
		}
		return res, err, nil
	case s.indexed(task):
		return sc.Run(ctx, s.c, keys, args...), nil, nil
	}
	p := s.c.Pipeline()
	add := indexScript().Eval(ctx, p, s.indexKeys(), task) // the body: no NOSCRIPT to recover from
	res = sc.EvalSha(ctx, p, keys, args...)
	_, _ = p.Exec(ctx)
	if err := res.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		res = sc.Run(ctx, s.c, keys, args...)
	}
	if add.Err() == nil {
		s.markIndexed(task)
	}
	return res, nil, nil
}

// Renew extends l by ttl from now by Redis's clock. See store.Leaser.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Limit >= 2 {
		return s.renewSeat(ctx, l, ttl)
	}
	before, after := s.grantValue(l)
	r, err := s.run(ctx, renewScript(), l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10), ttlMillis(ttl),
		before+strconv.FormatInt(l.Expires.UnixMicro(), 10)+after, before, after)
	if err != nil {
		return store.Lease{}, err
	}
	if r[0] != "OK" {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d held by %q is no longer the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return decodeLease(l.Task, r[1])
}

// Release gives l up: the grant this once wrote, unrenewed or renewed by this once, in one
// round trip of releaseValueScript (unless this client saw a later token of the task: the value
// alone cannot say then that the counter did not move back); any other, or when the value is not
// that (expired, or renewed in an older form), by releaseScript. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	if l.Limit >= 2 {
		return s.releaseSeat(ctx, l)
	}
	if l.Token >= s.seen(l.Task) {
		before, after := s.grantValue(l)
		v := before + strconv.FormatInt(l.Expires.UnixMicro(), 10) + after
		n, err := releaseValueScript().Run(ctx, s.c, []string{s.tkey(l.Task, "lease")}, v).Int64()
		if err != nil {
			return s.mapErr(err)
		}
		if n == 1 {
			return nil
		}
	}
	r, err := s.run(ctx, releaseScript(), l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10))
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

// Leases lists the unexpired grants: the lease keys, and the seats of the tasks whose key is their
// summary (one more round trip when there are any).
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
	var seated []string
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
		if l.Limit >= 2 {
			seated = append(seated, names[i])
			continue
		}
		out = append(out, l)
	}
	if len(seated) == 0 {
		return out, nil
	}
	seats, err := s.liveSeats(ctx, seated)
	return append(out, seats...), err
}

var _ store.TaskLister = (*Store)(nil)

// Tasks lists the task index from the name after on (store.TaskLister): ZRANGEBYLEX of the sorted
// set with LIMIT, O(log n + limit), in one MULTI with the epoch check and the sizes of the set and
// the sorted set. When they differ, an older once added tasks to the set alone (or the sorted set
// predates this once): one ZUNIONSTORE adds them, and the page is read again.
func (s *Store) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if err := store.CheckTasksPage(limit); err != nil {
		return nil, err
	}
	from := "-"
	if after != "" {
		from = "(" + after
	}
	keys := s.indexKeys()
	for indexed := false; ; indexed = true {
		p := s.c.TxPipeline()
		ep := p.Get(ctx, s.key("epoch"))
		set, sorted := p.SCard(ctx, keys[0]), p.ZCard(ctx, keys[1])
		page := p.ZRangeByLex(ctx, keys[1], &goredis.ZRangeBy{Min: from, Max: "+", Count: int64(limit)})
		_, _ = p.Exec(ctx)
		if err := s.epochOK(ep); err != nil {
			return nil, err
		}
		if err := errors.Join(set.Err(), sorted.Err(), page.Err()); err != nil {
			return nil, s.mapErr(err)
		}
		if indexed || set.Val() == sorted.Val() {
			return page.Val(), nil
		}
		if err := s.c.ZUnionStore(ctx, keys[1], &goredis.ZStore{Keys: []string{keys[1], keys[0]}, Weights: []float64{0, 0}}).Err(); err != nil {
			return nil, s.mapErr(err)
		}
	}
}

// Now returns Redis's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	t, err := s.c.Time(ctx).Result()
	return t, s.mapErr(err)
}

// lazyScript is a Lua script whose SHA-1 is computed on first use, not at package init: init runs
// in every once process, on every store.
func lazyScript(src string) func() *goredis.Script {
	return sync.OnceValue(func() *goredis.Script { return goredis.NewScript(src) })
}

// checkAcquire refuses what store.AcquireRequest.Check does, a bad Limit (store.CheckLimit) and a
// TTL below 1ms.
func checkAcquire(req store.AcquireRequest) error {
	if err := cmp.Or(req.Check(), store.CheckLimit(req)); err != nil {
		return err
	}
	if req.TTL < time.Millisecond {
		return fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	return nil
}
