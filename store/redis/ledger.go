package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// load: KEYS[5] the slot document. Returns {counter, now µs, version, doc}.
var loadScript = lazyScript(check + `
local n = check()
if type(n) == 'table' then return n end
local d = redis.call('HMGET', KEYS[5], 'v', 'd')
return {n, string.format('%d', now()), d[1] or false, d[2] or false}
`)

// write is the body shared by the scripts that write a slot's document: KEYS[5] the document,
// KEYS[6] the task's waiting index (a sorted set of slots by the time they started waiting),
// KEYS[7] its running index (the set of slots with a running attempt), KEYS[8] its history index
// (a sorted set of mark keys, all of score 0: read by lex range, kvstore.Mark); ARGV[3] the version
// read, ARGV[5] the document, ARGV[6] the slot's name, ARGV[7] when the slot started waiting in µs
// (empty: it does not wait), ARGV[8] '1' when the document has a running attempt, ARGV[10] and
// ARGV[11] how many marks the write adds and removes, and from ARGV[12] those marks (markArgs). It
// returns false, writing nothing, when the document is no longer that version.
const write = `
local function write()
  local v = tonumber(redis.call('HGET', KEYS[5], 'v') or '0')
  if v ~= tonumber(ARGV[3]) then return false end
  redis.call('HSET', KEYS[5], 'v', v + 1, 'd', ARGV[5])
  redis.call('SADD', KEYS[3], ARGV[6])
  if ARGV[7] ~= '' then redis.call('ZADD', KEYS[6], ARGV[7], ARGV[6]) else redis.call('ZREM', KEYS[6], ARGV[6]) end
  if ARGV[8] == '1' then redis.call('SADD', KEYS[7], ARGV[6]) else redis.call('SREM', KEYS[7], ARGV[6]) end
  local na, nd = tonumber(ARGV[10]), tonumber(ARGV[11])
  for i = 12, 11 + na do redis.call('ZADD', KEYS[8], 0, ARGV[i]) end
  for i = 12 + na, 11 + na + nd do redis.call('ZREM', KEYS[8], ARGV[i]) end
  return true
end
`

// save: write's KEYS and ARGV, and ARGV[4] the token (0: not fenced); with KEYS[9] (the run
// index's key of a run id, on one server: in a Cluster it is another slot's) ARGV[9] is its value,
// set with the document. The fence (kvstore.Grants.Current): the token is the counter, or a seat's
// while the seats are current (the counter is a seat's token: no exclusive grant came after them).
var saveScript = lazyScript(check + write + `
local n = check()
if type(n) == 'table' then return n end
local latest = string.format('%d', n)
if ARGV[4] ~= '0' and latest ~= ARGV[4] and
  (redis.call('HEXISTS', KEYS[4], ARGV[4]) == 0 or redis.call('HEXISTS', KEYS[4], latest) == 0) then
  return {'NOTHELD', n}
end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'n', 0, 'e', ARGV[1]) end
if not write() then return {'STALE'} end
if KEYS[9] then redis.call('SET', KEYS[9], ARGV[9]) end
return {'OK'}
`)

// forget: KEYS[5] the slot document, KEYS[6] the task's waiting index, KEYS[7] its running index,
// KEYS[8] its history index; ARGV[3] version read, ARGV[4] slot name, from ARGV[5] the document's
// marks. Removes the document and its marks when it is still that version.
var forgetScript = lazyScript(check + `
local n = check()
if type(n) == 'table' then return n end
local v = tonumber(redis.call('HGET', KEYS[5], 'v') or '0')
if v ~= tonumber(ARGV[3]) then return {'STALE'} end
redis.call('DEL', KEYS[5])
redis.call('SREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[6], ARGV[4])
redis.call('SREM', KEYS[7], ARGV[4])
for i = 5, #ARGV do redis.call('ZREM', KEYS[8], ARGV[i]) end
return {'OK'}
`)

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvstore.Doc, kvstore.Version, time.Time, error) {
	s := k.s
	keys := append(s.taskKeys(task), s.tkey(task, "d:"+slot))
	r, err := s.run(ctx, loadScript(), task, keys)
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
	d, err := kvstore.Unmarshal([]byte(fmt.Sprint(r[3])))
	return d, ver, now, err
}

// docKeys are the keys of the scripts that write (task, slot)'s document (write).
func (s *Store) docKeys(task, slot string) []string {
	return append(s.taskKeys(task), s.tkey(task, "d:"+slot), s.tkey(task, "waiting"), s.tkey(task, "running"), s.historyKey(task))
}

// markArgs are write's ARGV[10..]: the marks the write of d adds and removes.
func markArgs(d *kvstore.Doc) []any {
	add, del := d.MarkChanges()
	out := make([]any, 0, 2+len(add)+len(del))
	out = append(out, len(add), len(del))
	for _, k := range add {
		out = append(out, k)
	}
	for _, k := range del {
		out = append(out, k)
	}
	return out
}

// docArgs are write's ARGV[5..8] for d.
func docArgs(d *kvstore.Doc) []any {
	since, runs := "", "0"
	if t, ok := d.Waits(); ok {
		since = strconv.FormatInt(t.UnixMicro(), 10)
	}
	if d.Runs() {
		runs = "1"
	}
	return []any{d.Marshal(), d.Slot, since, runs}
}

// Save runs the save script, which also sets the run index's key of a run id on one server (one
// round trip); in a Cluster that key is another slot's, and is set first (two). With ?wait the
// script is followed by WAIT on its connection. On a task this client did not index yet the task
// index's script comes first.
func (k kv) Save(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, token int64, run string) (kvstore.Version, error) {
	s := k.s
	if ver == 0 && !s.indexed(d.Task) {
		if err := indexScript().Run(ctx, s.c, s.indexKeys(), d.Task).Err(); err != nil {
			return 0, s.mapErr(err)
		}
		s.markIndexed(d.Task)
	}
	args := append([]any{s.epoch, s.seen(d.Task), ver, token}, docArgs(d)...)
	keys := s.docKeys(d.Task, d.Slot)
	var runVal any = ""
	if run != "" {
		runKey := s.key("run:" + run)
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		if s.mode == ModeCluster {
			if err := s.c.Set(ctx, runKey, b, 0).Err(); err != nil {
				return 0, s.mapErr(err)
			}
		} else {
			keys, runVal = append(keys, runKey), b
		}
	}
	args = append(append(args, runVal), markArgs(d)...)
	res, unacked := s.durable(ctx, saveScript(), "ledger write", keys, args...)
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
	return 0, fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %v)", store.ErrNotHeld, token, d.Task, r[1])
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

func (k kv) Grants(ctx context.Context, task string) (kvstore.Grants, error) {
	s := k.s
	r, err := s.run(ctx, grantsScript(), task, s.taskKeys(task))
	if err != nil {
		return kvstore.Grants{}, err
	}
	n, _ := r[0].(int64)
	s.see(task, n)
	g := kvstore.Grants{Latest: n}
	for i := 1; i+1 < len(r); i += 2 {
		tok, err := strconv.ParseInt(fmt.Sprint(r[i]), 10, 64)
		if err != nil {
			return kvstore.Grants{}, fmt.Errorf("%w: corrupt seat of task %q: %v", store.ErrUnavailable, task, err)
		}
		if g.Seats == nil {
			g.Seats = map[int64]bool{}
		}
		g.Seats[tok] = r[i+1] == int64(1)
	}
	return g, nil
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvstore.Doc, error) {
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
	var out []*kvstore.Doc
	for _, t := range tasks {
		slots, err := s.c.SMembers(ctx, s.tkey(t, "slots")).Result()
		if err != nil {
			return nil, s.mapErr(err)
		}
		want := make([][2]string, len(slots))
		for i, sl := range slots {
			want[i] = [2]string{t, sl}
		}
		docs, err := k.LoadMany(ctx, want)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if d != nil { // gone since the slot set was read
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// waitingIndexed marks the prefix's waiting indexes as built (kvstore.KV.Index).
func (s *Store) waitingIndexed() string { return s.key("waiting-indexed") }

// Waiting reads every task's waiting index (one pipelined round trip for the tasks, one for the
// indexes, one for the documents): it costs the tasks and the slots waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvstore.Doc, bool, error) {
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
	var out []*kvstore.Doc
	for _, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, goredis.Nil) {
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
	return out, true, nil
}

// Index adds the waiting documents to their tasks' indexes and marks the indexes built.
func (k kv) Index(ctx context.Context, docs []*kvstore.Doc) error {
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
func (k kv) Delete(ctx context.Context, d *kvstore.Doc, ver kvstore.Version) error {
	s := k.s
	args := []any{ver, d.Slot}
	for _, k := range d.ReadMarks() {
		args = append(args, k)
	}
	r, err := s.run(ctx, forgetScript(), d.Task, s.docKeys(d.Task, d.Slot), args...)
	if err != nil {
		return err
	}
	if r[0] == "STALE" {
		return kvstore.ErrStale
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
