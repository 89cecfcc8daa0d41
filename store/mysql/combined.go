package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

var (
	_ store.Starter  = (*Store)(nil)
	_ store.Finisher = (*Store)(nil)
)

// Start takes req.Task's lease, marks the attempts earlier holders left running unknown and reads
// slot in one transaction (store.Starter): one commit where Acquire and Abandon make two. The
// acquire statement locks the lease row for the rest of the transaction, so nothing of anyone
// else's comes in between, and its read-back has the schema version: a newer once's upgrade rolls
// it all back (store.ErrSchemaAhead).
func (s *Store) Start(ctx context.Context, req store.AcquireRequest, slot string) (store.Started, error) {
	if err := errors.Join(sqlstore.CheckAcquire(req), store.CheckStart(req)); err != nil {
		return store.Started{}, err
	}
	q := s.Q(acquireBody)
	for try := 0; ; try++ {
		var out store.Started
		var r row
		err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, q, req.Task, req.Holder, req.RunID, req.TTL.Microseconds(), req.Task)
			if err != nil {
				return err
			}
			var found bool
			if r, found, err = scanRow(rows); err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%w: mysql %s: lease row for task %q vanished", store.ErrUnavailable, s.d.where, req.Task)
			}
			r.lease.Task = req.Task
			r.lease.Acquired, r.lease.Expires = r.lease.Acquired.UTC(), r.lease.Expires.UTC()
			if r.changed == 0 {
				return nil // busy: nothing was changed; the commit ends the transaction
			}
			if err := s.Ahead(r.schema); err != nil {
				return err // a newer once upgraded the schema: rolled back
			}
			out.Lease = r.lease
			if out.Abandoned, err = s.AbandonTx(ctx, tx, req.Task, r.lease.Token); err != nil {
				return err
			}
			out.Slot, err = s.SlotTx(ctx, tx, req.Task, slot)
			return err
		})
		if err != nil {
			return store.Started{}, err
		}
		if r.changed > 0 {
			return out, nil
		}
		if (r.live && r.lease.Holder != "") || try >= 2 {
			return store.Started{}, &store.BusyError{Lease: r.lease}
		}
		// It expired between the two statements: try again.
	}
}

// FinishRelease records the outcome of the running attempt runID and releases l in one transaction
// (store.Finisher): one commit where Finish and Release make two.
func (s *Store) FinishRelease(ctx context.Context, runID string, l store.Lease, o store.Outcome) (store.Attempt, error) {
	return s.FinishAndRelease(ctx, runID, l, o, releaseSQL)
}
