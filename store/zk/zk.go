// Package zk is the ZooKeeper store: zk://host:port[,host:port…][/][?prefix=name&session_timeout=10s].
//
// Leases follow the ephemeral-sequential lock recipe under /once/<prefix>/locks/<task>: a contender
// creates an ephemeral sequential node; the lowest live node holds. Acquire does not block: a
// contender that is not lowest deletes its node and reports the lowest as the holder. The fencing
// token is the holding node's czxid (ZooKeeper's transaction id: strictly increasing across the
// ensemble). The holder writes its token into the task node in a multi that also checks its lock
// node still exists; ledger writes (internal/kvledger, one persistent node per slot written with
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
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvledger"
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

// Config is a parsed DSN.
type Config struct {
	Servers []string
	Prefix  string        // nodes live under /once/<prefix>, default "once"
	Session time.Duration // requested session timeout; the server clamps it to [2, 20] × tickTime
}

// Params are the query parameters a zk:// DSN accepts (docs/stores/zookeeper.md).
var Params = []string{"prefix", "session_timeout"}

var spec = store.QuerySpec{Store: "zk", Doc: "docs/stores/zookeeper.md", Known: Params}

// ParseDSN parses zk://host:port[,host:port…][/][?prefix=&session_timeout=] strictly
// (store.SplitDSN, Params). Errors wrap store.ErrBadDSN.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use zk://host:2181[,host:2181]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	hosts, q, err := store.SplitDSN(spec, dsn, "zk")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Prefix: "once", Session: 10 * time.Second}
	hosts = strings.TrimSuffix(hosts, "/")
	if strings.Contains(hosts, "@") {
		return bad("user info is not supported (once does not authenticate to ZooKeeper)")
	}
	if strings.Contains(hosts, "/") {
		return bad("a path (chroot) is not supported")
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" || strings.ContainsAny(h, " \t\n%") {
			return bad("endpoint %q", h)
		}
		if !strings.Contains(h, ":") {
			h += ":2181"
		}
		cfg.Servers = append(cfg.Servers, h)
	}
	if v, ok := q["prefix"]; ok {
		cfg.Prefix = v
	}
	if v, ok := q["session_timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Hour {
			return Config{}, fmt.Errorf("%w: zk parameter \"session_timeout\" is %q: give a duration between 1s and 1h, e.g. 10s", store.ErrBadDSN, v)
		}
		cfg.Session = d
	}
	return cfg, nil
}

// Store is a ZooKeeper store over one session. Safe for concurrent use.
type Store struct {
	c               *zk.Conn
	p               string // /once/<prefix>
	where           string
	kvledger.Ledger // the run ledger (store.Ledger), written once for the KV stores

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
	s.Ledger = kvledger.Ledger{KV: kv{s}}
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

type nodeData struct {
	Holder string `json:"holder"`
	RunID  string `json:"run_id"`
	TTL    int64  `json:"ttl_ms"`
}

func lease(task string, d nodeData, st *zk.Stat) store.Lease {
	return store.Lease{Task: task, Holder: d.Holder, RunID: d.RunID, Token: st.Czxid, Acquired: ms(st.Ctime), Expires: ms(st.Mtime + d.TTL)}
}

// node reads a lock node; ok is false when it is gone.
func (s *Store) node(ctx context.Context, path string) (nodeData, *zk.Stat, bool, error) {
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(path); return r{b, st}, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nodeData{}, nil, false, nil
	}
	if err != nil {
		return nodeData{}, nil, false, s.mapErr(err)
	}
	var d nodeData
	if err := json.Unmarshal(got.b, &d); err != nil {
		return d, nil, false, fmt.Errorf("%w: corrupt lock node %s: %v", store.ErrUnavailable, path, err)
	}
	return d, got.st, true, nil
}

// Acquire runs the lock recipe without waiting. Round trips when free: create, stat, children,
// and the multi that publishes the token. See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if req.TTL < time.Millisecond {
		return store.Lease{}, fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	dir := s.taskPath(req.Task)
	data, _ := json.Marshal(nodeData{Holder: req.Holder, RunID: req.RunID, TTL: ttlMillis(req.TTL)})
	create := func() (string, error) { return s.c.Create(dir+"/n-", data, zk.FlagEphemeral|zk.FlagSequence, acl) }
	mine, err := call(ctx, s, create)
	if errors.Is(err, zk.ErrNoNode) {
		if err := s.ensure(ctx, dir); err != nil {
			return store.Lease{}, err
		}
		mine, err = call(ctx, s, create)
	}
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	name := mine[strings.LastIndex(mine, "/")+1:]
	giveUp := func(err error) (store.Lease, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = call(dctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(mine, -1) })
		return store.Lease{}, err
	}
	d, st, ok, err := s.node(ctx, mine)
	if err != nil || !ok {
		return giveUp(errors.Join(err, fmt.Errorf("%w: zookeeper: my lock node vanished (session lost)", store.ErrUnavailable)))
	}
	now := st.Ctime // ZooKeeper's clock
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
	if err != nil {
		return giveUp(s.mapErr(err))
	}
	for _, k := range s.sortChildren(kids) {
		if seq(k) >= seq(name) {
			break
		}
		od, ost, ok, err := s.node(ctx, dir+"/"+k)
		if err != nil {
			return giveUp(err)
		}
		if !ok {
			continue
		}
		if ost.Mtime+od.TTL > now {
			return giveUp(&store.BusyError{Lease: lease(req.Task, od, ost)})
		}
		// Expired by ZooKeeper's clock: remove it, unless it was renewed meanwhile.
		_, err = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(dir+"/"+k, ost.Version) })
		if errors.Is(err, zk.ErrBadVersion) {
			od, ost, ok, _ := s.node(ctx, dir+"/"+k)
			if ok {
				return giveUp(&store.BusyError{Lease: lease(req.Task, od, ost)})
			}
		} else if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return giveUp(s.mapErr(err))
		}
	}
	// Lowest live node: publish the token, only while the node still exists.
	tok := strconv.FormatInt(st.Czxid, 10)
	_, err = call(ctx, s, func() ([]zk.MultiResponse, error) {
		return s.c.Multi(&zk.CheckVersionRequest{Path: mine, Version: -1}, &zk.SetDataRequest{Path: dir, Data: []byte(tok), Version: -1})
	})
	if err != nil {
		return giveUp(s.mapErr(err))
	}
	s.mu.Lock()
	s.paths[st.Czxid] = mine
	s.mu.Unlock()
	return lease(req.Task, d, st), nil
}

// errMismatch: the token's node exists but names another holder.
var errMismatch = fmt.Errorf("%w: holder mismatch", store.ErrNotHeld)

// find returns the path of l's lock node when it exists and is l's (token and holder).
func (s *Store) find(ctx context.Context, l store.Lease) (string, nodeData, *zk.Stat, error) {
	s.mu.Lock()
	path, cached := s.paths[l.Token]
	s.mu.Unlock()
	var cands []string
	if cached {
		cands = []string{path}
	} else {
		dir := s.taskPath(l.Task)
		kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return "", nodeData{}, nil, s.mapErr(err)
		}
		for _, k := range s.sortChildren(kids) {
			cands = append(cands, dir+"/"+k)
		}
	}
	for _, p := range cands {
		d, st, ok, err := s.node(ctx, p)
		if err != nil {
			return "", d, nil, err
		}
		if ok && st.Czxid == l.Token {
			if d.Holder != l.Holder {
				return "", d, nil, fmt.Errorf("%w: task %q token %d is held by %q, not %q", errMismatch, l.Task, l.Token, d.Holder, l.Holder)
			}
			return p, d, st, nil
		}
	}
	return "", nodeData{}, nil, fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// Renew rewrites l's node (its mtime is the renewal time by ZooKeeper's clock). A grant found
// expired by then is deleted and reported ErrNotHeld. See store.Leaser.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	path, d, st, err := s.find(ctx, l)
	if err != nil {
		return store.Lease{}, err
	}
	old := st.Mtime + d.TTL
	d.TTL = ttlMillis(ttl)
	data, _ := json.Marshal(d)
	nst, err := call(ctx, s, func() (*zk.Stat, error) { return s.c.Set(path, data, st.Version) })
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d was replaced during renewal", store.ErrNotHeld, l.Task, l.Token)
	}
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	if nst.Mtime >= old {
		_, _ = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, nst.Version) })
		return store.Lease{}, fmt.Errorf("%w: task %q token %d expired before the renewal", store.ErrNotHeld, l.Task, l.Token)
	}
	return lease(l.Task, d, nst), nil
}

// latest returns the task's published token and the task node's version.
func (s *Store) latest(ctx context.Context, task string) (int64, int32, error) {
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(s.taskPath(task)); return r{b, st}, err })
	if errors.Is(err, zk.ErrNoNode) {
		return 0, -1, nil
	}
	if err != nil {
		return 0, 0, s.mapErr(err)
	}
	n, _ := strconv.ParseInt(string(got.b), 10, 64)
	return n, got.st.Version, nil
}

// Release deletes l's node. An expired grant nobody replaced releases fine. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	path, _, st, err := s.find(ctx, l)
	if errors.Is(err, store.ErrNotHeld) && !errors.Is(err, errMismatch) {
		if n, _, lerr := s.latest(ctx, l.Task); lerr == nil && n == l.Token && n > 0 {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	_, err = call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(path, st.Version) })
	s.mu.Lock()
	delete(s.paths, l.Token)
	s.mu.Unlock()
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return fmt.Errorf("%w: task %q token %d was replaced during release", store.ErrNotHeld, l.Task, l.Token)
	}
	return s.mapErr(err)
}

// Now returns ZooKeeper's clock: the mtime of a write to /once/<prefix>/clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	st, err := call(ctx, s, func() (*zk.Stat, error) { return s.c.Set(s.p+"/clock", nil, -1) })
	if err != nil {
		return time.Time{}, s.mapErr(err)
	}
	return ms(st.Mtime), nil
}

// Leases lists, per task, the lowest lock node when it has not expired by ZooKeeper's clock.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	tasks, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.p + "/locks"); return k, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	out := []store.Lease{}
	for _, t := range tasks {
		dir := s.p + "/locks/" + t
		kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(dir); return k, err })
		if err != nil {
			return nil, s.mapErr(err)
		}
		for _, k := range s.sortChildren(kids) {
			d, st, ok, err := s.node(ctx, dir+"/"+k)
			if err != nil {
				return nil, err
			}
			if !ok || st.Mtime+d.TTL <= now.UnixMilli() {
				continue
			}
			out = append(out, lease(unesc(t), d, st))
			break
		}
	}
	return out, nil
}

// Lost returns a channel closed when l's lock node is deleted or the session disconnects.
func (s *Store) Lost(l store.Lease) <-chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	path, down := s.paths[l.Token], s.down
	s.mu.Unlock()
	go func() {
		defer close(ch)
		if path == "" {
			return
		}
		for {
			ok, _, ev, err := s.c.ExistsW(path)
			if err != nil || !ok {
				return
			}
			select {
			case e := <-ev:
				// A watch fires on any change to the node, and every renewal rewrites it (its
				// mtime carries the TTL): only a deletion, or a watch the server dropped
				// (session gone), means the lease is lost. Anything else re-arms the watch.
				if e.Type == zk.EventNodeDeleted || e.Type == zk.EventNotWatching {
					return
				}
			case <-down:
				return
			}
		}
	}()
	return ch
}

// --- ledger ---

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvledger.Doc, kvledger.Version, time.Time, error) {
	s := k.s
	type r struct {
		b  []byte
		st *zk.Stat
	}
	got, err := call(ctx, s, func() (r, error) { b, st, err := s.c.Get(s.docPath(task, slot)); return r{b, st}, err })
	now := time.UnixMilli(time.Now().UnixMilli())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, now, nil
	}
	if err != nil {
		return nil, 0, now, s.mapErr(err)
	}
	d, err := kvledger.Unmarshal(got.b)
	return d, int64(got.st.Version) + 1, now, err
}

func (k kv) Save(ctx context.Context, d *kvledger.Doc, ver kvledger.Version, token int64, run string) error {
	s := k.s
	var ops []any
	if token > 0 {
		n, v, err := s.latest(ctx, d.Task)
		if err != nil {
			return err
		}
		if n != token {
			return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d)", store.ErrNotHeld, token, d.Task, n)
		}
		ops = append(ops, &zk.CheckVersionRequest{Path: s.taskPath(d.Task), Version: v})
	}
	path := s.docPath(d.Task, d.Slot)
	if ver == 0 {
		if err := s.ensure(ctx, s.docDir(d.Task)); err != nil {
			return err
		}
		ops = append(ops, &zk.CreateRequest{Path: path, Data: d.Marshal(), Acl: acl})
	} else {
		ops = append(ops, &zk.SetDataRequest{Path: path, Data: d.Marshal(), Version: int32(ver - 1)})
	}
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		ops = append(ops, &zk.CreateRequest{Path: s.runPath(run), Data: b, Acl: acl})
	}
	// The index of waiting slots, in the same multi. Its node exists when the document as read
	// waited (Waited); only when that changes is it looked at, and created or deleted.
	if _, waits := d.Waits(); waits != d.Waited() {
		op, err := s.waitOp(ctx, d.Task, d.Slot, waits)
		if err != nil {
			return err
		}
		if op != nil {
			ops = append(ops, op)
		}
	}
	res, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if err == nil {
		return nil
	}
	_ = res
	if token > 0 {
		if n, _, lerr := s.latest(ctx, d.Task); lerr == nil && n != token {
			return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d)", store.ErrNotHeld, token, d.Task, n)
		}
	}
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
		return kvledger.ErrStale
	}
	return s.mapErr(err)
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	s := k.s
	b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.runPath(runID)); return b, err })
	if errors.Is(err, zk.ErrNoNode) {
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

func (k kv) Latest(ctx context.Context, task string) (int64, error) {
	n, _, err := k.s.latest(ctx, task)
	return n, err
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvledger.Doc, error) {
	s := k.s
	children := func(p string) ([]string, error) {
		kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(p); return k, err })
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return kids, s.mapErr(err)
	}
	var dirs []string
	if task != "" {
		dirs = []string{s.docDir(task)}
	} else {
		ts, err := children(s.p + "/d")
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			dirs = append(dirs, s.p+"/d/"+t)
		}
	}
	var out []*kvledger.Doc
	for _, dir := range dirs {
		slots, err := children(dir)
		if err != nil {
			return nil, err
		}
		for _, sl := range slots {
			b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(dir + "/" + sl); return b, err })
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, s.mapErr(err)
			}
			d, err := kvledger.Unmarshal(b)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// waitPath is the slot's node in the index of waiting slots (kvledger.KV.Waiting): one flat
// directory, task and slot joined by "|" (which esc never leaves unescaped).
func (s *Store) waitPath(task, slot string) string { return s.p + "/w/" + esc(task) + "|" + esc(slot) }

// waitOp is the multi op that makes (task, slot)'s index node exist (waits) or not, or nil when
// it already does. A concurrent change of the node fails the multi, and the write is retried.
func (s *Store) waitOp(ctx context.Context, task, slot string, waits bool) (any, error) {
	path := s.waitPath(task, slot)
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(path); return ok, err })
	if err != nil {
		return nil, s.mapErr(err)
	}
	switch {
	case waits && !ok:
		if err := s.ensure(ctx, s.p+"/w"); err != nil {
			return nil, err
		}
		return &zk.CreateRequest{Path: path, Acl: acl}, nil
	case !waits && ok:
		return &zk.DeleteRequest{Path: path, Version: -1}, nil
	}
	return nil, nil
}

// waitingIndexed marks the index of waiting slots as built (kvledger.KV.Index).
func (s *Store) waitingIndexed() string { return s.p + "/w-indexed" }

// Waiting lists the index of waiting slots (one directory) and reads their documents: it costs
// the slots waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvledger.Doc, bool, error) {
	s := k.s
	ok, err := call(ctx, s, func() (bool, error) { ok, _, err := s.c.Exists(s.waitingIndexed()); return ok, err })
	if err != nil || !ok {
		return nil, false, s.mapErr(err)
	}
	kids, err := call(ctx, s, func() ([]string, error) { k, _, err := s.c.Children(s.p + "/w"); return k, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvledger.Doc
	for _, name := range kids {
		t, sl, found := strings.Cut(name, "|")
		if !found {
			continue
		}
		b, err := call(ctx, s, func() ([]byte, error) { b, _, err := s.c.Get(s.docPath(unesc(t), unesc(sl))); return b, err })
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		d, err := kvledger.Unmarshal(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, true, nil
}

// Index adds the waiting documents to the index and marks it built.
func (k kv) Index(ctx context.Context, docs []*kvledger.Doc) error {
	s := k.s
	if err := s.ensure(ctx, s.p+"/w"); err != nil {
		return err
	}
	for _, d := range docs {
		if _, ok := d.Waits(); ok {
			if err := s.ensure(ctx, s.waitPath(d.Task, d.Slot)); err != nil {
				return err
			}
		}
	}
	return s.ensure(ctx, s.waitingIndexed())
}

// Delete removes the document and its index node when it is still version ver.
func (k kv) Delete(ctx context.Context, d *kvledger.Doc, ver kvledger.Version) error {
	s := k.s
	ops := []any{&zk.DeleteRequest{Path: s.docPath(d.Task, d.Slot), Version: int32(ver - 1)}}
	if op, err := s.waitOp(ctx, d.Task, d.Slot, false); err != nil {
		return err
	} else if op != nil {
		ops = append(ops, op)
	}
	_, err := call(ctx, s, func() ([]zk.MultiResponse, error) { return s.c.Multi(ops...) })
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return kvledger.ErrStale
	}
	return s.mapErr(err)
}

// Unrun removes run ids from the run index.
func (k kv) Unrun(ctx context.Context, runs []string) error {
	s := k.s
	for _, r := range runs {
		_, err := call(ctx, s, func() (struct{}, error) { return struct{}{}, s.c.Delete(s.runPath(r), -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return s.mapErr(err)
		}
	}
	return nil
}
