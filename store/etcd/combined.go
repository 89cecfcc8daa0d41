package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// A run in four round trips: Start (the etcd lease's grant, then one transaction that takes the
// lease and reads the running index and the slot's document), Begin (the document written from
// that read) and FinishRelease (the outcome and the release in one transaction). kvstore holds
// the logic.

var (
	_ store.Starter     = (*Store)(nil)
	_ store.Finisher    = (*Store)(nil)
	_ kvstore.StartKV   = kv{}
	_ kvstore.FinishKV  = kv{}
	_ kvstore.RunningKV = kv{}
	_ kvstore.KV        = kv{}
)

// AcquireRead is the exclusive acquire's transaction with three reads in its success branch: the
// running index's mark and size, and the slot's document.
func (k kv) AcquireRead(ctx context.Context, req store.AcquireRequest, slot string) (store.Lease, kvstore.Snapshot, error) {
	s := k.s
	if err := checkAcquire(req); err != nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	l, r, err := s.acquireWith(ctx, req, []op{opGet(s.runningMark(req.Task)), opCount(s.runningDir(req.Task)), opGet(s.docKey(req.Task, slot))})
	if err != nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	release := func(err error) (store.Lease, kvstore.Snapshot, error) {
		// The grant is not handed out: given back, or left to expire.
		if rerr := s.Release(context.WithoutCancel(ctx), l); rerr != nil {
			err = fmt.Errorf("%w (and the lease was not released: %v)", err, rerr)
		}
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	rs := r.Responses
	if len(rs) != grantOps+3 || rs[grantOps].Range == nil || rs[grantOps+1].Range == nil || rs[grantOps+2].Range == nil {
		return release(fmt.Errorf("%w: etcd at %s: the start transaction returned %d responses", store.ErrUnavailable, s.where, len(rs)))
	}
	snap := kvstore.Snapshot{Now: time.UnixMicro(time.Now().UnixMicro()), Indexed: len(rs[grantOps].Range.Kvs) > 0,
		Running: int(rs[grantOps+1].Range.Count)}
	if kvs := rs[grantOps+2].Range.Kvs; len(kvs) > 0 {
		if snap.Doc, err = kvstore.Unmarshal(kvs[0].Value); err != nil {
			return release(err)
		}
		snap.Ver = int64(kvs[0].ModRevision)
	}
	return l, snap, nil
}

func (k kv) Release(ctx context.Context, l store.Lease) error { return k.s.Release(ctx, l) }

// SaveRelease is Save's transaction fenced by the exclusive grant's token, with Release's deletes:
// every grant (exclusive or seat) moves the fence, so while it carries the token the lease and
// holder keys are that grant's or gone (expired): the fence and the document's revision are all it
// compares. (Comparing the holder key too would refuse the release of an expired grant nobody
// replaced, which Release accepts.)
func (k kv) SaveRelease(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, l store.Lease) (kvstore.Version, error) {
	s := k.s
	ops, later := s.docOps(d)
	n := len(ops)
	ops = append(ops, opDel(s.leaseKey(l.Task), true), opDel(s.holderKey(l.Task), false))
	r, err := s.c.txn(ctx, txnReq{Compare: []compare{cmpMod(s.docKey(d.Task, d.Slot), ver), cmpMod(s.fenceKey(l.Task), l.Token)},
		Success: ops, Failure: []op{opGet(s.fenceKey(l.Task))}})
	if err != nil {
		return 0, s.mapErr(err)
	}
	if r.Succeeded {
		if len(r.Responses) > n {
			s.keepDeleted(&txnResp{Responses: r.Responses[n:]})
		}
		_ = s.putMarks(ctx, d.Task, later) // best effort: see markOps
		return int64(r.Header.Revision), nil
	}
	latest := int64(0)
	if len(r.Responses) == 1 && r.Responses[0].Range != nil && len(r.Responses[0].Range.Kvs) > 0 {
		latest = int64(r.Responses[0].Range.Kvs[0].ModRevision)
	}
	if latest == l.Token {
		return 0, kvstore.ErrStale
	}
	return 0, fmt.Errorf("%w: task %q token %d held by %q is not the latest grant (latest %d)", store.ErrNotHeld, l.Task, l.Token, l.Holder, latest)
}

// Running reads the task's running index and its mark in one transaction, then the documents it
// lists (128 to a transaction, etcd's default --max-txn-ops).
func (k kv) Running(ctx context.Context, task string) ([]*kvstore.Doc, bool, error) {
	s := k.s
	r, err := s.c.txn(ctx, txnReq{Success: []op{opGet(s.runningMark(task)), opRange(s.runningDir(task), true)}})
	if err != nil {
		return nil, false, s.mapErr(err)
	}
	if len(r.Responses) != 2 || r.Responses[0].Range == nil || r.Responses[1].Range == nil {
		return nil, false, fmt.Errorf("%w: etcd at %s: the running index read returned %d responses", store.ErrUnavailable, s.where, len(r.Responses))
	}
	indexed := len(r.Responses[0].Range.Kvs) > 0
	var slots []string
	for _, kv := range r.Responses[1].Range.Kvs {
		slots = append(slots, strings.TrimPrefix(string(kv.Key), s.runningDir(task)))
	}
	var out []*kvstore.Doc
	for len(slots) > 0 {
		part := slots[:min(len(slots), 128)]
		slots = slots[len(part):]
		ops := make([]op, len(part))
		for i, sl := range part {
			ops[i] = opGet(s.p + "d/" + esc(task) + "/" + sl) // sl is escaped already
		}
		r, err := s.c.txn(ctx, txnReq{Success: ops})
		if err != nil {
			return nil, false, s.mapErr(err)
		}
		for i, resp := range r.Responses {
			if resp.Range == nil || len(resp.Range.Kvs) == 0 {
				// Listed, but gone (an older once's prune): an empty document takes the entry out.
				slot, err := url.PathUnescape(part[i])
				if err != nil {
					continue
				}
				out = append(out, &kvstore.Doc{Task: task, Slot: slot})
				continue
			}
			d, err := kvstore.Unmarshal(resp.Range.Kvs[0].Value)
			if err != nil {
				return nil, false, err
			}
			out = append(out, d)
		}
	}
	return out, indexed, nil
}

// IndexRunning puts the running index's entries of docs with a running attempt and the task's
// mark, 128 to a transaction.
func (k kv) IndexRunning(ctx context.Context, task string, docs []*kvstore.Doc) error {
	s := k.s
	ops := []op{}
	for _, d := range docs {
		if d.Runs() {
			ops = append(ops, opPut(s.runningKey(d.Task, d.Slot), "", 0))
		}
	}
	ops = append(ops, opPut(s.runningMark(task), "", 0)) // last: the mark follows its entries
	for len(ops) > 0 {
		part := ops[:min(len(ops), 128)]
		ops = ops[len(part):]
		if _, err := s.c.txn(ctx, txnReq{Success: part}); err != nil {
			return s.mapErr(err)
		}
	}
	return nil
}
