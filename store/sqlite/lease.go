package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

func micros(t int64) time.Time { return time.UnixMicro(t).UTC() }

// ttlMicros rounds a TTL up to whole microseconds, so a lease never ends before its TTL.
func ttlMicros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("sqlite: lease TTL %s is below the 1ms minimum", ttl)
	}
	return nil
}

// Acquire grants req.Task's lease when it is free or expired by the store's clock (clock.go), or
// with req.Replace over a live grant (the row is overwritten: the old grant is gone), with a token
// one above the task's previous token. Otherwise it returns a *store.BusyError naming the current
// grant.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if err := errors.Join(checkAcquire(req), store.CheckLimit(req)); err != nil {
		return store.Lease{}, err
	}
	var out store.Lease
	err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
		var err error
		if req.Limit >= 2 {
			out, err = s.acquireSeat(ctx, tx, now, req)
			return err
		}
		out, err = s.acquire(ctx, tx, now, req)
		return err
	})
	return out, err
}

// acquire is Acquire inside tx, at the store's time now.
func (s *Store) acquire(ctx context.Context, tx *sql.Tx, now int64, req store.AcquireRequest) (store.Lease, error) {
	cur, found, err := s.lease(ctx, tx, req.Task)
	if err != nil {
		return store.Lease{}, err
	}
	token := int64(1)
	var replaced *store.Lease
	if found {
		if cur.Expires.UnixMicro() > now {
			if !req.Replace {
				return store.Lease{}, &store.BusyError{Lease: s.shown(cur)}
			}
			old := s.shown(cur)
			replaced = &old
		}
		token = cur.Token + 1
	}
	exp := now + ttlMicros(req.TTL)
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.t.leases+` (task, holder, run_id, token, acquired_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, run_id = excluded.run_id,
			token = excluded.token, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
		req.Task, req.Holder, req.RunID, token, now, exp); err != nil {
		return store.Lease{}, err
	}
	var tokens []int64
	if replaced != nil {
		// The row may have summarised live seats (seats.go): they end with it. Left live, Abandon
		// took their attempts for a live seat's, and a seat acquire counted them beside this grant.
		if tokens, err = s.endSeats(ctx, tx, req.Task, cur.Token, now); err != nil {
			return store.Lease{}, err
		}
	}
	l := s.shown(store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: token, Acquired: micros(now), Expires: micros(exp)})
	if replaced != nil {
		l.Replaced = &store.Replacement{Lease: *replaced, Tokens: tokens}
	}
	return l, nil
}

// checkAcquire refuses what store.AcquireRequest.Check does and a bad TTL.
func checkAcquire(req store.AcquireRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	return checkTTL(req.TTL)
}

// lease reads a task's lease row, expired or not, with times on the store's clock.
func (s *Store) lease(ctx context.Context, q querier, task string) (store.Lease, bool, error) {
	l := store.Lease{Task: task}
	var acq, exp int64
	err := q.QueryRowContext(ctx, `SELECT holder, run_id, token, acquired_at, expires_at FROM `+s.t.leases+` WHERE task = ?`, task).
		Scan(&l.Holder, &l.RunID, &l.Token, &acq, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, false, nil
	}
	if err != nil {
		return store.Lease{}, false, err
	}
	l.Acquired, l.Expires = micros(acq), micros(exp)
	return l, true, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// current reports whether l is the task's current grant: same holder and token.
func (s *Store) current(ctx context.Context, tx *sql.Tx, l store.Lease) (store.Lease, error) {
	cur, found, err := s.lease(ctx, tx, l.Task)
	if err != nil {
		return store.Lease{}, err
	}
	if !found || cur.Token != l.Token || cur.Holder != l.Holder {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d held by %q is not the current grant", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return cur, nil
}

// Renew extends the current, unexpired grant l to ttl from now by the store's clock,
// keeping its token; ErrNotHeld otherwise, leaving the stored lease unchanged. A ledger file
// deleted or replaced while in use (ErrGone) took the grant with it: that error matches
// ErrNotHeld too, so the holder stops its work at once instead of retrying until the deadline.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	out, err := s.renew(ctx, l, ttl)
	if errors.Is(err, ErrGone) {
		return out, fmt.Errorf("%w: %w", store.ErrNotHeld, err)
	}
	return out, err
}

func (s *Store) renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if err := checkTTL(ttl); err != nil {
		return store.Lease{}, err
	}
	var out store.Lease
	err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
		if l.Limit >= 2 {
			var err error
			out, err = s.renewSeat(ctx, tx, now, l, ttl)
			return err
		}
		cur, err := s.current(ctx, tx, l)
		if err != nil {
			return err
		}
		if cur.Expires.UnixMicro() <= now {
			return fmt.Errorf("%w: task %q token %d expired at %s", store.ErrNotHeld, l.Task, l.Token, s.shown(cur).Expires.Format(time.RFC3339Nano))
		}
		exp := now + ttlMicros(ttl)
		if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.leases+` SET expires_at = ? WHERE task = ? AND token = ?`, exp, l.Task, l.Token); err != nil {
			return err
		}
		cur.Expires = micros(exp)
		out = s.shown(cur)
		return nil
	})
	return out, err
}

// Release ends the current grant l at once (also when it has expired but nobody took it
// over); ErrNotHeld when l is not the current grant. The row stays, so the next token is
// still higher.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	return s.tx(ctx, func(tx *sql.Tx, now int64) error { return s.release(ctx, tx, now, l) })
}

// release is Release inside tx, at the store's time now.
func (s *Store) release(ctx context.Context, tx *sql.Tx, now int64, l store.Lease) error {
	if l.Limit >= 2 {
		return s.releaseSeat(ctx, tx, now, l)
	}
	if _, err := s.current(ctx, tx, l); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+s.t.leases+` SET expires_at = min(expires_at, ?) WHERE task = ? AND token = ?`, now, l.Task, l.Token)
	return err
}

// Leases lists the grants that have not expired by the store's clock, by task: every seat of a
// task with seats.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	if err := s.still(); err != nil {
		return nil, err
	}
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	// A lease row whose token is a seat's is the seats' summary (seats.go): its seats are listed.
	rows, err := s.db.QueryContext(ctx, `SELECT task, holder, run_id, token, acquired_at, expires_at, 0 FROM `+s.t.leases+` l
		WHERE expires_at > ?1 AND NOT EXISTS (SELECT 1 FROM `+s.t.seats+` c WHERE c.task = l.task AND c.token = l.token)
		UNION ALL SELECT task, holder, run_id, token, acquired_at, expires_at, seats FROM `+s.t.seats+` WHERE expires_at > ?1
		ORDER BY task, token`, now)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var acq, exp int64
		if err := rows.Scan(&l.Task, &l.Holder, &l.RunID, &l.Token, &acq, &exp, &l.Limit); err != nil {
			return nil, s.mapErr(err)
		}
		l.Acquired, l.Expires = micros(acq), micros(exp)
		out = append(out, s.shown(l))
	}
	return out, s.mapErr(rows.Err())
}

var _ store.TaskLister = (*Store)(nil)

// tasksQuery is a page of the task index: the leases table (one row per task granted a lease,
// never deleted) from a name on, a range of its primary key. SQLite compares TEXT with memcmp.
func tasksQuery(t tables) string {
	return `SELECT task FROM ` + t.leases + ` WHERE task > ? ORDER BY task LIMIT ?`
}

// Tasks lists the tasks granted a lease, from the name after on (store.TaskLister).
func (s *Store) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if err := s.still(); err != nil {
		return nil, err
	}
	if err := store.CheckTasksPage(limit); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, tasksQuery(s.t), after, limit)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var task string
		if err := rows.Scan(&task); err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, task)
	}
	return out, s.mapErr(rows.Err())
}
