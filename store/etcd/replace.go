package etcd

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/once-run/once/store"
)

// replace is Acquire with req.Replace. etcd keeps a key's create revision (the token) across
// puts, so a takeover is two transactions: delete the live grant's keys, compared on the key's
// create and mod revisions (a renewal in between rewrites the value: then it starts over), then
// the plain acquire, which gives the next revision. Another acquire may come in between; that
// grant is replaced in turn, at most twice more. The deletion ends the old grant at once: its
// Renew finds no key, its Lost watch sees the DELETE, and the same transaction moves the fence,
// so its ledger writes are refused from then on too. (Before, they were refused only from the new
// grant on: a holder that saw its loss could record its own attempt unknown in between, and the
// replacing run, which resolves the attempts Abandon hands it, then found its slot in review.)
//
// Lease.Replaced.Expires bounds, by this client's clock, the etcd lease the old grant was on: its
// remaining TTL asked of etcd (whole seconds, rounded down, hence +1s) after the last renewal
// that could still succeed. The times in the value are the old holder's clock, so they are not
// used for the wait.
func (s *Store) replace(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	plain := req
	plain.Replace = false
	var replaced *store.Lease
	var tokens []int64
	for try := 0; ; try++ {
		l, err := s.Acquire(ctx, plain)
		if err == nil {
			if replaced != nil {
				slices.Sort(tokens)
				l.Replaced = &store.Replacement{Lease: *replaced, Tokens: tokens}
			}
			return l, nil
		}
		if !errors.Is(err, store.ErrBusy) || try >= 3 {
			return store.Lease{}, err
		}
		old, ended, err := s.endGrant(ctx, req.Task)
		if err != nil {
			return store.Lease{}, err
		}
		tokens = append(tokens, ended...)
		if old != nil && (replaced == nil || old.Expires.After(replaced.Expires)) {
			replaced = old
		}
	}
}

// endGrant deletes the task's live grant, or else its live seats (endSeats), and returns it with
// Expires bounding its etcd lease (see replace), and the tokens of the grants it ended; nil when
// there was none, or it changed before it could be deleted.
func (s *Store) endGrant(ctx context.Context, task string) (*store.Lease, []int64, error) {
	key := s.leaseKey(task)
	gr, err := s.c.get(ctx, key)
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	if len(gr.Kvs) == 0 {
		return s.endSeats(ctx, task)
	}
	kv := gr.Kvs[0]
	old, err := s.bounded(ctx, task, kv)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.c.txn(ctx, txnReq{
		Compare: []compare{cmpCreate(key, int64(kv.CreateRevision)), cmpMod(key, int64(kv.ModRevision))},
		Success: []op{opDel(key, false), opDel(s.holderKey(task), false), opPut(s.fenceKey(task), "", 0)},
	})
	if err != nil {
		return nil, nil, s.mapErr(err)
	}
	if !r.Succeeded {
		return nil, nil, nil
	}
	s.revoke(int64(kv.Lease)) // nothing uses it now; the old holder's next renewal finds no key
	return &old, []int64{old.Token}, nil
}

// bounded decodes the grant kv of task with Expires bounding its etcd lease: now plus the lease's
// remaining TTL, rounded up by a second (etcd reports whole seconds).
func (s *Store) bounded(ctx context.Context, task string, kv keyValue) (store.Lease, error) {
	l, _, err := s.decode(task, kv)
	if err != nil {
		return store.Lease{}, err
	}
	ttl, err := s.c.timeToLive(ctx, int64(kv.Lease))
	if err != nil {
		return store.Lease{}, s.mapErr(err)
	}
	l.Expires = time.Now().Add(time.Duration(max(int64(ttl.TTL), 0)+1) * time.Second)
	return l, nil
}
