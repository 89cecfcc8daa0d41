package etcd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// idleLease is an etcd lease this store granted or kept alive and no key uses any more.
type idleLease struct {
	id, ttl int64
	fresh   time.Time // no later than when its TTL last restarted (the send time of the request that did)
	// sure: fresh is a reading of this process's monotonic clock, taken as it restarted the TTL,
	// not one rebuilt from a recorded wall time (keepDeleted), which a stepped clock makes wrong.
	// Only then is the lease used without a keep-alive (acquireOnIdle).
	sure bool
}

// endFrom is when the etcd lease ends at the earliest, on the wall clock as read at now: now plus
// what is left of its TTL, by the monotonic clock when fresh and now are both its readings.
func (g idleLease) endFrom(now time.Time) time.Time {
	return now.Add(time.Duration(g.ttl)*time.Second - now.Sub(g.fresh))
}

type leaseValue struct {
	Holder   string `json:"holder"`
	RunID    string `json:"run_id"`
	Acquired int64  `json:"acquired_us"`
	Expires  int64  `json:"expires_us"`
	TTL      int64  `json:"ttl_s"`           // the etcd lease's granted TTL
	Limit    int    `json:"limit,omitempty"` // a seat's (seats.go)
}

func (s *Store) decode(task string, k keyValue) (store.Lease, leaseValue, error) {
	var v leaseValue
	if err := json.Unmarshal(k.Value, &v); err != nil {
		return store.Lease{}, v, fmt.Errorf("%w: corrupt lease of task %q in etcd: %v", store.ErrUnavailable, task, err)
	}
	return store.Lease{Task: task, Holder: v.Holder, RunID: v.RunID, Token: int64(k.CreateRevision),
		Acquired: time.UnixMicro(v.Acquired), Expires: time.UnixMicro(v.Expires), Limit: v.Limit}, v, nil
}

// seconds rounds a TTL up to whole seconds, etcd's lease granularity.
func seconds(ttl time.Duration) int64 { return max(1, int64((ttl+time.Second-1)/time.Second)) }

// acquireTxn is the acquire transaction: put the keys on etcd lease id if the key does not exist
// and no seat is live, with the fence and the task index's entry, which stay; the seats' records
// go (their fence ends). A task's first grant (no fence yet) also marks its running index built:
// no attempt can have begun before it (a nested transaction, whose compare sees the store as it
// was before this one). extra ops follow in the success branch (their responses after the
// grant's grantOps).
func (s *Store) acquireTxn(ctx context.Context, req store.AcquireRequest, id int64, v []byte, extra []op) (*txnResp, error) {
	key := s.leaseKey(req.Task)
	first := op{Txn: &txnReq{Compare: []compare{cmpCreate(s.fenceKey(req.Task), 0)}, Success: []op{opPut(s.runningMark(req.Task), "", 0)}}}
	return s.c.txn(ctx, txnReq{
		Compare: []compare{cmpCreate(key, 0), cmpNone(s.seatDir(req.Task))},
		Success: append([]op{first, opPut(key, string(v), id), opPut(s.holderKey(req.Task), req.Holder, id), opPut(s.fenceKey(req.Task), "", 0),
			opPut(s.taskKey(req.Task), "", 0), opDelPrefix(s.recordDir(req.Task))}, extra...),
		Failure: []op{opGet(key), {Range: &rangeReq{Key: []byte(s.seatDir(req.Task)), RangeEnd: prefixEnd(s.seatDir(req.Task)), Limit: 1}}},
	})
}

// Acquire grants the lease when the key does not exist: one transaction on an etcd lease of
// ceil(ttl) seconds. The etcd lease is a reused idle one (renewed by a keep-alive sent alongside
// the transaction unless this process renewed it moments before: acquireOnIdle), or a new grant.
// Times are this client's clock; expiry itself is enforced by etcd. See store.Leaser.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if err := checkAcquire(req); err != nil {
		return store.Lease{}, err
	}
	switch {
	case req.Limit >= 2:
		return s.acquireSeat(ctx, req)
	case req.Replace:
		return s.replace(ctx, req)
	}
	return s.acquire(ctx, req)
}

// grantOps is how many responses of the acquire transaction's success branch are the grant's.
const grantOps = 6

// acquire is Acquire of the exclusive lease, neither a seat nor a takeover.
func (s *Store) acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	l, _, err := s.acquireWith(ctx, req, nil)
	return l, err
}

// acquireWith is acquire with extra ops in the transaction's success branch, whose responses it
// returns too (after the grant's grantOps).
func (s *Store) acquireWith(ctx context.Context, req store.AcquireRequest, extra []op) (store.Lease, *txnResp, error) {
	sent := time.Now()
	want := seconds(req.TTL)
	var (
		r   *txnResp
		g   idleLease
		err error
	)
	if g0, ok := s.takeIdle(want, sent); ok {
		if g, r, err = s.acquireOnIdle(ctx, req, g0, sent, extra); err != nil {
			return store.Lease{}, nil, err
		}
	}
	if r == nil {
		lr, gerr := s.c.grant(ctx, want)
		if gerr != nil {
			return store.Lease{}, nil, s.mapErr(gerr)
		}
		g = idleLease{id: int64(lr.ID), ttl: max(int64(lr.TTL), 1), fresh: sent, sure: true}
		r, err = s.acquireTxn(ctx, req, g.id, s.value(req, sent, g), extra)
		if err != nil {
			s.revoke(g.id)
			return store.Lease{}, nil, s.mapErr(err)
		}
	}
	if !r.Succeeded {
		if g.id != 0 {
			s.putBack(g)
		}
		return store.Lease{}, nil, s.busy(req.Task, r)
	}
	s.restarted(g)
	return store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: int64(r.Header.Revision),
		Acquired: time.UnixMicro(sent.UnixMicro()), Expires: time.UnixMicro(g.endFrom(sent).UnixMicro())}, r, nil
}

// renewedJust is how recently an idle etcd lease must have been renewed for an acquire to use it
// as it is: the grant then lasts until that renewal's TTL runs out, less than store.ShortGrant
// short of the TTL asked (a millisecond to spare for the microseconds values are kept in), and its
// Expires says when. A burst of acquires (a daemon's minute, a loop) sends one keep-alive per this
// window instead of one per acquire.
const renewedJust = store.ShortGrant - time.Millisecond

// value is the lease key's value for req, sent at sent, on etcd lease g.
func (s *Store) value(req store.AcquireRequest, sent time.Time, g idleLease) []byte {
	v, _ := json.Marshal(leaseValue{Holder: req.Holder, RunID: req.RunID, Acquired: sent.UnixMicro(),
		Expires: g.endFrom(sent).UnixMicro(), TTL: g.ttl})
	return v
}

// acquireOnIdle is the acquire transaction on idle etcd lease g0: as it is when this process saw
// its TTL restart within renewedJust, else with the keep-alive that restarts its TTL sent alongside
// (the lease has at least half its TTL left, so it outlives both requests: one round trip). The
// age is the monotonic clock's, which a stepped wall clock does not move, and the wall clock must
// agree: the monotonic clock stops while the machine is suspended, etcd's leases run on. It
// returns the etcd lease the grant is on, and a nil answer when g0 turned out to be gone: take a
// new one. After a transport error the transaction may have been applied: g0 is revoked (in the
// background), which takes such a grant with it.
func (s *Store) acquireOnIdle(ctx context.Context, req store.AcquireRequest, g0 idleLease, sent time.Time, extra []op) (idleLease, *txnResp, error) {
	age, wall := sent.Sub(g0.fresh), sent.Round(0).Sub(g0.fresh.Round(0))
	if g0.sure && age >= 0 && age <= renewedJust && wall <= renewedJust {
		r, err := s.acquireTxn(ctx, req, g0.id, s.value(req, sent, g0), extra)
		switch {
		case err == nil:
			return g0, r, nil
		case errors.Is(s.mapErr(err), store.ErrNotHeld): // the etcd lease is gone (revoked)
			return idleLease{}, nil, nil
		}
		s.revoke(g0.id)
		return idleLease{}, nil, s.mapErr(err)
	}
	type kaResult struct {
		r   leaseResp
		err error
	}
	kc := make(chan kaResult, 1)
	go func() {
		kr, kerr := s.c.keepAliveOnce(ctx, g0.id)
		kc <- kaResult{kr, kerr}
	}()
	g := idleLease{id: g0.id, ttl: g0.ttl, fresh: sent, sure: true}
	r, err := s.acquireTxn(ctx, req, g.id, s.value(req, sent, g), extra)
	ka := <-kc
	switch {
	case ka.err == nil && int64(ka.r.TTL) == g0.ttl && err == nil:
		return g, r, nil
	case err == nil && r.Succeeded:
		// Granted on a lease whose renewal failed: its expiry is not what the value says. Undo,
		// fail closed.
		_, _ = s.c.txn(ctx, txnReq{Compare: []compare{cmpCreate(s.leaseKey(req.Task), int64(r.Header.Revision))},
			Success: []op{opDel(s.leaseKey(req.Task), false), opDel(s.holderKey(req.Task), false)}})
		s.revoke(g0.id)
		if ka.err == nil {
			ka.err = fmt.Errorf("etcd lease %d vanished during acquire", g0.id)
		}
		return idleLease{}, nil, s.mapErr(ka.err)
	case err == nil: // busy, and the idle lease is gone or was not renewed
		s.revoke(g0.id)
		return idleLease{}, r, nil
	case errors.Is(s.mapErr(err), store.ErrNotHeld): // the lease is gone: take a new one
		return idleLease{}, nil, nil
	}
	s.revoke(g0.id)
	return idleLease{}, nil, s.mapErr(err)
}

// restarted notes the etcd lease a grant of this process is now on, with fresh as its TTL last
// restarted by this process's monotonic clock, for keepDeleted to keep when the grant is released.
// Notes of etcd leases that have run out (a grant lost, never released) go when there are many.
func (s *Store) restarted(g idleLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) >= 256 {
		for id, k := range s.known {
			if time.Since(k.fresh) > time.Duration(k.ttl)*time.Second {
				delete(s.known, id)
			}
		}
	}
	s.known[g.id] = g
}

// busy is the answer to an acquire transaction that did not succeed: a *store.BusyError naming the
// holder its read found, the exclusive grant's or a seat's (none when it expired between the
// compare and the read).
func (s *Store) busy(task string, r *txnResp) error {
	var kvs []keyValue
	for _, resp := range r.Responses {
		if resp.Range != nil && len(kvs) == 0 {
			kvs = resp.Range.Kvs
		}
	}
	if len(kvs) == 0 {
		return &store.BusyError{Lease: store.Lease{Task: task}}
	}
	l, _, err := s.decode(task, kvs[0])
	if err != nil {
		return err
	}
	return &store.BusyError{Lease: l}
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
	delete(s.known, id)
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
	key, cur, id, err := s.leaseKey(l.Task), store.Lease{}, int64(0), error(nil)
	if l.Limit >= 2 {
		var kv keyValue
		if kv, err = s.liveSeat(ctx, l); err == nil {
			key, id = string(kv.Key), int64(kv.Lease)
			cur, _, err = s.decode(l.Task, kv)
		}
	} else {
		cur, id, err = s.current(ctx, l)
	}
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
	v, _ := json.Marshal(leaseValue{Holder: cur.Holder, RunID: cur.RunID, Acquired: cur.Acquired.UnixMicro(), Expires: cur.Expires.UnixMicro(),
		TTL: int64(got / time.Second), Limit: cur.Limit})
	ops := []op{opPut(key, string(v), newID)}
	if cur.Limit < 2 {
		ops = append(ops, opPut(s.holderKey(l.Task), cur.Holder, newID))
	}
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpCreate(key, l.Token), cmpLease(key, id)}, Success: ops})
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
	s.restarted(idleLease{id: newID, ttl: int64(got / time.Second), fresh: sent, sure: true})
	return cur, nil
}

// Release deletes l's keys in one transaction that compares the token (create revision) and the
// holder, then keeps the etcd lease for reuse. An expired grant nobody replaced (the fence still
// carries its token) releases fine. See store.Leaser.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	if l.Limit >= 2 {
		return s.releaseSeat(ctx, l)
	}
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
		s.keepDeleted(r)
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

// keepDeleted keeps the etcd lease of the key a released transaction's first op deleted (with
// its previous value) for reuse: as this process last restarted it, or, when it does not know the
// lease, with the restart its recorded expiry tells (a wall time: never used without a keep-alive).
func (s *Store) keepDeleted(r *txnResp) {
	if len(r.Responses) == 0 || r.Responses[0].Delete == nil {
		return
	}
	prev := r.Responses[0].Delete.PrevKvs
	if len(prev) == 0 || prev[0].Lease == 0 {
		return
	}
	id := int64(prev[0].Lease)
	s.mu.Lock()
	g, ok := s.known[id]
	delete(s.known, id)
	s.mu.Unlock()
	if ok {
		s.putBack(g)
		return
	}
	var v leaseValue
	if json.Unmarshal(prev[0].Value, &v) == nil && v.TTL > 0 {
		s.putBack(idleLease{id: id, ttl: v.TTL, fresh: time.UnixMicro(v.Expires).Add(-time.Duration(v.TTL) * time.Second)})
	} else {
		s.revoke(id)
	}
}

// Leases lists the grants and seats whose keys exist and whose recorded expiry has not passed,
// in one read.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	r, err := s.c.txn(ctx, txnReq{Success: []op{opRange(s.p+"l/", false), opRange(s.p+"s/", false)}})
	if err != nil {
		return nil, s.mapErr(err)
	}
	if len(r.Responses) != 2 || r.Responses[0].Range == nil || r.Responses[1].Range == nil {
		return nil, fmt.Errorf("%w: etcd at %s: the leases read returned %d responses", store.ErrUnavailable, s.where, len(r.Responses))
	}
	now := time.Now()
	out := []store.Lease{}
	for _, k := range append(r.Responses[0].Range.Kvs, r.Responses[1].Range.Kvs...) {
		name := strings.TrimPrefix(string(k.Key), s.p+"l/")
		if rest, ok := strings.CutPrefix(string(k.Key), s.p+"s/"); ok {
			name, _, _ = strings.Cut(rest, "/") // s/TASK/ID: the task is escaped, '/' too
		}
		task, err := url.PathUnescape(name)
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
		found := l.Limit < 2 // a seat's key is looked up by its token first
		for s.ctx.Err() == nil {
			if !found {
				kv, err := s.liveSeat(s.ctx, l)
				if errors.Is(err, store.ErrNotHeld) {
					close(ch)
					return
				}
				if found = err == nil; found {
					key = string(kv.Key)
				}
			}
			if found && s.watchLoss(key, l.Token) {
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
	var wr watchResp
	st, err := s.c.watch(s.ctx, key, token, &wr)
	if err != nil {
		return false
	}
	defer st.close()
	for first := true; ; first = false {
		if !first {
			wr = watchResp{}
			if err := st.next(&wr); err != nil {
				return false
			}
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

var _ store.TaskLister = (*Store)(nil)

// Tasks lists the task index from the name after on (store.TaskLister): a range of the index's
// keys with a limit, keys only, in one read-only transaction that also counts the index and the
// fence keys (etcd counts in its in-memory index, reading no values). Every grant puts both in its
// transaction and neither is ever deleted, so they differ only when an older once granted leases
// without the index (or the prefix predates it): then the missing entries are put from the fence
// keys, and the page is read again.
func (s *Store) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if err := store.CheckTasksPage(limit); err != nil {
		return nil, err
	}
	dir := s.p + "t/"
	from := []byte(dir)
	if after != "" {
		from = append([]byte(dir+after), 0) // the first key past after's
	}
	page := op{Range: &rangeReq{Key: from, RangeEnd: prefixEnd(dir), Limit: i64(limit), KeysOnly: true}}
	for indexed := false; ; indexed = true {
		r, err := s.c.txn(ctx, txnReq{Success: []op{page, opCount(dir), opCount(s.p + "f/")}})
		if err != nil {
			return nil, s.mapErr(err)
		}
		if len(r.Responses) != 3 || r.Responses[0].Range == nil || r.Responses[1].Range == nil || r.Responses[2].Range == nil {
			return nil, fmt.Errorf("%w: etcd at %s: the task index read returned %d responses", store.ErrUnavailable, s.where, len(r.Responses))
		}
		if indexed || r.Responses[1].Range.Count == r.Responses[2].Range.Count {
			out := make([]string, 0, len(r.Responses[0].Range.Kvs))
			for _, k := range r.Responses[0].Range.Kvs {
				out = append(out, strings.TrimPrefix(string(k.Key), dir))
			}
			return out, nil
		}
		if err := s.indexTasks(ctx); err != nil {
			return nil, err
		}
	}
}

// indexTasks puts the task index's entry of every task with a fence key and none (128 a
// transaction, etcd's default --max-txn-ops). The fence and index keys hold no value.
func (s *Store) indexTasks(ctx context.Context) error {
	fences, err := s.c.getPrefix(ctx, s.p+"f/")
	if err != nil {
		return s.mapErr(err)
	}
	index, err := s.c.getPrefix(ctx, s.p+"t/")
	if err != nil {
		return s.mapErr(err)
	}
	have := make(map[string]bool, len(index.Kvs))
	for _, k := range index.Kvs {
		have[string(k.Key)] = true
	}
	var ops []op
	for _, k := range fences.Kvs {
		task, err := url.PathUnescape(strings.TrimPrefix(string(k.Key), s.p+"f/"))
		if err != nil || have[s.taskKey(task)] {
			continue
		}
		if ops = append(ops, opPut(s.taskKey(task), "", 0)); len(ops) == 128 {
			if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
				return s.mapErr(err)
			}
			ops = nil
		}
	}
	if len(ops) > 0 {
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			return s.mapErr(err)
		}
	}
	return nil
}

// checkAcquire refuses what store.AcquireRequest.Check does, a TTL below 1ms and a bad Limit.
func checkAcquire(req store.AcquireRequest) error {
	if req.TTL < time.Millisecond {
		return fmt.Errorf("%w: lease ttl %s is below 1ms", store.ErrConflict, req.TTL)
	}
	return cmp.Or(req.Check(), store.CheckLimit(req))
}
