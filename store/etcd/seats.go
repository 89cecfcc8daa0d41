package etcd

// Seats (store.AcquireRequest.Limit >= 2, once run --limit). A seat is two keys named by a random
// id, put by one transaction whose revision is the seat's token (both keys' create revision, and
// the fence's mod revision, so tokens keep increasing across seats and exclusive grants):
//
//   - /once/P/s/TASK/ID, the live seat: the grant's JSON on its own etcd lease, so etcd expires it;
//   - /once/P/c/TASK/ID, the seat's record, on no lease: it fences the seat's ledger writes (Save)
//     until a later seat acquire finds the seat expired or an exclusive grant deletes every record.
//
// A seat acquire reads the task's keys, then puts its keys if the fence's mod revision is still
// the one read (every acquire moves it, so the count of live seats read still holds) and no
// exclusive grant exists. The exclusive acquire compares the live seats' range empty.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

func (s *Store) seatDir(task string) string   { return s.p + "s/" + esc(task) + "/" }
func (s *Store) recordDir(task string) string { return s.p + "c/" + esc(task) + "/" }

// grantsView is one read of a task's grants.
type grantsView struct {
	exclusive, seats, records, fence []keyValue
}

// readGrants reads the exclusive grant, the live seats, the seats' records (with values when
// values) and the fence of task in one transaction.
func (s *Store) readGrants(ctx context.Context, task string, values bool) (grantsView, error) {
	r, err := s.c.txn(ctx, txnReq{Success: []op{opGet(s.leaseKey(task)), opRange(s.seatDir(task), false),
		opRange(s.recordDir(task), !values), opGet(s.fenceKey(task))}})
	if err != nil {
		return grantsView{}, s.mapErr(err)
	}
	if len(r.Responses) != 4 {
		return grantsView{}, fmt.Errorf("%w: etcd at %s: the grants read returned %d responses", store.ErrUnavailable, s.where, len(r.Responses))
	}
	var out [4][]keyValue
	for i, resp := range r.Responses {
		if resp.Range == nil {
			return grantsView{}, fmt.Errorf("%w: etcd at %s: the grants read returned no range", store.ErrUnavailable, s.where)
		}
		out[i] = resp.Range.Kvs
	}
	return grantsView{exclusive: out[0], seats: out[1], records: out[2], fence: out[3]}, nil
}

// byToken returns the key of kvs created at token.
func byToken(kvs []keyValue, token int64) (keyValue, bool) {
	for _, k := range kvs {
		if int64(k.CreateRevision) == token {
			return k, true
		}
	}
	return keyValue{}, false
}

// seatLease is an etcd lease of ttl seconds for a seat: an idle one that a keep-alive renewed, or
// a new grant.
func (s *Store) seatLease(ctx context.Context, ttl int64) (idleLease, error) {
	sent := time.Now()
	if g, ok := s.takeIdle(ttl, sent); ok {
		ka, err := s.c.keepAliveOnce(ctx, g.id)
		if err == nil && int64(ka.TTL) == g.ttl {
			return idleLease{id: g.id, ttl: g.ttl, fresh: sent, sure: true}, nil
		}
		s.revoke(g.id)
	}
	lr, err := s.c.grant(ctx, ttl)
	if err != nil {
		return idleLease{}, s.mapErr(err)
	}
	return idleLease{id: int64(lr.ID), ttl: max(int64(lr.TTL), 1), fresh: sent, sure: true}, nil
}

// acquireSeat is Acquire with req.Limit >= 2: the etcd lease is taken alongside the first read,
// so a free seat costs two round trips; a transaction that loses a race reads again.
func (s *Store) acquireSeat(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	type leaseResult struct {
		g   idleLease
		err error
	}
	lc := make(chan leaseResult, 1)
	go func() {
		g, err := s.seatLease(ctx, seconds(req.TTL))
		lc <- leaseResult{g, err}
	}()
	var g idleLease
	for try := 0; ; try++ {
		v, err := s.readGrants(ctx, req.Task, false)
		if try == 0 {
			lr := <-lc
			if g = lr.g; lr.err != nil {
				return store.Lease{}, lr.err
			}
		}
		if err != nil {
			s.putBack(g)
			return store.Lease{}, err
		}
		if busy := s.seatsBusy(req, v); busy != nil || try >= 32 {
			s.putBack(g)
			if busy == nil {
				busy = &store.BusyError{Lease: store.Lease{Task: req.Task}}
			}
			return store.Lease{}, busy
		}
		l, ok, err := s.putSeat(ctx, req, v, g)
		if err != nil {
			s.revoke(g.id) // the seat, if it was put, goes with it
			return store.Lease{}, err
		}
		if ok {
			s.restarted(g)
			return l, nil
		}
	}
}

// seatsBusy is the *store.BusyError of a seat request when v has a live exclusive grant or Limit
// live seats, naming it or the latest seat; nil when a seat is free.
func (s *Store) seatsBusy(req store.AcquireRequest, v grantsView) error {
	if len(v.exclusive) > 0 {
		l, _, err := s.decode(req.Task, v.exclusive[0])
		if err != nil {
			return err
		}
		return &store.BusyError{Lease: l}
	}
	if len(v.seats) < req.Limit {
		return nil
	}
	latest := v.seats[0]
	for _, k := range v.seats {
		if k.CreateRevision > latest.CreateRevision {
			latest = k
		}
	}
	l, _, err := s.decode(req.Task, latest)
	if err != nil {
		return err
	}
	return &store.BusyError{Lease: l}
}

// putSeat is the seat's transaction on the read v: false when the fence moved or an exclusive
// grant came since. It deletes the records of seats v found expired (up to 100 a time).
func (s *Store) putSeat(ctx context.Context, req store.AcquireRequest, v grantsView, g idleLease) (store.Lease, bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	fence := cmpCreate(s.fenceKey(req.Task), 0)
	if len(v.fence) > 0 {
		fence = cmpMod(s.fenceKey(req.Task), int64(v.fence[0].ModRevision))
	}
	// The grant's time is when its etcd lease's TTL last restarted (sent with the first read, so
	// before this transaction): its expiry is then exactly that plus the TTL, never later than etcd's.
	sent := g.fresh
	expires := g.fresh.Add(time.Duration(g.ttl) * time.Second)
	val, _ := json.Marshal(leaseValue{Holder: req.Holder, RunID: req.RunID, Acquired: sent.UnixMicro(), Expires: expires.UnixMicro(),
		TTL: g.ttl, Limit: req.Limit})
	ops := []op{opPut(s.seatDir(req.Task)+id, string(val), g.id), opPut(s.recordDir(req.Task)+id, req.Holder, 0),
		opPut(s.fenceKey(req.Task), "", 0), opPut(s.taskKey(req.Task), "", 0)}
	for _, rec := range v.records {
		if _, live := byID(v.seats, s.seatDir(req.Task), string(rec.Key)[len(s.recordDir(req.Task)):]); !live && len(ops) < 104 {
			ops = append(ops, opDel(string(rec.Key), false))
		}
	}
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpCreate(s.leaseKey(req.Task), 0), fence}, Success: ops})
	if err != nil || !r.Succeeded {
		return store.Lease{}, false, s.mapErr(err)
	}
	return store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: int64(r.Header.Revision),
		Acquired: time.UnixMicro(sent.UnixMicro()), Expires: time.UnixMicro(expires.UnixMicro()), Limit: req.Limit}, true, nil
}

// byID returns the key dir+id of kvs.
func byID(kvs []keyValue, dir, id string) (keyValue, bool) {
	for _, k := range kvs {
		if string(k.Key) == dir+id {
			return k, true
		}
	}
	return keyValue{}, false
}

// liveSeat returns the live seat key of l (its token and holder); ErrNotHeld when there is none.
func (s *Store) liveSeat(ctx context.Context, l store.Lease) (keyValue, error) {
	gr, err := s.c.getPrefix(ctx, s.seatDir(l.Task))
	if err != nil {
		return keyValue{}, s.mapErr(err)
	}
	if k, ok := byToken(gr.Kvs, l.Token); ok {
		cur, _, err := s.decode(l.Task, k)
		if err != nil {
			return keyValue{}, err
		}
		if cur.Holder == l.Holder {
			return k, nil
		}
	}
	return keyValue{}, fmt.Errorf("%w: task %q has no live seat with token %d held by %q (expired, released or taken over)", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// releaseSeat is Release of a seat: it deletes the live key, compared on its revisions, and keeps
// the record, so that the seat's writes are fenced in as an exclusive grant's are after its
// release. A seat that expired but whose record is still there releases fine.
func (s *Store) releaseSeat(ctx context.Context, l store.Lease) error {
	for try := 0; try < 3; try++ {
		v, err := s.readGrants(ctx, l.Task, true)
		if err != nil {
			return err
		}
		k, live := byToken(v.seats, l.Token)
		if !live {
			if rec, ok := byToken(v.records, l.Token); ok && string(rec.Value) == l.Holder {
				return nil
			}
			break
		}
		if cur, _, err := s.decode(l.Task, k); err != nil || cur.Holder != l.Holder {
			break
		}
		key := string(k.Key)
		r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpCreate(key, l.Token), cmpMod(key, int64(k.ModRevision))},
			Success: []op{opDel(key, true)}})
		if err != nil {
			return s.mapErr(err)
		}
		if r.Succeeded {
			s.keepDeleted(r)
			return nil
		}
	}
	return fmt.Errorf("%w: task %q token %d held by %q is not a current seat", store.ErrNotHeld, l.Task, l.Token, l.Holder)
}

// endSeats deletes the task's live seats for a takeover (replace) and returns the one whose etcd
// lease lasts longest, its Expires bounding it as endGrant's does, and every seat's token; nil
// when there was none or they changed meanwhile.
func (s *Store) endSeats(ctx context.Context, task string) (*store.Lease, []int64, error) {
	gr, err := s.c.getPrefix(ctx, s.seatDir(task))
	if err != nil || len(gr.Kvs) == 0 {
		return nil, nil, s.mapErr(err)
	}
	var (
		last   *store.Lease
		tokens []int64
		cmps   []compare
		ops    []op
	)
	now := time.Now()
	for _, k := range gr.Kvs {
		l, err := s.bounded(ctx, task, k)
		if err != nil {
			return nil, nil, err
		}
		// A seat past the expiry its holder asked for is not replaced but vanished (its holder
		// stopped renewing; its work is dead), though its key lasts until etcd ends its lease, in
		// whole seconds: its value's expiry decides, as in Leases.
		if v, _, err := s.decode(task, k); err == nil && v.Expires.After(now) {
			tokens = append(tokens, l.Token)
		}
		if last == nil || l.Expires.After(last.Expires) {
			last = &l
		}
		cmps = append(cmps, cmpMod(string(k.Key), int64(k.ModRevision)))
		id := strings.TrimPrefix(string(k.Key), s.seatDir(task))
		ops = append(ops, opDel(string(k.Key), false), opDel(s.recordDir(task)+id, false))
	}
	// The seats' records go and the fence moves with them (see replace): their ledger writes are
	// refused from this transaction on, not from the exclusive grant's.
	ops = append(ops, opPut(s.fenceKey(task), "", 0))
	r, err := s.c.txn(ctx, txnReq{Compare: cmps, Success: ops})
	if err != nil || !r.Succeeded {
		return nil, nil, s.mapErr(err)
	}
	for _, k := range gr.Kvs {
		s.revoke(int64(k.Lease))
	}
	return last, tokens, nil
}
