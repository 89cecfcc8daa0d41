package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

var (
	_ store.Starter     = (*Store)(nil)
	_ store.LazyStarter = (*Store)(nil)
	_ store.Finisher    = (*Store)(nil)
)

// Start takes req.Task's lease, marks the attempts earlier holders left running unknown and reads
// slot in one transaction (store.Starter): one commit, where Acquire, Abandon and Slot make two
// (Abandon's row locks are written too) and seven round trips. The acquire statement locks the
// lease row for the rest of the transaction, so nothing of anyone else's comes in between, and
// reads the schema version: a newer once's upgrade rolls it all back (store.ErrSchemaAhead).
func (s *Store) Start(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	return s.start(ctx, acquireSQL, req, slot)
}

// StartLazy is Start committed with synchronous_commit off (store.LazyStarter), in as many round
// trips: the server does not wait for its WAL flush, and the run's Begin, a durable commit later in
// the same WAL, flushes it with its own. A server crash before that may undo the start whole.
func (s *Store) StartLazy(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	return s.start(ctx, acquireLazySQL, req, slot)
}

func (s *Store) start(ctx context.Context, acquire string, req store.AcquireRequest, slot string) (store.Started, error) {
	if err := errors.Join(sqlstore.CheckAcquire(req), store.CheckStart(req)); err != nil {
		return store.Started{}, err
	}
	q := s.Q(acquire)
	for try := 0; ; try++ {
		var out store.Started
		got := false
		err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			out = store.Started{Lease: store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID}}
			l := &out.Lease
			var v int64
			err := tx.QueryRowContext(ctx, q, req.Task, req.Holder, req.RunID, req.TTL.Microseconds()).
				Scan(&l.Token, &l.Acquired, &l.Expires, &v)
			if got = err == nil; !got {
				if errors.Is(err, sql.ErrNoRows) {
					return nil // busy: nothing was changed
				}
				return err
			}
			if err := s.Ahead(v); err != nil {
				return err // a newer once upgraded the schema: rolled back
			}
			l.Acquired, l.Expires = l.Acquired.UTC(), l.Expires.UTC()
			if out.Abandoned, err = s.AbandonTx(ctx, tx, req.Task, l.Token); err != nil {
				return err
			}
			out.Slot, err = s.SlotTx(ctx, tx, req.Task, slot)
			return err
		})
		if err != nil {
			return store.Started{}, err
		}
		if got {
			return out, nil
		}
		cur, live, err := s.current(ctx, req.Task)
		if err != nil {
			return store.Started{}, err
		}
		if live || try >= 2 {
			return store.Started{}, &store.BusyError{Lease: cur}
		}
		// It expired or was released between the two statements: try again.
	}
}

// FinishRelease records the outcome of the running attempt runID and releases l in one transaction
// (store.Finisher): one commit where Finish and Release make two.
func (s *Store) FinishRelease(ctx context.Context, runID string, l store.Lease, o store.Outcome) (store.Attempt, error) {
	return s.FinishAndRelease(ctx, runID, l, o, releaseSQL)
}
