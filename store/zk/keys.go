package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// Business idempotency keys (store.Keys) through internal/kvstore: one persistent znode per key,
// /once/<prefix>/k/<scope>/<key> (names escaped), holding the record's JSON. A claim is one multi of
// creates per batch of 256 keys (a multi must fit ZooKeeper's 1 MB jute.maxbuffer with 1 KB keys);
// a multi fails whole on the first existing key, and then the batch falls back to one create per
// key, sent concurrently so that the session pipelines them (about one more round trip). Reads are
// concurrent getData calls; writes are a multi of versioned setData/delete. Claim times are the
// znode's ctime and expiry is judged by ZooKeeper's clock (Now), like leases.

var _ store.Keys = (*Store)(nil)

type keyKV struct{ s *Store }

// ensuredDirs remembers the scope directories a store created, to skip the round trip next time.
var ensuredDirs sync.Map // dirKey → bool

type dirKey struct {
	s    *Store
	path string
}

func (k keyKV) dir(scope string) string                           { return k.s.p + "/k/" + esc(scope) }
func (k keyKV) path(scope, key string) string                     { return k.dir(scope) + "/" + esc(key) }
func (keyKV) Batch() int                                          { return 256 }
func (k keyKV) Now(ctx context.Context) (time.Time, error)        { return k.s.Now(ctx) }
func (k keyKV) Leases(ctx context.Context) ([]store.Lease, error) { return k.s.Leases(ctx) }

func (k keyKV) ensureDir(ctx context.Context, scope string) error {
	d := dirKey{k.s, k.dir(scope)}
	if _, ok := ensuredDirs.Load(d); ok {
		return nil
	}
	if err := k.s.ensure(ctx, k.s.p+"/k"); err != nil {
		return err
	}
	if err := k.s.ensure(ctx, d.path); err != nil {
		return err
	}
	ensuredDirs.Store(d, true)
	return nil
}

// maxInFlight bounds each's requests in flight: a listing of 10,000 tasks is read by 64 goroutines,
// not 10,000 (ZooKeeper answers a session's requests in order anyway).
const maxInFlight = 64

// each runs f(i) for i in [0, n), up to maxInFlight at once: go-zookeeper pipelines requests on its
// one session. The error is the first failure (by i), saying how many more failed, not one line per
// task when a dropped connection fails them all.
func each(ctx context.Context, n int, f func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, maxInFlight) {
		wg.Go(func() {
			for i := range next {
				errs[i] = f(i)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var first error
	more := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			more++
		}
	}
	if more > 0 {
		return fmt.Errorf("%w (and %d more reads failed)", first, more)
	}
	return first
}

func (k keyKV) Create(ctx context.Context, scope string, keys []string, recs []kvstore.KeyRec) ([]bool, error) {
	if err := k.ensureDir(ctx, scope); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	ops := make([]any, len(keys))
	for i, key := range keys {
		ops[i] = &zk.CreateRequest{Path: k.path(scope, key), Data: recs[i].Encode(), Acl: k.s.acl}
	}
	_, err := call(ctx, k.s, func() ([]zk.MultiResponse, error) { return k.s.c.Multi(ops...) })
	if err == nil {
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	if !errors.Is(err, zk.ErrNodeExists) {
		return nil, k.s.mapErr(err)
	}
	// Some key exists: create one by one, concurrently.
	err = each(ctx, len(keys), func(i int) error {
		r := ops[i].(*zk.CreateRequest)
		_, err := k.s.c.Create(r.Path, r.Data, 0, k.s.acl)
		switch {
		case err == nil:
			out[i] = true
		case errors.Is(err, zk.ErrNodeExists):
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	return out, nil
}

func (k keyKV) Get(ctx context.Context, scope string, keys []string) (map[string]kvstore.StoredKey, error) {
	return k.get(ctx, k.dir(scope), keys)
}

func (k keyKV) get(ctx context.Context, dir string, keys []string) (map[string]kvstore.StoredKey, error) {
	recs := make([]*kvstore.StoredKey, len(keys))
	err := each(ctx, len(keys), func(i int) error {
		b, st, err := k.s.c.Get(dir + "/" + esc(keys[i]))
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		r, err := kvstore.DecodeKeyRec(keys[i], b)
		if err != nil {
			return err
		}
		if r.Claimed == 0 {
			r.Claimed = st.Ctime * 1000 // ZooKeeper's clock, ms
		}
		recs[i] = &kvstore.StoredKey{Rec: r, Ver: strconv.FormatInt(int64(st.Version), 10)}
		return nil
	})
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	m := make(map[string]kvstore.StoredKey, len(keys))
	for i, r := range recs {
		if r != nil {
			m[keys[i]] = *r
		}
	}
	return m, nil
}

var _ kvstore.KeyNamesKV = keyKV{}

// Names lists the scope's key names, its node's children (kvstore.KeyNamesKV): ZooKeeper lists
// them whole, so a page of them would read every name each time.
func (k keyKV) Names(ctx context.Context, scope string) ([]string, error) {
	names, err := k.children(ctx, k.dir(scope))
	for i, n := range names {
		names[i] = unesc(n)
	}
	return names, err
}

func (k keyKV) Apply(ctx context.Context, scope string, ch []kvstore.KeyChange) (bool, error) {
	ops := make([]any, len(ch))
	for i, c := range ch {
		v, err := strconv.ParseInt(c.Ver, 10, 32)
		if err != nil {
			return false, err
		}
		p := k.path(scope, c.Key)
		if c.Rec == nil {
			ops[i] = &zk.DeleteRequest{Path: p, Version: int32(v)}
		} else {
			ops[i] = &zk.SetDataRequest{Path: p, Data: c.Rec.Encode(), Version: int32(v)}
		}
	}
	_, err := call(ctx, k.s, func() ([]zk.MultiResponse, error) { return k.s.c.Multi(ops...) })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return false, nil
	}
	return false, k.s.mapErr(err)
}

// children returns the sorted child names of dir (none when dir is missing).
func (k keyKV) children(ctx context.Context, dir string) ([]string, error) {
	names, err := call(ctx, k.s, func() ([]string, error) {
		names, _, err := k.s.c.Children(dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	slices.Sort(names)
	return names, nil
}

// pageOf returns at most limit of the sorted names after cursor, and the next cursor.
func pageOf(names []string, cursor string, limit int) ([]string, string) {
	i, _ := slices.BinarySearch(names, cursor)
	if i < len(names) && names[i] == cursor {
		i++
	}
	page := names[i:min(i+limit, len(names))]
	if i+limit < len(names) {
		return page, page[len(page)-1]
	}
	return page, ""
}

// Scopes pages the children of the keys' node, one per scope, in the order of their escaped
// names (store.ScopeLister). ZooKeeper lists a node's children whole, so a page costs one read of
// every scope's name; a scope whose keys were all forgotten keeps its node and is listed.
func (k keyKV) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	names, err := k.children(ctx, k.s.p+"/k")
	if err != nil {
		return nil, "", err
	}
	page, next := pageOf(names, cursor, limit)
	out := make([]string, len(page))
	for i, n := range page {
		out[i] = unesc(n)
	}
	return out, next, nil
}

// Page reads limit keys of scope after the cursor, the escaped name of the page's last key, in
// the order of the escaped names: the scope's children (whole, as ZooKeeper lists them), then the
// page's records in parallel reads (store.ScopeLister).
func (k keyKV) Page(ctx context.Context, scope, cursor string, limit int) ([]string, []kvstore.KeyRec, string, error) {
	dir := k.dir(scope)
	names, err := k.children(ctx, dir)
	if err != nil {
		return nil, nil, "", err
	}
	page, next := pageOf(names, cursor, limit)
	keys := make([]string, len(page))
	for i, n := range page {
		keys[i] = unesc(n)
	}
	m, err := k.get(ctx, dir, keys)
	if err != nil {
		return nil, nil, "", err
	}
	outKeys, recs := make([]string, 0, len(keys)), make([]kvstore.KeyRec, 0, len(keys))
	for _, key := range keys {
		if r, ok := m[key]; ok { // gone since the children were read
			outKeys, recs = append(outKeys, key), append(recs, r.Rec)
		}
	}
	return outKeys, recs, next, nil
}
