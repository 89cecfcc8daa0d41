package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
var createScript = lazyScript(`
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = redis.call('HSETNX', KEYS[1], ARGV[i], '{"c":' .. now .. ',' .. string.sub(ARGV[i + 1], 2))
end
return out
`)

// applyScript: ARGV is key, value read, new value (” deletes) triples; all or nothing.
var applyScript = lazyScript(`
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
	r, err := k.create(ctx, scope, args)
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
	r, err := kvstore.DecodeKeyRec(key, []byte(v))
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

func (k keyKV) Apply(ctx context.Context, scope string, ch []kvstore.KeyChange) (bool, error) {
	args := make([]any, 0, 3*len(ch))
	for _, c := range ch {
		nv := ""
		if c.Rec != nil {
			nv = string(c.Rec.Encode())
		}
		args = append(args, c.Key, c.Ver, nv)
	}
	n, err := applyScript().Run(ctx, k.s.c, []string{k.hash(scope)}, args...).Int64()
	if err != nil {
		return false, k.s.mapErr(err)
	}
	return n == 1, nil
}

func (k keyKV) Now(ctx context.Context) (time.Time, error)        { return k.s.Now(ctx) }
func (k keyKV) Leases(ctx context.Context) ([]store.Lease, error) { return k.s.Leases(ctx) }

// The scope index (store.ScopeLister): a sorted set of scope names, all of score 0, read from a
// name on with ZRANGEBYLEX. A client adds a scope the first time it claims in it, in the round trip
// of the claim (a pipeline). Scopes only an older once claimed in are added by the first Scopes
// call of this once, which scans the key space for the scopes' hashes once and then sets a marker;
// a scope an older once first claims in after that is missing from the index until this once
// claims in it too.

func (s *Store) scopesKey() string      { return s.key("k-scopes") }
func (s *Store) scopesBuiltKey() string { return s.key("k-scopes-built") }

// create runs createScript, in one pipeline with the scope's index entry the first time this
// client claims in scope. An error of the index write is not the claim's: the claim stands, and
// the next claim in the scope writes the entry again.
func (k keyKV) create(ctx context.Context, scope string, args []any) ([]int64, error) {
	keys := []string{k.hash(scope)}
	if k.s.scopeKnown(scope) {
		return createScript().Run(ctx, k.s.c, keys, args...).Int64Slice()
	}
	p := k.s.c.Pipeline()
	z := p.ZAddNX(ctx, k.s.scopesKey(), goredis.Z{Member: scope})
	c := createScript().EvalSha(ctx, p, keys, args...)
	_, _ = p.Exec(ctx)
	if z.Err() == nil {
		k.s.knowScope(scope)
	}
	if err := c.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		return createScript().Run(ctx, k.s.c, keys, args...).Int64Slice()
	}
	return c.Int64Slice()
}

// Scopes pages the scope index after the cursor, the page's last scope (store.ScopeLister):
// O(log n + limit).
func (k keyKV) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	from := "-"
	if cursor != "" {
		from = "(" + cursor
	}
	for built := false; ; built = true {
		p := k.s.c.Pipeline()
		marker := p.Exists(ctx, k.s.scopesBuiltKey())
		page := p.ZRangeByLex(ctx, k.s.scopesKey(), &goredis.ZRangeBy{Min: from, Max: "+", Count: int64(limit)})
		_, _ = p.Exec(ctx)
		if err := errors.Join(marker.Err(), page.Err()); err != nil {
			return nil, "", k.s.mapErr(err)
		}
		if built || marker.Val() == 1 {
			return page.Val(), store.NextCursor(page.Val(), limit, func(sc string) string { return sc }), nil
		}
		if err := k.indexScopes(ctx); err != nil {
			return nil, "", err
		}
	}
}

// indexScopes adds every scope that has a keys hash to the index, then sets the marker.
func (k keyKV) indexScopes(ctx context.Context) error {
	head, tail := "{"+k.s.prefix+":k:", "}:keys"
	var batch []goredis.Z
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := k.s.c.ZAddNX(ctx, k.s.scopesKey(), batch...).Err()
		batch = batch[:0]
		return err
	}
	err := k.s.scan(ctx, head+"*"+tail, func(key string) error {
		name := strings.TrimSuffix(strings.TrimPrefix(key, head), tail)
		batch = append(batch, goredis.Z{Member: unescape(name)})
		if len(batch) == 1000 {
			return flush()
		}
		return nil
	})
	if err := errors.Join(err, flush()); err != nil {
		return k.s.mapErr(err)
	}
	return k.s.mapErr(k.s.c.Set(ctx, k.s.scopesBuiltKey(), "1", 0).Err())
}

// Page reads about limit keys of scope with HSCAN from the cursor, HSCAN's own ("" for 0): a
// key may come twice while the hash grows, never not at all (store.ScopeLister). A small hash
// comes whole in one page.
func (k keyKV) Page(ctx context.Context, scope, cursor string, limit int) ([]string, []kvstore.KeyRec, string, error) {
	var at uint64
	if cursor != "" {
		var err error
		if at, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return nil, nil, "", fmt.Errorf("redis: keys page: cursor %q is not one a page returned: %w", cursor, store.ErrInvalid)
		}
	}
	kv, next, err := k.s.c.HScan(ctx, k.hash(scope), at, "", int64(limit)).Result()
	if err != nil {
		return nil, nil, "", k.s.mapErr(err)
	}
	keys, recs := make([]string, 0, len(kv)/2), make([]kvstore.KeyRec, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		r, err := kvstore.DecodeKeyRec(kv[i], []byte(kv[i+1]))
		if err != nil {
			return nil, nil, "", err
		}
		keys, recs = append(keys, kv[i]), append(recs, r)
	}
	nc := ""
	if next != 0 {
		nc = strconv.FormatUint(next, 10)
	}
	return keys, recs, nc, nil
}
