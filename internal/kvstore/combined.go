package kvstore

import (
	"context"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

// Start is store.Starter's Start, for a backend that is a StartKV: Acquire, Abandon and Slot in
// one step. The lease and the reads are one atomic step (one round trip on Redis, one transaction
// after the etcd lease's grant on etcd; on ZooKeeper the reads follow the grant). When they show
// nothing left running — the task's running index is built and empty, and the slot's document has
// no running attempt — there is nothing to abandon, and the slot's state is the one read: done.
// Otherwise (a holder vanished, or the index was never built) the abandon follows as Abandon's
// writes and the slot is read again, as a guard without a Starter does. When those fail the lease
// is released (else it expires) and the error returned; unlike a SQL store's Start, what the abandon
// had written by then stands (attempts marked unknown, the token spent), as after a failed Abandon.
// The slot's document goes to the memo, for Begin.
func (l Ledger) Start(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	sk, ok := l.KV.(StartKV)
	if !ok {
		return store.Started{}, fmt.Errorf("%w: this store cannot start a run in one step", store.ErrUnsupported)
	}
	if err := store.CheckStart(req); err != nil {
		return store.Started{}, err
	}
	if err := checkSlot(slot); err != nil {
		return store.Started{}, err
	}
	ls, r, err := sk.AcquireRead(ctx, req, slot)
	if err != nil {
		return store.Started{}, err
	}
	if r.Indexed && r.Running == 0 && (r.Doc == nil || !r.Doc.Runs()) && l.counted(ctx, r.Doc) == nil {
		l.memo.put(req.Task, slot, r.Doc, r.Ver, clock{r.Now, time.Now()})
		st := store.SlotState{Task: req.Task, Slot: slot}
		if r.Doc != nil {
			st = r.Doc.State()
		}
		return store.Started{Lease: ls, Slot: st}, nil
	}
	abandoned, err := l.abandon(ctx, req.Task, ls.Token, r.Doc)
	var st store.SlotState
	if err == nil {
		st, err = l.slot(ctx, req.Task, slot)
	}
	if err != nil {
		if rerr := sk.Release(context.WithoutCancel(ctx), ls); rerr != nil {
			err = fmt.Errorf("%w (the lease taken was not given back, it expires by itself: %v)", err, rerr)
		}
		return store.Started{}, err
	}
	return store.Started{Lease: ls, Abandoned: abandoned, Slot: st}, nil
}

// FinishRelease is store.Finisher's FinishRelease, for a backend that is a FinishKV: Finish's
// write and the release in one atomic write (SaveRelease). A seat's outcome and release are two
// steps, Finish then Release, and a release that fails after the outcome was recorded is not an
// error (the seat expires by itself).
func (l Ledger) FinishRelease(ctx context.Context, runID string, ls store.Lease, o store.Outcome) (store.Attempt, error) {
	fk, ok := l.KV.(FinishKV)
	if !ok {
		return store.Attempt{}, fmt.Errorf("%w: this store cannot finish and release in one write", store.ErrUnsupported)
	}
	if ls.Limit >= 2 {
		// A seat: the outcome, then the release. Once the outcome is recorded that is what the
		// caller must hear: a release that fails leaves the seat to expire by itself, as the guard
		// leaves a lease whose Release failed.
		a, err := l.Finish(ctx, runID, ls.Token, o)
		if err == nil {
			_ = fk.Release(ctx, ls)
		}
		return a, err
	}
	return l.finish(ctx, runID, ls.Token, o, func(ctx context.Context, d *Doc, ver Version) (Version, error) {
		return fk.SaveRelease(ctx, d, ver, ls)
	})
}

// slot is Slot, remembering the document read (for Begin).
func (l Ledger) slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	d, ver, now, err := l.KV.Load(ctx, task, slot)
	if err == nil {
		err = l.counted(ctx, d)
	}
	if err != nil {
		return store.SlotState{}, err
	}
	l.memo.put(task, slot, d, ver, clock{now, time.Now()})
	if d == nil {
		return store.SlotState{Task: task, Slot: slot}, nil
	}
	return d.State(), nil
}
