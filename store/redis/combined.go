package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// A run in three round trips: Start (the lease, the running index and the slot's document in one
// script), Begin (the document written from that read, pipelined with the run index's SET) and
// FinishRelease (the outcome and the release in one script). kvstore holds the logic.

var (
	_ store.Starter     = (*Store)(nil)
	_ store.Finisher    = (*Store)(nil)
	_ kvstore.StartKV   = kv{}
	_ kvstore.FinishKV  = kv{}
	_ kvstore.RunningKV = kv{}
	_ kvstore.KV        = kv{}
)

// start: grant's KEYS and ARGV (an exclusive acquire, never a replacement), KEYS[5] the slot's
// document, KEYS[6] the task's running index. Returns {'BUSY', value}, or {'OK', token, acquired
// µs, whether the running index is built, how many slots it lists, the document's version, the
// document}.
var startScript = lazyScript(check + grant + startLua)

const startLua = `
local n = check()
if type(n) == 'table' then return n end
local cur, _, t = take(n)
if cur then
  if tonumber(cjson.decode(cur).t) > n then return redis.error_reply('LOST') end
  return {'BUSY', cur}
end
n = bump(n)
local d = redis.call('HMGET', KEYS[5], 'v', 'd')
return {'OK', n, t, redis.call('HGET', KEYS[1], 'r') or false, redis.call('SCARD', KEYS[6]), d[1] or false, d[2] or false}
`

// saveRelease: write's KEYS and ARGV, ARGV[4] the token, ARGV[9] the holder. The document is
// written and the exclusive grant released together, or neither: the token must be the counter
// (the latest grant), and the lease key, when it has not expired, that grant's.
var saveReleaseScript = lazyScript(check + write + `
local n = check()
if type(n) == 'table' then return n end
if string.format('%d', n) ~= ARGV[4] then return {'NOTHELD', n} end
local cur = redis.call('GET', KEYS[2])
if cur then
  local c = cjson.decode(cur)
  if c.h ~= ARGV[9] or c.t ~= ARGV[4] or c.l then return {'NOTHELD', n} end
end
if not write() then return {'STALE'} end
if cur then redis.call('DEL', KEYS[2]) end
return {'OK'}
`)

// indexRunning: KEYS[1] the task's counter hash, KEYS[2] its running index; ARGV the slots with a
// running attempt. Marks the index built ('r'), on a task that has a counter.
var indexRunningScript = lazyScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 1, #ARGV do redis.call('SADD', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'r', '1')
return 1
`)

func (k kv) AcquireRead(ctx context.Context, req store.AcquireRequest, slot string) (store.Lease, kvstore.Snapshot, error) {
	s := k.s
	if err := checkAcquire(req); err != nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	keys := append(s.taskKeys(req.Task), s.tkey(req.Task, "d:"+slot), s.tkey(req.Task, "running"))
	args := s.grantArgs(req, "0")
	res, unacked, err := s.sendAcquire(ctx, startScript(), req.Task, keys, args)
	if res == nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	r, err := res.Slice()
	if err != nil {
		return store.Lease{}, kvstore.Snapshot{}, s.mapErr(err)
	}
	l, err := s.granted(req, r, 0)
	if err != nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	release := func(err error) (store.Lease, kvstore.Snapshot, error) {
		// The grant is not handed out (the token is spent): given back, or left to expire.
		if rerr := s.Release(context.WithoutCancel(ctx), l); rerr != nil {
			err = fmt.Errorf("%w (and the lease was not released: %v)", err, rerr)
		}
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	if unacked != nil { // a grant a failover could lose
		return release(unacked)
	}
	count, ok := int64(0), len(r) == 7
	if ok {
		count, ok = r[4].(int64)
	}
	if !ok {
		return release(fmt.Errorf("%w: redis at %s: unexpected start reply %v", store.ErrUnavailable, s.addr, r))
	}
	snap := kvstore.Snapshot{Now: l.Acquired, Indexed: r[3] != nil, Running: int(count)}
	if r[6] != nil {
		if snap.Ver, err = strconv.ParseInt(fmt.Sprint(r[5]), 10, 64); err == nil {
			snap.Doc, err = kvstore.Unmarshal([]byte(fmt.Sprint(r[6])))
		}
		if err != nil {
			return release(err)
		}
	}
	return l, snap, nil
}

func (k kv) Release(ctx context.Context, l store.Lease) error { return k.s.Release(ctx, l) }

func (k kv) SaveRelease(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, l store.Lease) (kvstore.Version, error) {
	s := k.s
	args := append([]any{s.epoch, s.seen(d.Task), ver, strconv.FormatInt(l.Token, 10)}, docArgs(d)...)
	args = append(append(args, l.Holder), markArgs(d)...)
	res, unacked := s.durable(ctx, saveReleaseScript(), "ledger write", s.docKeys(d.Task, d.Slot), args...)
	if res == nil {
		return 0, unacked
	}
	r, err := res.Slice()
	if err != nil {
		return 0, s.mapErr(err)
	}
	switch r[0] {
	case "OK":
		return ver + 1, unacked
	case "STALE":
		return 0, kvstore.ErrStale
	}
	return 0, fmt.Errorf("%w: task %q token %d held by %q is not the latest grant (latest %v)", store.ErrNotHeld, l.Task, l.Token, l.Holder, r[1])
}

// Running reads the task's running index and the documents it lists: a pipelined round trip for
// the index and its mark, one for the documents.
func (k kv) Running(ctx context.Context, task string) ([]*kvstore.Doc, bool, error) {
	s := k.s
	p := s.c.Pipeline()
	mark := p.HGet(ctx, s.tkey(task, "fence"), "r")
	set := p.SMembers(ctx, s.tkey(task, "running"))
	_, _ = p.Exec(ctx)
	indexed := true
	if err := mark.Err(); errors.Is(err, goredis.Nil) {
		indexed = false
	} else if err != nil {
		return nil, false, s.mapErr(err)
	}
	slots, err := set.Result()
	if err != nil || len(slots) == 0 {
		return nil, indexed, s.mapErr(err)
	}
	p = s.c.Pipeline()
	cmds := make([]*goredis.StringCmd, len(slots))
	for i, sl := range slots {
		cmds[i] = p.HGet(ctx, s.tkey(task, "d:"+sl), "d")
	}
	_, _ = p.Exec(ctx)
	var out []*kvstore.Doc
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
			// Listed, but gone (a prune): an empty document takes the entry out (Ledger.Abandon).
			out = append(out, &kvstore.Doc{Task: task, Slot: slots[i]})
			continue
		}
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		d, err := kvstore.Unmarshal(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, indexed, nil
}

func (k kv) IndexRunning(ctx context.Context, task string, docs []*kvstore.Doc) error {
	s := k.s
	var slots []any
	for _, d := range docs {
		if d.Runs() {
			slots = append(slots, d.Slot)
		}
	}
	return s.mapErr(indexRunningScript().Run(ctx, s.c, []string{s.tkey(task, "fence"), s.tkey(task, "running")}, slots...).Err())
}
