// Package zk is the ZooKeeper store: zk://host:port[,host:port…][/][?prefix=name&session_timeout=10s].
//
// Leases follow the ephemeral-sequential lock recipe under /once/<prefix>/locks/<task>: a contender
// creates an ephemeral sequential node; the lowest live node holds. Acquire does not block: a
// contender that is not lowest deletes its node and reports the lowest as the holder. The fencing
// token is the holding node's czxid (ZooKeeper's transaction id: strictly increasing across the
// ensemble). The holder writes its token into the task node in a multi that also checks its lock
// node still exists; ledger writes (internal/kvstore, one persistent node per slot written with
// versioned set) are fenced by a check on that task node's version.
//
// A lease ends when its TTL passes without renewal (expiry is judged by ZooKeeper's clock: node
// mtime + ttl against the ctime of a contender's node, which then deletes the expired node) or when
// the store's session ends (its ephemeral nodes vanish). Lost(l) closes when the lock node is
// deleted or the session is disconnected, so the holder stops before the server can expire the
// session and grant the lease to someone else.
package zk

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

func init() {
	store.Register("zk", func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) })
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
	_ store.Clock        = (*Store)(nil)
)

// Store is a ZooKeeper store over one session. Safe for concurrent use.
type Store struct {
	c              *zk.Conn
	p              string // /once/<prefix>
	where          string
	kvstore.Ledger // the run ledger (store.Ledger), written once for the KV stores
	*kvstore.Keys  // business keys (store.Keys), written once for the KV stores (keys.go)

	mu    sync.Mutex
	down  chan struct{} // closed when the session disconnects or expires; replaced after
	paths map[int64]string
	done  chan struct{}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

var acl = zk.WorldACL(zk.PermAll)

// Open connects, waits for a session and creates the base nodes.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{p: "/once/" + cfg.Prefix, where: strings.Join(cfg.Servers, ","), down: make(chan struct{}),
		paths: map[int64]string{}, done: make(chan struct{})}
	c, events, err := zk.Connect(cfg.Servers, cfg.Session, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, s.mapErr(err)
	}
	s.c = c
	s.Ledger = kvstore.Ledger{KV: kv{s}}
	s.Keys = &kvstore.Keys{KV: keyKV{s}, Name: "zk"}
	ready := make(chan struct{})
	go s.watchSession(events, ready)
	cctx, cancel, bound := store.Connecting(ctx, 0)
	defer cancel()
	select {
	case <-ready:
	case <-cctx.Done():
		// Close waits up to a second for the server to hear of it; nobody is listening.
		go c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: zookeeper at %s: no session: %v; check that the ensemble is running and reachable", store.ErrUnavailable, s.where, ctx.Err())
		}
		return nil, store.Unreached("zookeeper at "+s.where, bound)
	}
	for _, p := range []string{"/once", s.p, s.p + "/locks", s.p + "/d", s.p + "/r", s.p + "/clock"} {
		if err := s.ensure(ctx, p); err != nil {
			c.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) watchSession(events <-chan zk.Event, ready chan struct{}) {
	once := sync.Once{}
	for ev := range events {
		switch ev.State {
		case zk.StateHasSession:
			once.Do(func() { close(ready) })
		case zk.StateDisconnected, zk.StateExpired:
			s.mu.Lock()
			close(s.down)
			s.down = make(chan struct{})
			s.mu.Unlock()
		}
	}
}

// Close ends the session: every lease this store holds is lost (its nodes vanish).
func (s *Store) Close() error {
	s.c.Close()
	return nil
}

// call runs f, returning early with ErrUnavailable when ctx ends (go-zookeeper has no contexts).
func call[T any](ctx context.Context, s *Store, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// mapErr maps every go-zookeeper error to a store sentinel, in one line.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed):
		return fmt.Errorf("%w: zookeeper at %s refused access: %v; check the ACLs of /once", store.ErrUnavailable, s.where, err)
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
		return fmt.Errorf("%w: zookeeper: %v", store.ErrConflict, err)
	}
	return fmt.Errorf("%w: zookeeper at %s: %v; check that the ensemble is running and reachable", store.ErrUnavailable, s.where, err)
}

func (s *Store) ensure(ctx context.Context, path string) error {
	_, err := call(ctx, s, func() (string, error) { return s.c.Create(path, nil, 0, acl) })
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return s.mapErr(err)
	}
	return nil
}

// esc makes a name one valid znode name ("" and dot names are not).
func esc(s string) string {
	switch s {
	case "":
		return "%"
	case ".", "..":
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

func unesc(s string) string {
	if s == "%" {
		return ""
	}
	u, _ := url.PathUnescape(s)
	return u
}

func (s *Store) taskPath(task string) string      { return s.p + "/locks/" + esc(task) }
func (s *Store) docPath(task, slot string) string { return s.p + "/d/" + esc(task) + "/" + esc(slot) }
func (s *Store) runPath(run string) string        { return s.p + "/r/" + esc(run) }
func (s *Store) docDir(task string) string        { return s.p + "/d/" + esc(task) }
func seq(name string) int64                       { n, _ := strconv.ParseInt(name[max(0, len(name)-10):], 10, 64); return n }
func ms(t int64) time.Time                        { return time.UnixMilli(t) }
func ttlMillis(d time.Duration) int64             { return max(1, int64((d+time.Millisecond-1)/time.Millisecond)) }
func (s *Store) sortChildren(names []string) []string {
	sort.Slice(names, func(i, j int) bool { return seq(names[i]) < seq(names[j]) })
	return names
}
