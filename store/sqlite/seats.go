package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

// Seats (AcquireRequest.Limit >= 2, once run --limit). The task's lease row stays what it was:
// the token counter and the exclusive grant. A seat is a row of the seats table; while seats are
// live the lease row is their summary — the latest seat's holder and token, and an expiry no
// earlier than any live seat's — so an exclusive Acquire (and an older once) sees a live grant
// and is busy, with the same statements as before. The lease row is a summary exactly when its
// token is a seat's: seats are cleared only when expired and never the one with the row's token.

// acquireSeat is Acquire with req.Limit >= 2 inside tx, at the store's time now.
func (s *Store) acquireSeat(ctx context.Context, tx *sql.Tx, now int64, req store.AcquireRequest) (store.Lease, error) {
	cur, found, err := s.lease(ctx, tx, req.Task)
	if err != nil {
		return store.Lease{}, err
	}
	var live int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+s.t.seats+` WHERE task = ? AND expires_at > ?`, req.Task, now).Scan(&live); err != nil {
		return store.Lease{}, err
	}
	rowLive := found && cur.Expires.UnixMicro() > now
	if rowLive && live == 0 {
		return store.Lease{}, &store.BusyError{Lease: s.shown(cur)} // the exclusive grant
	}
	if live >= req.Limit {
		return store.Lease{}, &store.BusyError{Lease: s.shown(cur)} // the latest seat
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.t.seats+` WHERE task = ? AND expires_at <= ?`, req.Task, now); err != nil {
		return store.Lease{}, err
	}
	token, exp, rowExp := int64(1), now+ttlMicros(req.TTL), now+ttlMicros(req.TTL)
	if found {
		token = cur.Token + 1
		if rowLive {
			rowExp = max(rowExp, cur.Expires.UnixMicro())
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.t.leases+` (task, holder, run_id, token, acquired_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, run_id = excluded.run_id,
			token = excluded.token, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
		req.Task, req.Holder, req.RunID, token, now, rowExp); err != nil {
		return store.Lease{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.t.seats+` (task, token, holder, run_id, seats, acquired_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, req.Task, token, req.Holder, req.RunID, req.Limit, now, exp); err != nil {
		return store.Lease{}, err
	}
	return s.shown(store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID, Token: token, Acquired: micros(now),
		Expires: micros(exp), Limit: req.Limit}), nil
}

// seat reads the seat l names, and whether the lease row is still a summary of seats (no
// exclusive grant since). Absent, another holder's, or taken over: ErrNotHeld.
func (s *Store) seat(ctx context.Context, tx *sql.Tx, l store.Lease) (store.Lease, error) {
	out := store.Lease{Task: l.Task, Token: l.Token}
	var acq, exp int64
	var summary bool
	err := tx.QueryRowContext(ctx, `SELECT s.holder, s.run_id, s.seats, s.acquired_at, s.expires_at,
			EXISTS (SELECT 1 FROM `+s.t.leases+` l JOIN `+s.t.seats+` c ON c.task = l.task AND c.token = l.token WHERE l.task = s.task)
		FROM `+s.t.seats+` s WHERE s.task = ? AND s.token = ?`, l.Task, l.Token).
		Scan(&out.Holder, &out.RunID, &out.Limit, &acq, &exp, &summary)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, err
	}
	if err != nil || !summary || out.Holder != l.Holder {
		return store.Lease{}, fmt.Errorf("%w: task %q token %d held by %q is not a current seat", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	out.Acquired, out.Expires = micros(acq), micros(exp)
	return out, nil
}

// renewSeat is Renew of a seat inside tx: the seat and the lease row's expiry move on.
func (s *Store) renewSeat(ctx context.Context, tx *sql.Tx, now int64, l store.Lease, ttl time.Duration) (store.Lease, error) {
	cur, err := s.seat(ctx, tx, l)
	if err != nil {
		return store.Lease{}, err
	}
	if cur.Expires.UnixMicro() <= now {
		return store.Lease{}, fmt.Errorf("%w: task %q seat token %d expired at %s", store.ErrNotHeld, l.Task, l.Token, s.shown(cur).Expires.Format(time.RFC3339Nano))
	}
	exp := now + ttlMicros(ttl)
	if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.seats+` SET expires_at = ? WHERE task = ? AND token = ?`, exp, l.Task, l.Token); err != nil {
		return store.Lease{}, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.leases+` SET expires_at = max(expires_at, ?) WHERE task = ?`, exp, l.Task); err != nil {
		return store.Lease{}, err
	}
	cur.Expires = micros(exp)
	return s.shown(cur), nil
}

// releaseSeat is Release of a seat inside tx: the seat ends now, and the lease row's expiry
// becomes the latest of the other live seats' (or now), so that a free task looks free.
func (s *Store) releaseSeat(ctx context.Context, tx *sql.Tx, now int64, l store.Lease) error {
	if _, err := s.seat(ctx, tx, l); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.seats+` SET expires_at = min(expires_at, ?) WHERE task = ? AND token = ?`, now, l.Task, l.Token); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+s.t.leases+` SET expires_at = max(min(expires_at, ?1),
			coalesce((SELECT max(expires_at) FROM `+s.t.seats+` WHERE task = ?2 AND expires_at > ?1), 0))
		WHERE task = ?2`, now, l.Task)
	return err
}

// seatFence is the fence for a token that is not the lease row's: it passes when token is a
// seat of the task not cleared since and no exclusive grant came after the seats.
func (s *Store) seatFence(ctx context.Context, tx *sql.Tx, task string, token int64) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.t.seats+` WHERE task = ?1 AND token = ?2)
		AND EXISTS (SELECT 1 FROM `+s.t.leases+` l JOIN `+s.t.seats+` c ON c.task = l.task AND c.token = l.token WHERE l.task = ?1)`,
		task, token).Scan(&ok)
	return ok, err
}

// seatsDDL creates the seats table (schema version 5).
func seatsDDL(t tables) []string {
	return []string{
		// One row per seat granted (once run --limit); expired rows are cleared by the next seat
		// granted, except the one whose token is the lease row's.
		`CREATE TABLE IF NOT EXISTS ` + t.seats + ` (
			task TEXT NOT NULL,
			token INTEGER NOT NULL CHECK (token > 0),
			holder TEXT NOT NULL,
			run_id TEXT NOT NULL,
			seats INTEGER NOT NULL CHECK (seats >= 2),
			acquired_at INTEGER NOT NULL,
			expires_at INTEGER NOT NULL,
			PRIMARY KEY (task, token)
		) STRICT, WITHOUT ROWID`,
	}
}

// endSeats deletes the task's seats as a takeover ends the grant of token row (its lease row), and
// returns the tokens of the live grants it ended (sqlstore.ReplacedTokens, the rule the SQL stores
// share).
func (s *Store) endSeats(ctx context.Context, tx *sql.Tx, task string, row, now int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `DELETE FROM `+s.t.seats+` WHERE task = ? RETURNING token, expires_at > ?`, task, now)
	if err != nil {
		return nil, err
	}
	return sqlstore.ReplacedTokens(rows, row)
}
