// Package zk is the ZooKeeper store:
// zk://[user:password@]host:port[,host:port…][/chroot/path][?prefix=name&session_timeout=10s].
//
// With a user, the session authenticates with digest (user:password) and every node the store
// creates under <chroot>/once/<prefix> is that user's alone (the "auth" ACL scheme: all
// permissions to the identities of the creating session, none to anyone else); the shared nodes
// above it let anyone read and create children, so other users can have prefixes of their own.
//
// Leases follow the ephemeral-sequential lock recipe under /once/<prefix>/locks/<task>: a contender
// creates an ephemeral sequential node; the lowest live node holds. Acquire does not block: a
// contender that is not lowest deletes its node and reports the lowest as the holder. The fencing
// token is the holding node's czxid (ZooKeeper's transaction id: strictly increasing across the
// ensemble). The holder writes its token into the task node in a multi that also checks (or rewrites:
// lease.go's publishAlone) its lock node, so that it still exists; ledger writes (internal/kvstore, one persistent node per slot written with
// versioned set) are fenced by a check on that task node's version. Seats (Limit >= 2) are lock
// nodes too, and the task node then also lists the current seats' tokens (seats.go).
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
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

func init() {
	store.Register("zk", func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }, store.TakesPassword)
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
	_ store.Clock        = (*Store)(nil)
)

// Store is a ZooKeeper store over one session. Safe for concurrent use.
type Store struct {
	c              *zk.Conn
	p              string   // <chroot>/once/<prefix>
	acl            []zk.ACL // of the nodes at and under p
	dirACL         []zk.ACL // of the chroot's nodes and <chroot>/once, which every prefix shares
	where          string   // the servers and the chroot, for messages
	servers        []string // host:port
	kvstore.Ledger          // the run ledger (store.Ledger), written once for the KV stores
	*kvstore.Keys           // business keys (store.Keys), written once for the KV stores (keys.go)

	mu      sync.Mutex
	down    chan struct{}    // closed when the session disconnects or expires; replaced after
	paths   map[int64]string // lock nodes this store created, by token
	holders map[int64]string // and their holders
	done    chan struct{}

	histBuilt atomic.Bool // the history index was seen built (history.go)
	kindBuilt atomic.Bool // the indexes of a kind were seen built (history.go)
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// The ACLs without authentication: anyone may do anything (run ZooKeeper where only once's hosts
// reach it). With digest authentication: the creator's identities alone (auth scheme) below the
// prefix; anyone may read and create (not delete) in the shared nodes above it.
var (
	worldACL  = zk.WorldACL(zk.PermAll)
	authACL   = zk.AuthACL(zk.PermAll)
	sharedACL = append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead|zk.PermCreate)...)
)

// Open connects, waits for a session and creates the base nodes.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{p: cfg.Chroot + "/once/" + cfg.Prefix, where: strings.Join(cfg.Servers, ",") + cfg.Chroot, down: make(chan struct{}),
		paths: map[int64]string{}, holders: map[int64]string{}, done: make(chan struct{}), acl: worldACL, dirACL: worldACL, servers: cfg.Servers}
	if cfg.User != "" {
		s.acl, s.dirACL = authACL, sharedACL
	}
	c, events, err := zk.Connect(cfg.Servers, cfg.Session, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, s.mapErr(err)
	}
	s.c = c
	s.Ledger = kvstore.NewLedger(kv{s})
	s.Keys = &kvstore.Keys{KV: keyKV{s}, Name: "zk", Runs: kv{s}}
	ready := make(chan struct{})
	go s.watchSession(events, ready)
	// Session, authentication and the store's nodes, all within one bound: a server that gave a
	// session and then answers nothing fails the open as unreached, not after go-zookeeper's own
	// timeouts.
	cctx, cancel, bound := store.Connecting(ctx, cfg.Connect)
	defer cancel()
	fail := func(err error) (*Store, error) {
		// Close waits up to a second for the server to hear of it; nobody is listening.
		go c.Close()
		if cctx.Err() != nil && ctx.Err() == nil { // the bound ran out: the server, not err's cause
			return nil, store.Unreached("zookeeper at "+s.where, bound)
		}
		return nil, err
	}
	select {
	case <-ready:
	case <-cctx.Done():
		return fail(fmt.Errorf("%w: zookeeper at %s: no session: %v; check that the ensemble is running and reachable", store.ErrUnavailable, s.where, ctx.Err()))
	}
	if cfg.User != "" {
		// go-zookeeper sends the credentials again on every reconnect.
		if _, err := call(cctx, s, func() (struct{}, error) { return struct{}{}, c.AddAuth("digest", []byte(cfg.User+":"+cfg.Password)) }); err != nil {
			return fail(fmt.Errorf("%w: zookeeper at %s: digest authentication failed: %v; check user and password in the DSN", store.ErrUnavailable, s.where, err))
		}
	}
	var dirs []string // the chroot's nodes and <chroot>/once
	for i := 1; i <= len(cfg.Chroot); i++ {
		if i == len(cfg.Chroot) || cfg.Chroot[i] == '/' {
			dirs = append(dirs, cfg.Chroot[:i])
		}
	}
	dirs = append(dirs, cfg.Chroot+"/once")
	for i, p := range append(dirs, s.p, s.p+"/locks", s.p+"/d", s.p+"/r", s.p+"/clock") {
		a := s.acl
		if i < len(dirs) {
			a = s.dirACL
		}
		if err := s.ensureACL(cctx, p, a); err != nil {
			return fail(err)
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
		return fmt.Errorf("%w: zookeeper at %s refused access to %s: %v; the nodes belong to another user: check user and password in the DSN, "+
			"or the node's ACL (zkCli.sh getAcl %s)", store.ErrUnavailable, s.where, s.p, err, s.p)
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
		return fmt.Errorf("%w: zookeeper: %v", store.ErrConflict, err)
	}
	return fmt.Errorf("%w: zookeeper at %s: %v; check that the ensemble is running and reachable", store.ErrUnavailable, s.where, err)
}

// ensure creates path, a node of the prefix, when it does not exist.
func (s *Store) ensure(ctx context.Context, path string) error { return s.ensureACL(ctx, path, s.acl) }

// ensureACL creates path with acl when it does not exist.
func (s *Store) ensureACL(ctx context.Context, path string, acl []zk.ACL) error {
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
