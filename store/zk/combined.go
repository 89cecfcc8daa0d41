package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// A run with fewer round trips (kvstore holds the logic): Start is the lock recipe, then the
// task's running directory and the slot's document read together; FinishRelease writes the outcome and
// deletes the lock node in one multi. The reads follow the grant rather than sharing its atomic
// step: a ZooKeeper multi cannot read. Nothing a run decides from can change between them except
// by an unfenced write (an event), which a read after the grant sees as it would anyway.

var (
	_ store.Starter    = (*Store)(nil)
	_ store.Finisher   = (*Store)(nil)
	_ kvstore.StartKV  = kv{}
	_ kvstore.FinishKV = kv{}
)

func (k kv) AcquireRead(ctx context.Context, req store.AcquireRequest, slot string) (store.Lease, kvstore.Snapshot, error) {
	s := k.s
	l, err := s.Acquire(ctx, req) // Ledger.Start has refused a seat or a replacement
	if err != nil {
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	type read struct {
		kids    []string
		indexed bool
		doc     []byte
		st      *zk.Stat
	}
	got, err := call(ctx, s, func() (read, error) {
		// Both requests in flight at once: one round trip.
		var r read
		var errKids error
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.kids, _, errKids = s.c.Children(s.runningDir(req.Task))
			r.indexed = errKids == nil
			if errors.Is(errKids, zk.ErrNoNode) {
				errKids = nil
			}
		}()
		var errDoc error
		r.doc, r.st, errDoc = s.c.Get(s.docPath(req.Task, slot))
		if errors.Is(errDoc, zk.ErrNoNode) {
			r.doc, r.st, errDoc = nil, nil, nil
		}
		<-done
		return r, errors.Join(errKids, errDoc)
	})
	if err != nil {
		err = s.mapErr(err)
		if rerr := s.Release(context.WithoutCancel(ctx), l); rerr != nil {
			err = fmt.Errorf("%w (and the lease was not released: %v)", err, rerr)
		}
		return store.Lease{}, kvstore.Snapshot{}, err
	}
	snap := kvstore.Snapshot{Now: time.UnixMilli(time.Now().UnixMilli()), Indexed: got.indexed, Running: len(got.kids)}
	if got.st != nil {
		if snap.Doc, err = kvstore.Unmarshal(got.doc); err != nil {
			if rerr := s.Release(context.WithoutCancel(ctx), l); rerr != nil {
				err = fmt.Errorf("%w (and the lease was not released: %v)", err, rerr)
			}
			return store.Lease{}, kvstore.Snapshot{}, err
		}
		snap.Ver = int64(got.st.Version) + 1
	}
	return l, snap, nil
}

func (k kv) Release(ctx context.Context, l store.Lease) error { return k.s.Release(ctx, l) }

// SaveRelease is Save fenced by l's token with the deletion of l's lock node in the same multi.
func (k kv) SaveRelease(ctx context.Context, d *kvstore.Doc, ver kvstore.Version, l store.Lease) (kvstore.Version, error) {
	s := k.s
	// The node this store created for the grant is the grant's while it exists (its name is
	// sequential, never reused); another store's grant is looked up as Release does.
	s.mu.Lock()
	path, mine := s.paths[l.Token]
	mine = mine && s.holders[l.Token] == l.Holder
	s.mu.Unlock()
	if !mine {
		var err error
		path, _, _, err = s.find(ctx, l)
		switch {
		case errors.Is(err, store.ErrNotHeld) && !errors.Is(err, errMismatch):
			path = "" // gone: an expired grant, released fine while the fence still carries its token
		case err != nil:
			return 0, err
		}
	}
	v, err := k.save(ctx, d, ver, l.Token, "", path)
	if err == nil {
		s.forget(l.Token)
	}
	return v, err
}

// Stamp is the time Load stamps transitions with: this host's clock (kvstore.Stamper).
func (kv) Stamp() time.Time { return time.UnixMilli(time.Now().UnixMilli()) }
