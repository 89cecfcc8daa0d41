package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// Business idempotency keys (store.Keys) through internal/kvstore: one hash per scope, hash-tagged
// by scope ({prefix:k:scope}:keys), field = key, value = the record's JSON. A batch of up to 1,000
// keys is claimed by one script (HSETNX per key, stamped with Redis's TIME): one round trip. Every
// other operation reads with HMGET and writes with a script that compares the values read (a
// compare-and-set on the whole record). Keys do not take part in the ledger-loss guard: a Redis
// without persistence forgets claimed keys on restart.

var _ store.Keys = (*Store)(nil)

type keyKV struct{ s *Store }

func (k keyKV) hash(scope string) string { return "{" + k.s.prefix + ":k:" + escape(scope) + "}:keys" }

func (keyKV) Batch() int { return 1000 }

// createScript: ARGV is key, record pairs; each record is JSON starting with `{"s"` and without a
// claim time, which the script puts in front from TIME. Returns 1 per created key, 0 per old one.
var createScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = redis.call('HSETNX', KEYS[1], ARGV[i], '{"c":' .. now .. ',' .. string.sub(ARGV[i + 1], 2))
end
return out
`)

// applyScript: ARGV is key, value read, new value (” deletes) triples; all or nothing.
var applyScript = goredis.NewScript(`
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then return 0 end
end
for i = 1, #ARGV, 3 do
  if ARGV[i + 2] == '' then redis.call('HDEL', KEYS[1], ARGV[i]) else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2]) end
end
return 1
`)

func (k keyKV) Create(ctx context.Context, scope string, keys []string, recs []kvstore.KeyRec) ([]bool, error) {
	args := make([]any, 0, 2*len(keys))
	for i, key := range keys {
		if recs[i].Claimed != 0 {
			return nil, errors.New("redis: internal error: Create takes unstamped records")
		}
		args = append(args, key, recs[i].Encode())
	}
	r, err := createScript.Run(ctx, k.s.c, []string{k.hash(scope)}, args...).Int64Slice()
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	out := make([]bool, len(keys))
	for i := range out {
		out[i] = i < len(r) && r[i] == 1
	}
	return out, nil
}

func (k keyKV) decode(m map[string]kvstore.StoredKey, key, v string) error {
	r, err := kvstore.DecodeKeyRec([]byte(v))
	if err != nil {
		return err
	}
	m[key] = kvstore.StoredKey{Rec: r, Ver: v}
	return nil
}

func (k keyKV) Get(ctx context.Context, scope string, keys []string) (map[string]kvstore.StoredKey, error) {
	vs, err := k.s.c.HMGet(ctx, k.hash(scope), keys...).Result()
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	m := make(map[string]kvstore.StoredKey, len(keys))
	for i, v := range vs {
		if str, ok := v.(string); ok {
			if err := k.decode(m, keys[i], str); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (k keyKV) List(ctx context.Context, scope string) (map[string]kvstore.StoredKey, error) {
	all, err := k.s.c.HGetAll(ctx, k.hash(scope)).Result()
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	m := make(map[string]kvstore.StoredKey, len(all))
	for key, v := range all {
		if err := k.decode(m, key, v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (k keyKV) Apply(ctx context.Context, scope string, ch []kvstore.KeyChange) (bool, error) {
	args := make([]any, 0, 3*len(ch))
	for _, c := range ch {
		nv := ""
		if c.Rec != nil {
			nv = string(c.Rec.Encode())
		}
		args = append(args, c.Key, c.Ver, nv)
	}
	n, err := applyScript.Run(ctx, k.s.c, []string{k.hash(scope)}, args...).Int64()
	if err != nil {
		return false, k.s.mapErr(err)
	}
	return n == 1, nil
}

func (k keyKV) Now(ctx context.Context) (time.Time, error)        { return k.s.Now(ctx) }
func (k keyKV) Leases(ctx context.Context) ([]store.Lease, error) { return k.s.Leases(ctx) }
