package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/store"
)

// Seats (AcquireRequest.Limit >= 2, once run --limit), as the SQL stores grant them
// (internal/sqlstore/seats.go). A seat is a field of the task's hash {P:task}:seats (KEYS[4]):
// token → JSON {t, h, r, a, x, l: limit}. Its token comes from the task's one counter, so the
// seats are current exactly while the counter is a seat's token: an exclusive grant bumps the
// counter past them (a replacing one deletes the hash; after a free one, the next seat acquire does). While a seat is live the lease key is their summary
// (the latest seat's value with `l` set, its expiry the latest seat's plus 1 ms), so the exclusive
// acquire — its script and an older once's — is busy, unchanged, while any seat is live. A seat
// stays in the hash, and its token passes the ledger fence, until a later seat acquire finds it
// expired.

// seatLua follows check: current(n) is true when the counter n is a seat's token; held(n) is the
// seat of token ARGV[4] held by ARGV[3], decoded, while the seats are current (nil when not);
// summarize(t, base) sets the lease key to base with the latest expiry of the live seats by t, or
// deletes it when none is live.
const seatLua = `
local function current(n)
  return n > 0 and redis.call('HEXISTS', KEYS[4], string.format('%d', n)) == 1
end
local function held(n)
  local v = current(n) and redis.call('HGET', KEYS[4], ARGV[4])
  if not v then return nil end
  local c = cjson.decode(v)
  if c.h ~= ARGV[3] then return nil end
  return c
end
local function summarize(t, base)
  local all = redis.call('HGETALL', KEYS[4])
  local x = 0
  for i = 2, #all, 2 do
    local sx = tonumber(cjson.decode(all[i]).x)
    if sx > t and sx > x then x = sx end
  end
  if x == 0 then
    redis.call('DEL', KEYS[2])
    return
  end
  base.x = string.format('%d', x)
  redis.call('SET', KEYS[2], cjson.encode(base), 'PX', math.floor((x - t + 999) / 1000) + 1)
end
`

// seatAcquire: ARGV[3] holder, ARGV[4] run id, ARGV[5] ttl in ms, ARGV[6] limit. Busy while an
// exclusive grant is live (the lease key is set and the seats are not current) or limit seats are
// live; else the expired seats go (their fence ends) and a seat is added. Replies as acquire.
var seatAcquireScript = lazyScript(check + seatLua + `
local n = check()
if type(n) == 'table' then return n end
local cur = redis.call('GET', KEYS[2])
if cur and tonumber(cjson.decode(cur).t) > n then return redis.error_reply('LOST') end
local t = now()
if not current(n) then
  if cur then return {'BUSY', cur} end
  redis.call('DEL', KEYS[4])
else
  local all = redis.call('HGETALL', KEYS[4])
  local live, one, gone = 0, nil, {}
  for i = 1, #all, 2 do
    if tonumber(cjson.decode(all[i + 1]).x) > t then
      live, one = live + 1, all[i + 1]
    else
      gone[#gone + 1] = all[i]
    end
  end
  if live >= tonumber(ARGV[6]) then return {'BUSY', cur or one} end
  if #gone > 0 then redis.call('HDEL', KEYS[4], unpack(gone)) end
end
if n == 0 then redis.call('HSET', KEYS[1], 'e', ARGV[1], 'r', '1') end
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local ttl = tonumber(ARGV[5])
local seat = {t = string.format('%d', n), h = ARGV[3], r = ARGV[4], a = string.format('%d', t),
  x = string.format('%d', t + ttl * 1000), l = ARGV[6]}
redis.call('HSET', KEYS[4], seat.t, cjson.encode(seat))
summarize(t, seat)
return {'OK', n, t}
`)

// seatRenew: ARGV[3] holder, ARGV[4] token, ARGV[5] ttl in ms. Returns {'OK', value} or
// {'NOTHELD'} (no such current seat of the holder, or it expired).
var seatRenewScript = lazyScript(check + seatLua + `
local n = check()
if type(n) == 'table' then return n end
local c, t = held(n), now()
if not c or tonumber(c.x) <= t then return {'NOTHELD'} end
c.x = string.format('%d', t + tonumber(ARGV[5]) * 1000)
local v = cjson.encode(c)
redis.call('HSET', KEYS[4], ARGV[4], v)
local cur = redis.call('GET', KEYS[2])
summarize(t, cur and cjson.decode(cur) or c)
return {'OK', v}
`)

// seatRelease: ARGV[3] holder, ARGV[4] token. The seat expires now but stays (an expired seat
// nobody pruned releases fine, like the exclusive grant); the summary shrinks to the other live
// seats, or goes.
var seatReleaseScript = lazyScript(check + seatLua + `
local n = check()
if type(n) == 'table' then return n end
local c = held(n)
if not c then return {'NOTHELD'} end
local t = now()
if tonumber(c.x) > t then
  c.x = string.format('%d', t)
  redis.call('HSET', KEYS[4], ARGV[4], cjson.encode(c))
end
local cur = redis.call('GET', KEYS[2])
summarize(t, cur and cjson.decode(cur) or c)
return {'OK'}
`)

// grants: {counter[, seat token, 1 when live else 0]...}, the seats only while they are current
// (kvstore.Grants).
var grantsScript = lazyScript(check + seatLua + `
local n = check()
if type(n) == 'table' then return n end
local out = {n}
if current(n) then
  local t = now()
  local all = redis.call('HGETALL', KEYS[4])
  for i = 1, #all, 2 do
    out[#out + 1] = all[i]
    out[#out + 1] = tonumber(cjson.decode(all[i + 1]).x) > t and 1 or 0
  end
end
return out
`)

func (s *Store) renewSeat(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	r, err := s.run(ctx, seatRenewScript(), l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10), ttlMillis(ttl))
	if err != nil {
		return store.Lease{}, err
	}
	if r[0] != "OK" {
		return store.Lease{}, notSeat(l)
	}
	return decodeLease(l.Task, r[1])
}

func (s *Store) releaseSeat(ctx context.Context, l store.Lease) error {
	r, err := s.run(ctx, seatReleaseScript(), l.Task, s.taskKeys(l.Task), l.Holder, strconv.FormatInt(l.Token, 10))
	if err != nil {
		return err
	}
	if r[0] != "OK" {
		return notSeat(l)
	}
	return nil
}

func notSeat(l store.Lease) error {
	return fmt.Errorf("%w: task %q token %d held by %q is not a current seat", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// liveSeats reads the seats of the tasks whose lease key is a summary, in one pipelined round
// trip with Redis's clock, and returns the live ones.
func (s *Store) liveSeats(ctx context.Context, tasks []string) ([]store.Lease, error) {
	p := s.c.Pipeline()
	clock := p.Time(ctx)
	all := make([]*goredis.MapStringStringCmd, len(tasks))
	for i, t := range tasks {
		all[i] = p.HGetAll(ctx, s.tkey(t, "seats"))
	}
	_, _ = p.Exec(ctx)
	now, err := clock.Result()
	if err != nil {
		return nil, s.mapErr(err)
	}
	var out []store.Lease
	for i, c := range all {
		m, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, s.mapErr(err)
		}
		var ls []store.Lease
		for _, v := range m {
			l, err := decodeLease(tasks[i], v)
			if err != nil {
				return nil, err
			}
			if l.Expires.After(now) {
				ls = append(ls, l)
			}
		}
		sort.Slice(ls, func(a, b int) bool { return ls[a].Token < ls[b].Token })
		out = append(out, ls...)
	}
	return out, nil
}
