package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

// Seats (AcquireRequest.Limit >= 2, once run --limit), as on SQLite (docs/stores/sqlite.md): the
// task's lease row stays the token counter and the exclusive grant; a seat is a row of
// {p}lease_seats (migration 005); while seats are live the lease row is their summary — the latest
// seat's holder and token, an expiry no earlier than any live seat's — so an exclusive Acquire, with
// its one statement as before, and an older once see the task held. The row is a summary exactly
// when its token is a seat's. Every seat operation locks the lease row first.

// summaryExpr is true when task ?'s lease row is a summary of seats (no exclusive grant since).
const summaryExpr = `EXISTS (SELECT 1 FROM {p}leases l JOIN {p}lease_seats c ON c.task = l.task AND c.token = l.token WHERE l.task = ?)`

// AcquireSeat is a backend's Acquire for req.Limit >= 2, in one transaction; until is the dialect's
// expression for now plus ? µs (TakeOver's). A task without a lease row gets one; should a
// concurrent first acquire win that insert, the transaction is tried again.
func (s *Store) AcquireSeat(ctx context.Context, req store.AcquireRequest, until string) (store.Lease, error) {
	if err := errors.Join(CheckAcquire(req), store.CheckLimit(req)); err != nil {
		return store.Lease{}, err
	}
	for try := 0; ; try++ {
		var inserted bool
		var l store.Lease
		err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var err error
			l, inserted, err = s.acquireSeat(ctx, tx, req, until)
			return err
		})
		if err == nil || !inserted || try >= 2 {
			return l, err
		}
	}
}

func (s *Store) acquireSeat(ctx context.Context, tx *sql.Tx, req store.AcquireRequest, until string) (store.Lease, bool, error) {
	cur := store.Lease{Task: req.Task}
	var rowLive bool
	err := tx.QueryRowContext(ctx, s.Q(`SELECT holder, run_id, token, acquired_at, expires_at, expires_at > {now} AND holder <> ''
		FROM {p}leases WHERE task = ? FOR UPDATE`), req.Task).Scan(&cur.Holder, &cur.RunID, &cur.Token, &cur.Acquired, &cur.Expires, &rowLive)
	ttl := req.TTL.Microseconds()
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, s.Q(`INSERT INTO {p}leases (task, holder, run_id, token, acquired_at, expires_at)
			VALUES (?, ?, ?, 1, {now}, `+until+`)`), req.Task, req.Holder, req.RunID, ttl)
		if err != nil {
			return store.Lease{}, true, err
		}
		return s.insertSeat(ctx, tx, req, 1, until)
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	cur.Acquired, cur.Expires = cur.Acquired.UTC(), cur.Expires.UTC()
	var live int
	if err := tx.QueryRowContext(ctx, s.Q(`SELECT count(*) FROM {p}lease_seats WHERE task = ? AND expires_at > {now}`), req.Task).Scan(&live); err != nil {
		return store.Lease{}, false, err
	}
	if (rowLive && live == 0) || live >= req.Limit {
		return store.Lease{}, false, &store.BusyError{Lease: cur} // the exclusive grant, or the latest seat
	}
	if _, err := tx.ExecContext(ctx, s.Q(`DELETE FROM {p}lease_seats WHERE task = ? AND expires_at <= {now}`), req.Task); err != nil {
		return store.Lease{}, false, err
	}
	if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}leases SET holder = ?, run_id = ?, token = token + 1, acquired_at = {now},
		expires_at = CASE WHEN expires_at > {now} AND holder <> '' THEN GREATEST(expires_at, `+until+`) ELSE `+until+` END
		WHERE task = ?`), req.Holder, req.RunID, ttl, ttl, req.Task); err != nil {
		return store.Lease{}, false, err
	}
	return s.insertSeat(ctx, tx, req, cur.Token+1, until)
}

// insertSeat inserts the seat token of req and returns it as stored, or store.ErrSchemaAhead when
// a newer once upgraded the schema (read with it: Ahead), and tx must roll back.
func (s *Store) insertSeat(ctx context.Context, tx *sql.Tx, req store.AcquireRequest, token int64, until string) (store.Lease, bool, error) {
	if _, err := tx.ExecContext(ctx, s.Q(`INSERT INTO {p}lease_seats (task, token, holder, run_id, seats, acquired_at, expires_at)
		VALUES (?, ?, ?, ?, ?, {now}, `+until+`)`), req.Task, token, req.Holder, req.RunID, req.Limit, req.TTL.Microseconds()); err != nil {
		return store.Lease{}, false, err
	}
	l := store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: token, Limit: req.Limit}
	var v int64
	if err := tx.QueryRowContext(ctx, s.Q(`SELECT acquired_at, expires_at, `+SchemaVersion+` FROM {p}lease_seats WHERE task = ? AND token = ?`), req.Task, token).
		Scan(&l.Acquired, &l.Expires, &v); err != nil {
		return store.Lease{}, false, err
	}
	if err := s.Ahead(v); err != nil {
		return store.Lease{}, false, err // a newer once upgraded the schema: the seat is rolled back
	}
	l.Acquired, l.Expires = l.Acquired.UTC(), l.Expires.UTC()
	return l, false, nil
}

// seatTx locks the task's lease row and reads the seat l names, and whether it is live: ErrNotHeld
// when there is none of l's holder, or an exclusive grant came after it.
func (s *Store) seatTx(ctx context.Context, tx *sql.Tx, l store.Lease) (store.Lease, bool, error) {
	var token int64
	err := tx.QueryRowContext(ctx, s.Q(`SELECT token FROM {p}leases WHERE task = ? FOR UPDATE`), l.Task).Scan(&token)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, err
	}
	out := store.Lease{Task: l.Task, Token: l.Token}
	var live, summary bool
	if err == nil {
		err = tx.QueryRowContext(ctx, s.Q(`SELECT holder, run_id, seats, acquired_at, expires_at, expires_at > {now}, `+summaryExpr+`
			FROM {p}lease_seats WHERE task = ? AND token = ?`), l.Task, l.Task, l.Token).
			Scan(&out.Holder, &out.RunID, &out.Limit, &out.Acquired, &out.Expires, &live, &summary)
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, err
	}
	if err != nil || !summary || out.Holder != l.Holder {
		return store.Lease{}, false, fmt.Errorf("%w: task %q token %d held by %q is not a current seat", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	out.Acquired, out.Expires = out.Acquired.UTC(), out.Expires.UTC()
	return out, live, nil
}

// RenewSeat is a backend's Renew of a seat (l.Limit >= 2): the seat, and the lease row's expiry
// with it, move to now plus ttl.
func (s *Store) RenewSeat(ctx context.Context, l store.Lease, ttl time.Duration, until string) (store.Lease, error) {
	var out store.Lease
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, live, err := s.seatTx(ctx, tx, l)
		if err != nil {
			return err
		}
		if !live {
			return fmt.Errorf("%w: task %q seat token %d of %s has expired", store.ErrNotHeld, l.Task, l.Token, l.Holder)
		}
		if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}lease_seats SET expires_at = `+until+` WHERE task = ? AND token = ?`),
			ttl.Microseconds(), l.Task, l.Token); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, s.Q(`SELECT expires_at FROM {p}lease_seats WHERE task = ? AND token = ?`), l.Task, l.Token).
			Scan(&cur.Expires); err != nil {
			return err
		}
		cur.Expires = cur.Expires.UTC()
		out = cur
		_, err = tx.ExecContext(ctx, s.Q(`UPDATE {p}leases SET expires_at = GREATEST(expires_at, ?) WHERE task = ?`), cur.Expires, l.Task)
		return err
	})
	return out, err
}

// ReleaseLease is a backend's Release (store.Leaser): a seat (l.Limit >= 2) through ReleaseSeat,
// an exclusive grant through release, the backend's statement (arguments: task, holder, token),
// which must change one row when l is still the task's latest grant. The row and its token stay.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease, release string) error {
	if l.Limit >= 2 {
		return s.ReleaseSeat(ctx, l)
	}
	var n int64
	err := s.Do(ctx, func(ctx context.Context) error {
		res, err := s.DB.ExecContext(ctx, s.Q(release), l.Task, l.Holder, l.Token)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: task %q: token %d of %s was released or replaced", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return nil
}

// ReleaseSeat is a backend's Release of a seat (l.Limit >= 2).
func (s *Store) ReleaseSeat(ctx context.Context, l store.Lease) error {
	return s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.releaseSeatTx(ctx, tx, l) })
}

// releaseSeatTx ends the seat l now, and moves the lease row's expiry to the latest of the other
// live seats' (or now), so that a task whose seats are all released looks free.
func (s *Store) releaseSeatTx(ctx context.Context, tx *sql.Tx, l store.Lease) error {
	if _, _, err := s.seatTx(ctx, tx, l); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}lease_seats SET expires_at = LEAST(expires_at, {now}) WHERE task = ? AND token = ?`),
		l.Task, l.Token); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}leases SET expires_at = GREATEST(LEAST(expires_at, {now}),
		COALESCE((SELECT max(expires_at) FROM {p}lease_seats WHERE task = ? AND expires_at > {now}), LEAST(expires_at, {now})))
		WHERE task = ?`), l.Task, l.Task)
	return err
}

// seatFence is fence for a token that is not the lease row's: true when it is a seat of the task
// still in the table and no exclusive grant came after the seats.
func (s *Store) seatFence(ctx context.Context, tx *sql.Tx, task string, token int64) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, s.Q(`SELECT EXISTS (SELECT 1 FROM {p}lease_seats WHERE task = ? AND token = ?) AND `+summaryExpr),
		task, token, task).Scan(&ok)
	return ok, err
}

// notLiveSeat is true for an attempt (of task ?) whose token is not a live seat's: Abandon leaves
// the attempts of the task's other live seats running.
const notLiveSeat = `token NOT IN (SELECT token FROM {p}lease_seats WHERE task = ? AND expires_at > {now})`

// notItsToken refuses a write to a run's attempt with another grant's token (another seat's).
func notItsToken(runID string, began, token int64) error {
	return fmt.Errorf("%w: run %s began under token %d, not %d", store.ErrNotHeld, runID, began, token)
}
