package etcd

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// Business idempotency keys (store.Keys) through internal/kvstore: one etcd key per idempotency key,
// /once/<prefix>/k/<scope>/<key> (both path-escaped), holding the record's JSON.
//
// etcd transactions are all-or-nothing and take at most 128 operations (--max-txn-ops), so a claim
// goes in batches of 128 and claims per key inside a batch like this: one transaction compares
// create_revision == 0 for every key of the batch, puts them all on success and, on failure, reads
// them all (its failure branch). All new: one round trip. Otherwise the keys read are the old ones
// and the next transaction does the same on the rest: 100% duplicates costs two round trips, a mix
// two (three or more only when other claimers create keys of the batch in between). Reads are one
// transaction of ranges per batch; writes compare each record's mod revision.
//
// etcd has no clock a client can read: claim times and the expiry of pending claims with a TTL
// are judged by the clock of the client (as the etcd store's Leases does); a run claimant is gone
// when its task's lease key is gone or has another create revision, which etcd decides.

var _ store.Keys = (*Store)(nil)

type keyKV struct{ s *Store }

func (k keyKV) dir(scope string) string              { return k.s.p + "k/" + esc(scope) + "/" }
func (k keyKV) path(scope, key string) string        { return k.dir(scope) + esc(key) }
func (keyKV) Batch() int                             { return 128 }
func (keyKV) Now(context.Context) (time.Time, error) { return time.Now(), nil }
func (k keyKV) Leases(ctx context.Context) ([]store.Lease, error) {
	return k.s.Leases(ctx)
}

// createRounds bounds the transactions one batch takes when other claimers keep creating its keys.
const createRounds = 16

func (k keyKV) Create(ctx context.Context, scope string, keys []string, recs []kvstore.KeyRec) ([]bool, error) {
	now := time.Now().UnixMicro()
	out := make([]bool, len(keys))
	todo := make([]int, len(keys))
	for i := range todo {
		todo[i] = i
	}
	for round := 0; len(todo) > 0; round++ {
		if round == createRounds {
			return nil, errors.New("etcd: other claimers kept creating keys of this batch; retry")
		}
		t := txnReq{}
		for _, i := range todo {
			p := k.path(scope, keys[i])
			r := recs[i]
			if r.Claimed == 0 {
				r.Claimed = now
			}
			t.Compare = append(t.Compare, cmpCreate(p, 0))
			t.Success = append(t.Success, opPut(p, string(r.Encode()), 0))
			t.Failure = append(t.Failure, opGet(p))
		}
		r, err := k.s.c.txn(ctx, t)
		if err != nil {
			return nil, k.s.mapErr(err)
		}
		if r.Succeeded {
			for _, i := range todo {
				out[i] = true
			}
			return out, nil
		}
		var rest []int
		for j, i := range todo {
			if j >= len(r.Responses) || r.Responses[j].Range == nil || len(r.Responses[j].Range.Kvs) == 0 {
				rest = append(rest, i)
			}
		}
		todo = rest
	}
	return out, nil
}

func (k keyKV) decode(m map[string]kvstore.StoredKey, key string, kv keyValue) error {
	r, err := kvstore.DecodeKeyRec(key, kv.Value)
	if err != nil {
		return err
	}
	m[key] = kvstore.StoredKey{Rec: r, Ver: strconv.FormatInt(int64(kv.ModRevision), 10)}
	return nil
}

func (k keyKV) Get(ctx context.Context, scope string, keys []string) (map[string]kvstore.StoredKey, error) {
	t := txnReq{}
	for _, key := range keys {
		t.Success = append(t.Success, opGet(k.path(scope, key)))
	}
	r, err := k.s.c.txn(ctx, t)
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	m := make(map[string]kvstore.StoredKey, len(keys))
	for j, key := range keys {
		if j < len(r.Responses) && r.Responses[j].Range != nil && len(r.Responses[j].Range.Kvs) > 0 {
			if err := k.decode(m, key, r.Responses[j].Range.Kvs[0]); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

var _ kvstore.KeyNamesKV = keyKV{}

// namesPage is how many names one range of Names reads. A range with a limit still counts the
// rest of the range on the server (etcd-io/etcd#11057), so the pages are few and large; one range
// of 500,000 names whole peaked at 180 MB in the client (each answer's key-values decoded at once).
const namesPage = 50000

// Names lists the scope's key names with keys-only ranges of namesPage (kvstore.KeyNamesKV):
// Forget then reads the records a batch at a time. Pages of 5,000 records (Page) made a forget of
// 500,000 keys quadratic on the server: 67 s, where listing them whole took 42 s.
func (k keyKV) Names(ctx context.Context, scope string) ([]string, error) {
	dir := k.dir(scope)
	from := []byte(dir)
	var names []string
	for {
		r, err := k.s.c.rng(ctx, rangeReq{Key: from, RangeEnd: prefixEnd(dir), Limit: namesPage, KeysOnly: true})
		if err != nil {
			return nil, k.s.mapErr(err)
		}
		for _, kv := range r.Kvs {
			if key, err := url.PathUnescape(string(kv.Key[len(dir):])); err == nil {
				names = append(names, key)
			}
		}
		if len(r.Kvs) < namesPage {
			return names, nil
		}
		from = append(slices.Clone(r.Kvs[len(r.Kvs)-1].Key), 0)
	}
}

func (k keyKV) Apply(ctx context.Context, scope string, ch []kvstore.KeyChange) (bool, error) {
	t := txnReq{}
	for _, c := range ch {
		p := k.path(scope, c.Key)
		rev, err := strconv.ParseInt(c.Ver, 10, 64)
		if err != nil {
			return false, err
		}
		t.Compare = append(t.Compare, cmpMod(p, rev))
		if c.Rec == nil {
			t.Success = append(t.Success, opDel(p, false))
		} else {
			t.Success = append(t.Success, opPut(p, string(c.Rec.Encode()), 0))
		}
	}
	r, err := k.s.c.txn(ctx, t)
	if err != nil {
		return false, k.s.mapErr(err)
	}
	return r.Succeeded, nil
}

// scopeStep is how many key names one read of Scopes takes: the keys of small scopes come in one
// read, and a large scope costs one read, after which the next read starts past it.
const scopeStep = 256

// Scopes steps through the keys' names (no values) from the cursor, the escaped name of the page's
// last scope, skipping each scope's keys once its name is known: a page costs a read per scope
// with many keys, at most, whatever their number (store.ScopeLister). The order is that of the
// escaped names.
func (k keyKV) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	root := k.s.p + "k/"
	from := []byte(root)
	if cursor != "" {
		from = prefixEnd(root + cursor + "/")
	}
	var out, escaped []string
	for len(out) < limit {
		r, err := k.s.c.rng(ctx, rangeReq{Key: from, RangeEnd: prefixEnd(root), Limit: scopeStep, KeysOnly: true})
		if err != nil {
			return nil, "", k.s.mapErr(err)
		}
		last := ""
		for _, kv := range r.Kvs {
			name, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
			if !ok || name == last {
				continue
			}
			last = name
			sc, err := url.PathUnescape(name)
			if err != nil {
				continue
			}
			out, escaped = append(out, sc), append(escaped, name)
			if len(out) == limit {
				break
			}
		}
		if len(r.Kvs) < scopeStep || len(out) == limit {
			break
		}
		from = prefixEnd(root + last + "/")
	}
	return out, store.NextCursor(escaped, limit, func(e string) string { return e }), nil
}

// Page reads limit keys of scope with their records, from past the cursor, the escaped name of
// the page's last key (store.ScopeLister).
func (k keyKV) Page(ctx context.Context, scope, cursor string, limit int) ([]string, []kvstore.KeyRec, string, error) {
	dir := k.dir(scope)
	from := []byte(dir)
	if cursor != "" {
		from = append([]byte(dir+cursor), 0)
	}
	r, err := k.s.c.rng(ctx, rangeReq{Key: from, RangeEnd: prefixEnd(dir), Limit: i64(limit)})
	if err != nil {
		return nil, nil, "", k.s.mapErr(err)
	}
	keys, recs := make([]string, 0, len(r.Kvs)), make([]kvstore.KeyRec, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		key, err := url.PathUnescape(string(kv.Key[len(dir):]))
		if err != nil {
			continue
		}
		rec, err := kvstore.DecodeKeyRec(key, kv.Value)
		if err != nil {
			return nil, nil, "", err
		}
		keys, recs = append(keys, key), append(recs, rec)
	}
	next := ""
	if len(r.Kvs) == limit {
		next = string(r.Kvs[len(r.Kvs)-1].Key[len(dir):])
	}
	return keys, recs, next, nil
}
