// Package etcd is the etcd v3 store: etcd://[user:password@]host:port[,host:port…][/][?prefix=name].
//
// It talks to etcd's gRPC gateway (JSON over HTTP, /v3/…, on by default since etcd 3.4) with
// net/http only: linking the gRPC client would run the package init of grpc, protobuf and zap at
// every start of the once binary, whichever store it uses (see docs/stores/etcd.md).
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
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/once-run/once/internal/kvledger"
	"github.com/once-run/once/store"
)

func init() {
	store.Register("etcd", func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }, store.TakesPassword)
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
	Dial      time.Duration // dial_timeout, default store.ConnectTimeout
}

// Params are the query parameters an etcd:// DSN accepts (docs/stores/etcd.md).
var Params = []string{"prefix", "dial_timeout"}

var spec = store.QuerySpec{Store: "etcd", Doc: "docs/stores/etcd.md", Known: Params}

// ParseDSN parses etcd://[user:password@]host:port[,host:port…][/][?prefix=&dial_timeout=]
// strictly (store.SplitDSN, Params). Errors wrap store.ErrBadDSN and never contain the password.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s in %q; use etcd://host:2379[,host:2379]?prefix=name", store.ErrBadDSN, fmt.Sprintf(format, a...), store.Redact(dsn))
	}
	hostpart, q, err := store.SplitDSN(spec, dsn, "etcd")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Prefix: "once", Dial: store.ConnectTimeout}
	hostpart = strings.TrimSuffix(hostpart, "/")
	if i := strings.LastIndex(hostpart, "@"); i >= 0 {
		ui := hostpart[:i]
		hostpart = hostpart[i+1:]
		user, pw, _ := strings.Cut(ui, ":")
		var err1, err2 error
		cfg.Username, err1 = url.PathUnescape(user)
		cfg.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return bad("bad percent-escape in the user or password (write '%%' as %%25)")
		}
		if cfg.Username == "" && cfg.Password != "" {
			return bad("a password without a user name (etcd authenticates a user: etcd://USER:PASSWORD@host)")
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
	if v, ok := q["prefix"]; ok {
		cfg.Prefix = v
	}
	if v, ok := q["dial_timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond || d > time.Hour {
			return Config{}, fmt.Errorf("%w: etcd parameter \"dial_timeout\" is %q: give a duration between 1ms and 1h, e.g. 5s", store.ErrBadDSN, v)
		}
		cfg.Dial = d
	}
	return cfg, nil
}

// Store is an etcd store. Safe for concurrent use.
type Store struct {
	c               *client
	p               string          // "/once/<prefix>/"
	where           string          // endpoints, for errors
	kvledger.Ledger                 // the run ledger (store.Ledger), written once for the KV stores
	ctx             context.Context // cancelled by Close: watches and background revokes
	cancel          context.CancelFunc
	wg              sync.WaitGroup

	mu   sync.Mutex
	idle map[int64][]idleLease // etcd leases no key uses, by TTL, for reuse
}

// idleLease is an etcd lease this store granted or kept alive and no key uses any more.
type idleLease struct {
	id, ttl int64
	fresh   time.Time // when its TTL last restarted, at the latest (a request's send time)
}

// Open connects to etcd's gRPC gateway, authenticates when the DSN has a user, and checks that the
// cluster answers.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{c: newClient(cfg), p: "/once/" + cfg.Prefix + "/", where: strings.Join(cfg.Endpoints, ","), idle: map[int64][]idleLease{}}
	s.Ledger = kvledger.Ledger{KV: kv{s}}
	pctx, cancel, bound := store.Connecting(ctx, cfg.Dial)
	defer cancel()
	fail := func(err error) (*Store, error) {
		s.c.close()
		if pctx.Err() != nil && ctx.Err() == nil {
			return nil, store.Unreached("etcd at "+s.where, bound)
		}
		return nil, s.mapErr(err)
	}
	if cfg.Username != "" {
		if err := s.c.login(pctx); err != nil {
			return fail(err)
		}
	}
	// One read proves the endpoints, the gateway and the credentials.
	if _, err := s.c.get(pctx, s.p+"epoch"); err != nil {
		return fail(err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the watches, revokes the idle etcd leases and closes connections. Leases held by
// callers are not released.
func (s *Store) Close() error {
	s.mu.Lock()
	var ids []int64
	for _, gs := range s.idle {
		for _, g := range gs {
			ids = append(ids, g.id)
		}
	}
	s.idle = map[int64][]idleLease{}
	s.mu.Unlock()
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		for _, id := range ids {
			_ = s.c.revoke(ctx, id)
		}
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	s.c.close()
	return nil
}

// mapErr maps every error of the gateway client to a store sentinel, in one line.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.Code == codeNotFound && strings.Contains(ae.Message, "lease not found"):
			return fmt.Errorf("%w: etcd lease not found (expired or revoked)", store.ErrNotHeld)
		case ae.Code == codeUnauthenticated, ae.Code == codePermission, strings.Contains(ae.Message, "authentication failed"),
			strings.Contains(ae.Message, "user name is empty"), strings.Contains(ae.Message, "authentication is not enabled"):
			return fmt.Errorf("%w: etcd at %s refused the credentials: %s; check user and password in the DSN", store.ErrUnavailable, s.where, msg)
		case ae.Code == codeUnavailable, ae.Code == codeDeadline:
			return fmt.Errorf("%w: etcd at %s: %s; check that the cluster is running and has a leader", store.ErrUnavailable, s.where, msg)
		}
		return fmt.Errorf("%w: etcd at %s: %s", store.ErrUnavailable, s.where, msg)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
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

// waitKey is the slot's entry in the index of waiting slots (kvledger.KV.Waiting).
func (s *Store) waitKey(task, slot string) string { return s.p + "w/" + esc(task) + "/" + esc(slot) }

type leaseValue struct {
	Holder   string `json:"holder"`
	RunID    string `json:"run_id"`
	Acquired int64  `json:"acquired_us"`
	Expires  int64  `json:"expires_us"`
	TTL      int64  `json:"ttl_s"` // the etcd lease's granted TTL
}

func (s *Store) decode(task string, k keyValue) (store.Lease, leaseValue, error) {
	var v leaseValue
	if err := json.Unmarshal(k.Value, &v); err != nil {
		return store.Lease{}, v, fmt.Errorf("%w: corrupt lease of task %q in etcd: %v", store.ErrUnavailable, task, err)
	}
	return store.Lease{Task: task, Holder: v.Holder, RunID: v.RunID, Token: int64(k.CreateRevision),
		Acquired: time.UnixMicro(v.Acquired), Expires: time.UnixMicro(v.Expires)}, v, nil
}

// seconds rounds a TTL up to whole seconds, etcd's lease granularity.
func seconds(ttl time.Duration) int64 { return max(1, int64((ttl+time.Second-1)/time.Second)) }

// acquireTxn is the acquire transaction: put the keys on etcd lease id if the key does not exist.
func (s *Store) acquireTxn(ctx context.Context, req store.AcquireRequest, id int64, v []byte) (*txnResp, error) {
	key := s.leaseKey(req.Task)
	return s.c.txn(ctx, txnReq{
		Compare: []compare{cmpCreate(key, 0)},
		Success: []op{opPut(key, string(v), id), opPut(s.holderKey(req.Task), req.Holder, id), opPut(s.fenceKey(req.Task), "", 0)},
		Failure: []op{opGet(key)},
	})
}

// Acquire grants the lease when the key does not exist: one transaction on an etcd lease of
// ceil(ttl) seconds. The etcd lease is a reused idle one, renewed by a keep-alive sent alongside
// the transaction, or a new grant. Times are this client's clock; expiry itself is enforced by
// etcd. See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if req.TTL < time.Millisecond {
		return store.Lease{}, fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	sent := time.Now()
	want := seconds(req.TTL)
	value := func(ttl int64) []byte {
		v, _ := json.Marshal(leaseValue{Holder: req.Holder, RunID: req.RunID, Acquired: sent.UnixMicro(),
			Expires: sent.Add(time.Duration(ttl) * time.Second).UnixMicro(), TTL: ttl})
		return v
	}
	var (
		r   *txnResp
		g   idleLease
		err error
	)
	if g0, ok := s.takeIdle(want, sent); ok {
		// The idle lease has at least half its TTL left, so it outlives both requests: send the
		// keep-alive that restarts its TTL and the transaction at once (one round trip).
		type kaResult struct {
			r   leaseResp
			err error
		}
		kc := make(chan kaResult, 1)
		go func() {
			kr, kerr := s.c.keepAliveOnce(ctx, g0.id)
			kc <- kaResult{kr, kerr}
		}()
		r, err = s.acquireTxn(ctx, req, g0.id, value(g0.ttl))
		ka := <-kc
		switch {
		case ka.err == nil && int64(ka.r.TTL) == g0.ttl && err == nil:
			g = idleLease{id: g0.id, ttl: g0.ttl, fresh: sent}
		case err == nil && r.Succeeded:
			// Granted on a lease whose renewal failed: its expiry is not what the value says. Undo,
			// fail closed.
			_, _ = s.c.txn(ctx, txnReq{Compare: []compare{cmpCreate(s.leaseKey(req.Task), int64(r.Header.Revision))},
				Success: []op{opDel(s.leaseKey(req.Task), false), opDel(s.holderKey(req.Task), false)}})
			s.revoke(g0.id)
			if ka.err == nil {
				ka.err = fmt.Errorf("etcd lease %d vanished during acquire", g0.id)
			}
			return store.Lease{}, s.mapErr(ka.err)
		case err == nil: // busy, and the idle lease is gone or was not renewed
			s.revoke(g0.id)
		default:
			if ka.err == nil && int64(ka.r.TTL) == g0.ttl { // a transport error: the lease is still good
				s.putBack(idleLease{id: g0.id, ttl: g0.ttl, fresh: sent})
			}
			if !errors.Is(s.mapErr(err), store.ErrNotHeld) {
				return store.Lease{}, s.mapErr(err)
			}
			r = nil // the lease is gone: take a new one below
		}
	}
	if r == nil {
		lr, gerr := s.c.grant(ctx, want)
		if gerr != nil {
			return store.Lease{}, s.mapErr(gerr)
		}
		g = idleLease{id: int64(lr.ID), ttl: max(int64(lr.TTL), 1), fresh: sent}
		r, err = s.acquireTxn(ctx, req, g.id, value(g.ttl))
		if err != nil {
			s.revoke(g.id)
			return store.Lease{}, s.mapErr(err)
		}
	}
	if !r.Succeeded {
		if g.id != 0 {
			s.putBack(g)
		}
		var kvs []keyValue
		if len(r.Responses) > 0 && r.Responses[0].Range != nil {
			kvs = r.Responses[0].Range.Kvs
		}
		if len(kvs) == 0 { // expired between compare and read: report busy without a holder
			return store.Lease{}, &store.BusyError{Lease: store.Lease{Task: req.Task}}
		}
		l, _, err := s.decode(req.Task, kvs[0])
		if err != nil {
			return store.Lease{}, err
		}
		return store.Lease{}, &store.BusyError{Lease: l}
	}
	ttl := time.Duration(g.ttl) * time.Second
	return store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: int64(r.Header.Revision),
		Acquired: time.UnixMicro(sent.UnixMicro()), Expires: time.UnixMicro(sent.Add(ttl).UnixMicro())}, nil
}

// takeIdle returns an idle etcd lease of ttl seconds with at least half of it left at now.
// Reusing leases keeps an acquire+release at two raft writes, like concurrency.Mutex.
func (s *Store) takeIdle(ttl int64, now time.Time) (idleLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for idle := s.idle[ttl]; len(idle) > 0; idle = s.idle[ttl] {
		g := idle[len(idle)-1]
		s.idle[ttl] = idle[:len(idle)-1]
		if now.Sub(g.fresh) < time.Duration(ttl)*time.Second/2 {
			return g, true
		}
		s.revokeLocked(g.id)
	}
	return idleLease{}, false
}

// putBack keeps an etcd lease that no key uses any more for the next Acquire with its TTL.
func (s *Store) putBack(g idleLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle[g.ttl]) >= 4 || time.Since(g.fresh) >= time.Duration(g.ttl)*time.Second/2 {
		s.revokeLocked(g.id)
		return
	}
	s.idle[g.ttl] = append(s.idle[g.ttl], g)
}

// revoke gives an unused etcd lease back in the background (it would expire anyway).
func (s *Store) revoke(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revokeLocked(id)
}

func (s *Store) revokeLocked(id int64) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		_ = s.c.revoke(ctx, id)
	}()
}

// current returns the grant of l.Task when it is l's (same token and holder), with its etcd lease.
func (s *Store) current(ctx context.Context, l store.Lease) (store.Lease, int64, error) {
	gr, err := s.c.get(ctx, s.leaseKey(l.Task))
	if err != nil {
		return store.Lease{}, 0, s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return store.Lease{}, 0, fmt.Errorf("%w: task %q has no lease (expired or released)", store.ErrNotHeld, l.Task)
	}
	cur, _, err := s.decode(l.Task, gr.Kvs[0])
	if err != nil {
		return store.Lease{}, 0, err
	}
	if cur.Token != l.Token || cur.Holder != l.Holder {
		return store.Lease{}, 0, fmt.Errorf("%w: task %q is held by %q with token %d, not %q with token %d", store.ErrNotHeld, l.Task, cur.Holder, cur.Token, l.Holder, l.Token)
	}
	return cur, int64(gr.Kvs[0].Lease), nil
}

// Renew keeps l's etcd lease alive (one keep-alive) and records the new expiry. A ttl that rounds
// to a different number of seconds than the grant moves the key to a fresh etcd lease.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	cur, id, err := s.current(ctx, l)
	if err != nil {
		return store.Lease{}, err
	}
	sent := time.Now()
	want := seconds(ttl)
	newID := id
	ka, err := s.c.keepAliveOnce(ctx, id)
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	if ka.TTL <= 0 {
		return store.Lease{}, fmt.Errorf("%w: etcd lease of task %q token %d not found (expired or revoked)", store.ErrNotHeld, l.Task, l.Token)
	}
	got := time.Duration(ka.TTL) * time.Second
	if int64(ka.TTL) < want || int64(ka.TTL) > max(want, 2) { // etcd's minimum lease is 2s by default
		g, err := s.c.grant(ctx, want)
		if err != nil {
			return store.Lease{}, s.mapErr(err)
		}
		newID, got = int64(g.ID), time.Duration(g.TTL)*time.Second
	}
	cur.Expires = time.UnixMicro(sent.Add(got).UnixMicro())
	v, _ := json.Marshal(leaseValue{Holder: cur.Holder, RunID: cur.RunID, Acquired: cur.Acquired.UnixMicro(), Expires: cur.Expires.UnixMicro(), TTL: int64(got / time.Second)})
	key := s.leaseKey(l.Task)
	r, err := s.c.txn(ctx, txnReq{
		Compare: []compare{cmpCreate(key, l.Token), cmpLease(key, id)},
		Success: []op{opPut(key, string(v), newID), opPut(s.holderKey(l.Task), cur.Holder, newID)},
	})
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
// holder, then keeps the etcd lease for reuse. An expired grant nobody replaced (the fence still
// carries its token) releases fine. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	key, hkey := s.leaseKey(l.Task), s.holderKey(l.Task)
	r, err := s.c.txn(ctx, txnReq{
		Compare: []compare{cmpCreate(key, l.Token), cmpValue(hkey, l.Holder)},
		Success: []op{opDel(key, true), opDel(hkey, false)},
		Failure: []op{opGet(key), opGet(s.fenceKey(l.Task))},
	})
	if err != nil {
		return s.mapErr(err)
	}
	if r.Succeeded {
		if len(r.Responses) > 0 && r.Responses[0].Delete != nil {
			if prev := r.Responses[0].Delete.PrevKvs; len(prev) > 0 && prev[0].Lease != 0 {
				var v leaseValue
				if json.Unmarshal(prev[0].Value, &v) == nil && v.TTL > 0 {
					// Its TTL last restarted when the recorded expiry was computed.
					s.putBack(idleLease{id: int64(prev[0].Lease), ttl: v.TTL, fresh: time.UnixMicro(v.Expires).Add(-time.Duration(v.TTL) * time.Second)})
				} else {
					s.revoke(int64(prev[0].Lease))
				}
			}
		}
		return nil
	}
	var cur, fence []keyValue
	if len(r.Responses) == 2 && r.Responses[0].Range != nil && r.Responses[1].Range != nil {
		cur, fence = r.Responses[0].Range.Kvs, r.Responses[1].Range.Kvs
	}
	if len(cur) == 0 && len(fence) > 0 && int64(fence[0].ModRevision) == l.Token {
		return nil
	}
	return fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// Leases lists the grants whose keys exist and whose recorded expiry has not passed.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	gr, err := s.c.getPrefix(ctx, s.p+"l/")
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
		l, _, err := s.decode(task, k)
		if err != nil {
			return nil, err
		}
		if l.Expires.Before(now) {
			continue
		}
		out = append(out, l)
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
		for s.ctx.Err() == nil {
			if s.watchLoss(key, l.Token) {
				close(ch)
				return
			}
			select { // the watch ended (no leader, connection): retry
			case <-s.ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return ch
}

// watchLoss watches key from revision token until the stream ends; true when the grant is gone.
func (s *Store) watchLoss(key string, token int64) bool {
	st, err := s.c.watch(s.ctx, key, token)
	if err != nil {
		return false
	}
	defer st.close()
	for {
		var wr watchResp
		if err := st.next(&wr); err != nil {
			return false
		}
		if wr.CompactRevision != 0 { // history gone: look at the key itself
			gr, err := s.c.get(s.ctx, key)
			if err == nil && (len(gr.Kvs) == 0 || int64(gr.Kvs[0].CreateRevision) != token) {
				return true
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == "DELETE" || int64(ev.Kv.CreateRevision) != token {
				return true
			}
		}
		if wr.Canceled {
			return false
		}
	}
}

// --- ledger ---

type kv struct{ s *Store }

func (k kv) Load(ctx context.Context, task, slot string) (*kvledger.Doc, kvledger.Version, time.Time, error) {
	gr, err := k.s.c.get(ctx, k.s.docKey(task, slot))
	if err != nil {
		return nil, 0, time.Time{}, k.s.mapErr(err)
	}
	now := time.UnixMicro(time.Now().UnixMicro())
	if len(gr.Kvs) == 0 {
		return nil, 0, now, nil
	}
	d, err := kvledger.Unmarshal(gr.Kvs[0].Value)
	return d, int64(gr.Kvs[0].ModRevision), now, err
}

func (k kv) Save(ctx context.Context, d *kvledger.Doc, ver kvledger.Version, token int64, run string) error {
	s := k.s
	key := s.docKey(d.Task, d.Slot)
	cmps := []compare{cmpMod(key, ver)}
	if token > 0 {
		cmps = append(cmps, cmpMod(s.fenceKey(d.Task), token))
	}
	ops := []op{opPut(key, string(d.Marshal()), 0)}
	if t, ok := d.Waits(); ok { // the index of waiting slots, in the same transaction
		ops = append(ops, opPut(s.waitKey(d.Task, d.Slot), strconv.FormatInt(t.UnixMicro(), 10), 0))
	} else { // no-op when absent; also clears an entry an older once left
		ops = append(ops, opDel(s.waitKey(d.Task, d.Slot), false))
	}
	if run != "" {
		b, _ := json.Marshal([2]string{d.Task, d.Slot})
		ops = append(ops, opPut(s.runKey(run), string(b), 0))
	}
	r, err := s.c.txn(ctx, txnReq{Compare: cmps, Success: ops, Failure: []op{opGet(s.fenceKey(d.Task))}})
	if err != nil {
		return s.mapErr(err)
	}
	if r.Succeeded {
		return nil
	}
	if token > 0 {
		latest := int64(0)
		if len(r.Responses) > 0 && r.Responses[0].Range != nil && len(r.Responses[0].Range.Kvs) > 0 {
			latest = int64(r.Responses[0].Range.Kvs[0].ModRevision)
		}
		if latest != token {
			return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d)", store.ErrNotHeld, token, d.Task, latest)
		}
	}
	return kvledger.ErrStale
}

func (k kv) Run(ctx context.Context, runID string) (string, string, error) {
	gr, err := k.s.c.get(ctx, k.s.runKey(runID))
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
	gr, err := k.s.c.get(ctx, k.s.fenceKey(task))
	if err != nil {
		return 0, k.s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return 0, nil
	}
	return int64(gr.Kvs[0].ModRevision), nil
}

func (k kv) Docs(ctx context.Context, task string) ([]*kvledger.Doc, error) {
	p := k.s.p + "d/"
	if task != "" {
		p += esc(task) + "/"
	}
	gr, err := k.s.c.getPrefix(ctx, p)
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

// waitingIndexed marks the index of waiting slots as built (kvledger.KV.Index).
func (s *Store) waitingIndexed() string { return s.p + "meta/waiting-indexed" }

// Waiting reads the index of waiting slots (one range) and their documents: it costs the slots
// waiting, not the ledger.
func (k kv) Waiting(ctx context.Context) ([]*kvledger.Doc, bool, error) {
	s := k.s
	m, err := s.c.get(ctx, s.waitingIndexed())
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	if len(m.Kvs) == 0 {
		return nil, false, nil
	}
	gr, err := s.c.getPrefix(ctx, s.p+"w/")
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	var out []*kvledger.Doc
	for _, w := range gr.Kvs {
		dk := s.p + "d/" + strings.TrimPrefix(string(w.Key), s.p+"w/")
		dr, err := s.c.get(ctx, dk)
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		if len(dr.Kvs) == 0 {
			continue
		}
		d, err := kvledger.Unmarshal(dr.Kvs[0].Value)
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
	for _, d := range docs {
		if t, ok := d.Waits(); ok {
			if _, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.waitKey(d.Task, d.Slot), strconv.FormatInt(t.UnixMicro(), 10), 0)}}); err != nil {
				return s.mapErr(err)
			}
		}
	}
	_, err := s.c.txn(ctx, txnReq{Success: []op{opPut(s.waitingIndexed(), "1", 0)}})
	return s.mapErr(err)
}

// Delete removes the document and its index entry when it is still version ver.
func (k kv) Delete(ctx context.Context, d *kvledger.Doc, ver kvledger.Version) error {
	s := k.s
	key := s.docKey(d.Task, d.Slot)
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(key, ver)},
		Success: []op{opDel(key, false), opDel(s.waitKey(d.Task, d.Slot), false)}})
	if err != nil {
		return s.mapErr(err)
	}
	if !r.Succeeded {
		return kvledger.ErrStale
	}
	return nil
}

// Unrun removes run ids from the run index, up to 100 per transaction.
func (k kv) Unrun(ctx context.Context, runs []string) error {
	s := k.s
	for len(runs) > 0 {
		n := min(len(runs), 100)
		ops := make([]op, n)
		for i, r := range runs[:n] {
			ops[i] = opDel(s.runKey(r), false)
		}
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			return s.mapErr(err)
		}
		runs = runs[n:]
	}
	return nil
}
