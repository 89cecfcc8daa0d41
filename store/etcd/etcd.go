// Package etcd is the etcd v3 store: etcd://[user:password@]host:port[,host:port…][/][?prefix=name].
//
// A lease is a key attached to an etcd lease of ceil(ttl) seconds, created by a transaction that
// requires the key's create revision to be 0. The fencing token is the revision of that transaction
// (the key's create revision), which strictly increases across the whole cluster. Expiry is etcd's:
// the leader revokes the lease and deletes the key. Lost(l) watches the key, so a revoked or
// expired lease reaches the lease keeper at once. The ledger is internal/kvledger with documents
// written by compare-and-swap transactions on their mod revision, fenced by the task's fence key,
// whose mod revision is the latest token.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/once-run/once/internal/kvledger"
	"github.com/once-run/once/store"
)

func init() {
	store.Register("etcd", func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) })
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
)

// Config is a parsed DSN.
type Config struct {
	Endpoints []string
	Username  string
	Password  string
	Prefix    string        // key prefix under /once/, default "once"
	Dial      time.Duration // dial_timeout, default 5s
}

// ParseDSN parses etcd://[user:password@]host:port[,host:port…][/][?prefix=&dial_timeout=].
// Errors wrap store.ErrBadDSN and never contain the password.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use etcd://host:2379[,host:2379]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	rest, ok := strings.CutPrefix(dsn, "etcd://")
	if !ok {
		return bad("scheme is not etcd://")
	}
	cfg := Config{Prefix: "once", Dial: 5 * time.Second}
	hostpart, query, _ := strings.Cut(rest, "?")
	hostpart = strings.TrimSuffix(hostpart, "/")
	if i := strings.LastIndex(hostpart, "@"); i >= 0 {
		ui := hostpart[:i]
		hostpart = hostpart[i+1:]
		user, pw, _ := strings.Cut(ui, ":")
		var err1, err2 error
		cfg.Username, err1 = url.PathUnescape(user)
		cfg.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return bad("bad escape in user info")
		}
	}
	if strings.Contains(hostpart, "/") {
		return bad("a path is not allowed")
	}
	for _, h := range strings.Split(hostpart, ",") {
		if h == "" {
			return bad("empty endpoint")
		}
		if strings.ContainsAny(h, " \t\n@%") {
			return bad("endpoint %q", h)
		}
		if !strings.Contains(h, ":") {
			h += ":2379"
		}
		cfg.Endpoints = append(cfg.Endpoints, h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return bad("bad query")
	}
	for k, v := range q {
		if len(v) != 1 {
			return bad("parameter %q given %d times", k, len(v))
		}
		switch k {
		case "prefix":
			if !validPrefix(v[0]) {
				return bad("prefix %q must be 1-64 letters, digits, '_', '-' or '.'", v[0])
			}
			cfg.Prefix = v[0]
		case "dial_timeout":
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 || d > time.Hour {
				return bad("dial_timeout %q is not a duration between 1ns and 1h", v[0])
			}
			cfg.Dial = d
		default:
			return bad("unknown parameter %q (known: prefix, dial_timeout)", k)
		}
	}
	return cfg, nil
}

func validPrefix(p string) bool {
	if p == "" || len(p) > 64 {
		return false
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Store is an etcd store. Safe for concurrent use.
type Store struct {
	c      *clientv3.Client
	p      string // "/once/<prefix>/"
	where  string // endpoints, for errors
	kvl    kvledger.Ledger
	ctx    context.Context // cancelled by Close: watches and background revokes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	idle map[int64][]*clientv3.LeaseGrantResponse // etcd leases no key uses, by TTL, for reuse
}

// Open connects to etcd and checks that it answers.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, Username: cfg.Username, Password: cfg.Password,
		DialTimeout: cfg.Dial, Logger: zap.NewNop(), Context: context.WithoutCancel(ctx)})
	s := &Store{c: c, p: "/once/" + cfg.Prefix + "/", where: strings.Join(cfg.Endpoints, ","), idle: map[int64][]*clientv3.LeaseGrantResponse{}}
	if err != nil {
		return nil, s.mapErr(err)
	}
	s.kvl = kvledger.Ledger{KV: kv{s}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// One read proves the endpoints and credentials.
	pctx, cancel := context.WithTimeout(ctx, cfg.Dial)
	defer cancel()
	if _, err := c.Get(pctx, s.p+"epoch"); err != nil {
		_ = c.Close()
		return nil, s.mapErr(err)
	}
	return s, nil
}

// Close stops the watches and closes the client. Leases are not released.
func (s *Store) Close() error {
	s.mu.Lock()
	var ids []clientv3.LeaseID
	for _, gs := range s.idle {
		for _, g := range gs {
			ids = append(ids, g.ID)
		}
	}
	s.idle = map[int64][]*clientv3.LeaseGrantResponse{}
	s.mu.Unlock()
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		for _, id := range ids {
			_, _ = s.c.Revoke(ctx, id)
		}
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	return s.c.Close()
}

// mapErr maps every etcd client error to a store sentinel, in one line.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: etcd lease not found (expired or revoked)", store.ErrNotHeld)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("%w: etcd at %s refused the credentials: %s; check user and password in the DSN", store.ErrUnavailable, s.where, msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), status.Code(err) == codes.Unavailable:
		return fmt.Errorf("%w: etcd at %s: %s; check that the cluster is running and reachable", store.ErrUnavailable, s.where, msg)
	}
	return fmt.Errorf("%w: etcd at %s: %s", store.ErrUnavailable, s.where, msg)
}

func esc(s string) string { return url.PathEscape(s) }

func (s *Store) leaseKey(task string) string     { return s.p + "l/" + esc(task) }
func (s *Store) holderKey(task string) string    { return s.p + "h/" + esc(task) }
func (s *Store) fenceKey(task string) string     { return s.p + "f/" + esc(task) }
func (s *Store) docKey(task, slot string) string { return s.p + "d/" + esc(task) + "/" + esc(slot) }
func (s *Store) runKey(run string) string        { return s.p + "r/" + esc(run) }

type leaseValue struct {
	Holder   string `json:"holder"`
	RunID    string `json:"run_id"`
	Acquired int64  `json:"acquired_us"`
	Expires  int64  `json:"expires_us"`
	TTL      int64  `json:"ttl_s"` // the etcd lease's granted TTL
}

func (s *Store) decode(task string, kv *clientv3.GetResponse) (store.Lease, int64, error) {
	k := kv.Kvs[0]
	var v leaseValue
	if err := json.Unmarshal(k.Value, &v); err != nil {
		return store.Lease{}, 0, fmt.Errorf("%w: corrupt lease of task %q in etcd: %v", store.ErrUnavailable, task, err)
	}
	return store.Lease{Task: task, Holder: v.Holder, RunID: v.RunID, Token: k.CreateRevision,
		Acquired: time.UnixMicro(v.Acquired), Expires: time.UnixMicro(v.Expires)}, k.Lease, nil
}

// seconds rounds a TTL up to whole seconds, etcd's lease granularity.
func seconds(ttl time.Duration) int64 { return max(1, int64((ttl+time.Second-1)/time.Second)) }

// Acquire grants the lease when the key does not exist: an etcd lease grant plus one transaction.
// Times are this client's clock; expiry itself is enforced by etcd. See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if req.TTL < time.Millisecond {
		return store.Lease{}, fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	sent := time.Now()
	g, err := s.grant(ctx, seconds(req.TTL))
	if err != nil {
		return store.Lease{}, err
	}
	ttl := time.Duration(g.TTL) * time.Second
	v, _ := json.Marshal(leaseValue{Holder: req.Holder, RunID: req.RunID, Acquired: sent.UnixMicro(), Expires: sent.Add(ttl).UnixMicro(), TTL: g.TTL})
	key := s.leaseKey(req.Task)
	r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(v), clientv3.WithLease(g.ID)), clientv3.OpPut(s.holderKey(req.Task), req.Holder, clientv3.WithLease(g.ID)),
			clientv3.OpPut(s.fenceKey(req.Task), "")).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		s.revoke(g.ID)
		return store.Lease{}, s.mapErr(err)
	}
	if !r.Succeeded {
		s.putBack(g)
		gr := (*clientv3.GetResponse)(r.Responses[0].GetResponseRange())
		if len(gr.Kvs) == 0 { // expired between compare and read: report busy without a holder
			return store.Lease{}, &store.BusyError{Lease: store.Lease{Task: req.Task}}
		}
		l, _, err := s.decode(req.Task, gr)
		if err != nil {
			return store.Lease{}, err
		}
		return store.Lease{}, &store.BusyError{Lease: l}
	}
	return store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: r.Header.Revision,
		Acquired: time.UnixMicro(sent.UnixMicro()), Expires: time.UnixMicro(sent.Add(ttl).UnixMicro())}, nil
}

// grant returns an etcd lease of ttl seconds with its full TTL ahead: an idle one this store kept
// (refreshed by KeepAliveOnce, which is not a raft write) or a new grant. Reusing leases keeps an
// acquire+release at two raft writes, like concurrency.Mutex.
func (s *Store) grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	for {
		s.mu.Lock()
		idle := s.idle[ttl]
		var g *clientv3.LeaseGrantResponse
		if n := len(idle); n > 0 {
			g, s.idle[ttl] = idle[n-1], idle[:n-1]
		}
		s.mu.Unlock()
		if g == nil {
			break
		}
		if ka, err := s.c.KeepAliveOnce(ctx, g.ID); err == nil && ka.TTL == g.TTL {
			return g, nil
		}
	}
	g, err := s.c.Grant(ctx, ttl)
	if err != nil {
		return nil, s.mapErr(err)
	}
	g.TTL = max(g.TTL, 1)
	return g, nil
}

// putBack keeps an etcd lease that no key uses any more for the next Acquire with its TTL.
func (s *Store) putBack(g *clientv3.LeaseGrantResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := g.TTL
	if len(s.idle[key]) >= 4 {
		s.mu.Unlock()
		s.revoke(g.ID)
		s.mu.Lock()
		return
	}
	s.idle[key] = append(s.idle[key], g)
}

// revoke gives an unused etcd lease back in the background (it would expire anyway).
func (s *Store) revoke(id clientv3.LeaseID) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		_, _ = s.c.Revoke(ctx, id)
	}()
}

// current returns the grant of l.Task when it is l's (same token and holder), with its etcd lease.
func (s *Store) current(ctx context.Context, l store.Lease) (store.Lease, clientv3.LeaseID, error) {
	gr, err := s.c.Get(ctx, s.leaseKey(l.Task))
	if err != nil {
		return store.Lease{}, 0, s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return store.Lease{}, 0, fmt.Errorf("%w: task %q has no lease (expired or released)", store.ErrNotHeld, l.Task)
	}
	cur, id, err := s.decode(l.Task, gr)
	if err != nil {
		return store.Lease{}, 0, err
	}
	if cur.Token != l.Token || cur.Holder != l.Holder {
		return store.Lease{}, 0, fmt.Errorf("%w: task %q is held by %q with token %d, not %q with token %d", store.ErrNotHeld, l.Task, cur.Holder, cur.Token, l.Holder, l.Token)
	}
	return cur, clientv3.LeaseID(id), nil
}

// Renew keeps l's etcd lease alive (KeepAliveOnce) and records the new expiry. A ttl that rounds
// to a different number of seconds than the grant moves the key to a fresh etcd lease.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	cur, id, err := s.current(ctx, l)
	if err != nil {
		return store.Lease{}, err
	}
	sent := time.Now()
	want := seconds(ttl)
	newID := id
	var got time.Duration
	ka, err := s.c.KeepAliveOnce(ctx, id)
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	got = time.Duration(ka.TTL) * time.Second
	if ka.TTL < want || ka.TTL > max(want, 2) { // etcd's minimum lease is 2s by default
		g, err := s.c.Grant(ctx, want)
		if err != nil {
			return store.Lease{}, s.mapErr(err)
		}
		newID, got = g.ID, time.Duration(g.TTL)*time.Second
	}
	cur.Expires = time.UnixMicro(sent.Add(got).UnixMicro())
	v, _ := json.Marshal(leaseValue{Holder: cur.Holder, RunID: cur.RunID, Acquired: cur.Acquired.UnixMicro(), Expires: cur.Expires.UnixMicro(), TTL: int64(got / time.Second)})
	key := s.leaseKey(l.Task)
	r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", l.Token), clientv3.Compare(clientv3.LeaseValue(key), "=", id)).
		Then(clientv3.OpPut(key, string(v), clientv3.WithLease(newID)), clientv3.OpPut(s.holderKey(l.Task), cur.Holder, clientv3.WithLease(newID))).Commit()
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	if !r.Succeeded {
		if newID != id {
			s.revoke(newID)
		}
		return store.Lease{}, fmt.Errorf("%w: task %q token %d was replaced during renewal", store.ErrNotHeld, l.Task, l.Token)
	}
	if newID != id {
		s.revoke(id)
	}
	return cur, nil
}

// Release deletes l's keys in one transaction that compares the token (create revision) and the
// holder, then revokes the etcd lease in the background. An expired grant nobody replaced (the
// fence still carries its token) releases fine. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	key, hkey := s.leaseKey(l.Task), s.holderKey(l.Task)
	r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", l.Token), clientv3.Compare(clientv3.Value(hkey), "=", l.Holder)).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV()), clientv3.OpDelete(hkey)).
		Else(clientv3.OpGet(key), clientv3.OpGet(s.fenceKey(l.Task))).Commit()
	if err != nil {
		return s.mapErr(err)
	}
	if r.Succeeded {
		if prev := r.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) > 0 && prev[0].Lease != 0 {
			var v leaseValue
			if json.Unmarshal(prev[0].Value, &v) == nil && v.TTL > 0 {
				s.putBack(&clientv3.LeaseGrantResponse{ID: clientv3.LeaseID(prev[0].Lease), TTL: v.TTL})
			} else {
				s.revoke(clientv3.LeaseID(prev[0].Lease))
			}
		}
		return nil
	}
	cur, fence := r.Responses[0].GetResponseRange().Kvs, r.Responses[1].GetResponseRange().Kvs
	if len(cur) == 0 && len(fence) > 0 && fence[0].ModRevision == l.Token {
		return nil
	}
	return fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// Leases lists the grants whose keys exist and whose recorded expiry has not passed.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	gr, err := s.c.Get(ctx, s.p+"l/", clientv3.WithPrefix())
	if err != nil {
		return nil, s.mapErr(err)
	}
	now := time.Now()
	out := []store.Lease{}
	for _, k := range gr.Kvs {
		task, err := url.PathUnescape(strings.TrimPrefix(string(k.Key), s.p+"l/"))
		if err != nil {
			continue
		}
		var v leaseValue
		if err := json.Unmarshal(k.Value, &v); err != nil {
			return nil, fmt.Errorf("%w: corrupt lease of task %q in etcd: %v", store.ErrUnavailable, task, err)
		}
		if time.UnixMicro(v.Expires).Before(now) {
			continue
		}
		out = append(out, store.Lease{Task: task, Holder: v.Holder, RunID: v.RunID, Token: k.CreateRevision,
			Acquired: time.UnixMicro(v.Acquired), Expires: time.UnixMicro(v.Expires)})
	}
	return out, nil
}

// Lost returns a channel closed when l's key is deleted (expiry, revocation, release) or replaced.
// It watches from l's token, so a loss before the call is seen too.
func (s *Store) Lost(l store.Lease) <-chan struct{} {
	ch := make(chan struct{})
	key := s.leaseKey(l.Task)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		defer cancel()
		for s.ctx.Err() == nil {
			wc := s.c.Watch(ctx, key, clientv3.WithRev(l.Token))
			for wr := range wc {
				if wr.CompactRevision != 0 { // history gone: look at the key itself
					gr, err := s.c.Get(ctx, key)
					if err == nil && (len(gr.Kvs) == 0 || gr.Kvs[0].CreateRevision != l.Token) {
						close(ch)
						return
					}
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != l.Token {
						close(ch)
						return
					}
				}
			}
			select { // the watch ended (no leader, connection): retry
			case <-s.ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return ch
}

// --- ledger ---

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvledger.Doc, kvledger.Version, time.Time, error) {
	gr, err := k.s.c.Get(ctx, k.s.docKey(task, slot))
	if err != nil {
		return nil, 0, time.Time{}, k.s.mapErr(err)
	}
	now := time.UnixMicro(time.Now().UnixMicro())
	if len(gr.Kvs) == 0 {
		return nil, 0, now, nil
	}
	d, err := kvledger.Unmarshal(gr.Kvs[0].Value)
	return d, gr.Kvs[0].ModRevision, now, err
}

func (k kv) Save(ctx context.Context, d *kvledger.Doc, ver kvledger.Version, token int64, run string) error {
	s := k.s
	key := s.docKey(d.Task, d.Slot)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", ver)}
	if token > 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.fenceKey(d.Task)), "=", token))
	}
	ops := []clientv3.Op{clientv3.OpPut(key, string(d.Marshal()))}
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		ops = append(ops, clientv3.OpPut(s.runKey(run), string(b)))
	}
	r, err := s.c.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(s.fenceKey(d.Task))).Commit()
	if err != nil {
		return s.mapErr(err)
	}
	if r.Succeeded {
		return nil
	}
	if token > 0 {
		gr := r.Responses[0].GetResponseRange()
		latest := int64(0)
		if len(gr.Kvs) > 0 {
			latest = gr.Kvs[0].ModRevision
		}
		if latest != token {
			return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d)", store.ErrNotHeld, token, d.Task, latest)
		}
	}
	return kvledger.ErrStale
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	gr, err := k.s.c.Get(ctx, k.s.runKey(runID))
	if err != nil {
		return "", "", k.s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return "", "", fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
	}
	var ts [2]string
	if err := json.Unmarshal(gr.Kvs[0].Value, &ts); err != nil {
		return "", "", fmt.Errorf("%w: corrupt run index for %q", store.ErrUnavailable, runID)
	}
	return ts[0], ts[1], nil
}

func (k kv) Latest(ctx context.Context, task string) (int64, error) {
	gr, err := k.s.c.Get(ctx, k.s.fenceKey(task))
	if err != nil {
		return 0, k.s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return 0, nil
	}
	return gr.Kvs[0].ModRevision, nil
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvledger.Doc, error) {
	p := k.s.p + "d/"
	if task != "" {
		p += esc(task) + "/"
	}
	gr, err := k.s.c.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, k.s.mapErr(err)
	}
	out := make([]*kvledger.Doc, 0, len(gr.Kvs))
	for _, kv := range gr.Kvs {
		d, err := kvledger.Unmarshal(kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Ledger methods: see store.Ledger; the logic is internal/kvledger's.

// Begin records a running attempt, fenced by a.Token.
func (s *Store) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	return s.kvl.Begin(ctx, a)
}

// Finish ends the running attempt runID, fenced by token.
func (s *Store) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	return s.kvl.Finish(ctx, runID, token, o)
}

// Report attaches figures to the running attempt runID, fenced by token.
func (s *Store) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	return s.kvl.Report(ctx, runID, token, r)
}

// Abandon marks task's running attempts under older tokens unknown.
func (s *Store) Abandon(ctx context.Context, task string, token int64) ([]store.Attempt, error) {
	return s.kvl.Abandon(ctx, task, token)
}

// Resolve attaches a person's decision to a slot's last attempt.
func (s *Store) Resolve(ctx context.Context, r store.ResolveRequest) (store.Attempt, error) {
	return s.kvl.Resolve(ctx, r)
}

// Record keeps an event.
func (s *Store) Record(ctx context.Context, e store.Event) error { return s.kvl.Record(ctx, e) }

// Slot reads one slot.
func (s *Store) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	return s.kvl.Slot(ctx, task, slot)
}

// History lists attempts and events, newest first.
func (s *Store) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	return s.kvl.History(ctx, q)
}

// Waiting lists the slots waiting for a person, oldest first.
func (s *Store) Waiting(ctx context.Context) ([]store.SlotState, error) {
	return s.kvl.Waiting(ctx)
}
