package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/once-run/once/store"
)

var (
	_ store.Starter      = (*Store)(nil)
	_ store.Finisher     = (*Store)(nil)
	_ store.LazyRecorder = (*Store)(nil)
	_ store.LocalReads   = (*Store)(nil)
	_ store.LazyStarter  = (*Store)(nil)
)

// LocalReads is true: a read is a query of the file in this process, with no lock that a writer
// waits for (WAL), so the guard may read a slot before it takes the lease (store.LocalReads).
func (s *Store) LocalReads() bool { return true }

// Start takes req.Task's lease, marks the attempts earlier holders left running unknown, and reads
// slot, in one transaction: one durable commit where Acquire, Abandon and Slot take three
// transactions (store.Starter).
func (s *Store) Start(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	return s.start(ctx, false, req, slot)
}

// StartLazy is Start committed without waiting for the disk (store.LazyStarter): the run's Begin,
// the next durable commit, syncs the WAL with Start's frames before its own, so a run waits for
// the disk twice instead of three times.
func (s *Store) StartLazy(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	return s.start(ctx, true, req, slot)
}

func (s *Store) start(ctx context.Context, lazy bool, req store.AcquireRequest, slot string) (store.Started, error) {
	if err := errors.Join(checkAcquire(req), store.CheckStart(req)); err != nil {
		return store.Started{}, err
	}
	var out store.Started
	err := s.txLazy(ctx, lazy, func(tx *sql.Tx, now int64) error {
		l, err := s.acquire(ctx, tx, now, req)
		if err != nil {
			return err
		}
		ab, err := s.abandon(ctx, tx, now, req.Task, l.Token)
		if err != nil {
			return err
		}
		st, err := s.slotState(ctx, tx, req.Task, slot)
		if err != nil {
			return err
		}
		out = store.Started{Lease: l, Abandoned: ab, Slot: st}
		return nil
	})
	return out, err
}

// FinishRelease records the outcome of the running attempt runID and releases l in one
// transaction: one durable commit where Finish and Release take two (store.Finisher).
func (s *Store) FinishRelease(ctx context.Context, runID string, l store.Lease, o store.Outcome) (store.Attempt, error) {
	if err := checkOutcome(o); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
		a, err := s.finish(ctx, tx, runID, l.Token, o)
		if err != nil {
			return err
		}
		if err := s.release(ctx, tx, now, l); err != nil {
			return err
		}
		out = a
		return nil
	})
	return out, err
}
