package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/once-run/once/store"
)

// TakeOver is Acquire with req.Replace (store.Leaser) on a task whose lease row exists: in one
// transaction it locks the row, reads the grant it replaces, writes the new one with the next
// token, whatever the old grant's state, and deletes the task's seats: a row that summarised live
// seats (seats.go) is replaced with every seat it summarised, as etcd's and ZooKeeper's takeovers
// end them (left live, Abandon took their attempts for a live seat's, and a seat acquire could
// count them and be granted beside the new exclusive grant). until is the dialect's expression
// for now plus ? µs. A newer once's schema (Ahead) rolls it back. found is false when the task has
// no row yet: the backend's own Acquire
// inserts it (and, should a concurrent one win that race, TakeOver is tried again).
func (s *Store) TakeOver(ctx context.Context, req store.AcquireRequest, until string) (l store.Lease, found bool, err error) {
	err = s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		old := store.Lease{Task: req.Task}
		var live bool
		err := tx.QueryRowContext(ctx, s.Q(`SELECT holder, run_id, token, acquired_at, expires_at, expires_at > {now}
			FROM {p}leases WHERE task = ? FOR UPDATE`), req.Task).Scan(&old.Holder, &old.RunID, &old.Token, &old.Acquired, &old.Expires, &live)
		if found = err == nil; !found {
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			return err
		}
		var tokens []int64
		if live && old.Holder != "" {
			if tokens, err = s.liveSeatTokens(ctx, tx, req.Task, old.Token); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}leases SET holder = ?, run_id = ?, token = token + 1,
			acquired_at = {now}, expires_at = `+until+` WHERE task = ?`), req.Holder, req.RunID, req.TTL.Microseconds(), req.Task); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.Q(`DELETE FROM {p}lease_seats WHERE task = ?`), req.Task); err != nil {
			return err
		}
		l = store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID}
		var v int64
		if err := tx.QueryRowContext(ctx, s.Q(`SELECT token, acquired_at, expires_at, `+SchemaVersion+` FROM {p}leases WHERE task = ?`), req.Task).
			Scan(&l.Token, &l.Acquired, &l.Expires, &v); err != nil {
			return err
		}
		if err := s.Ahead(v); err != nil {
			return err // a newer once upgraded the schema: the takeover is rolled back
		}
		l.Acquired, l.Expires = l.Acquired.UTC(), l.Expires.UTC()
		if live && old.Holder != "" {
			old.Acquired, old.Expires = old.Acquired.UTC(), old.Expires.UTC()
			l.Replaced = &store.Replacement{Lease: old, Tokens: tokens}
		}
		return nil
	})
	return l, found, err
}

// liveSeatTokens are the tokens of the task's live seats when its lease row, of token row, is
// their summary (a takeover ends them all: store.Replacement), else row alone (ReplacedTokens).
func (s *Store) liveSeatTokens(ctx context.Context, tx *sql.Tx, task string, row int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, s.Q(`SELECT token, expires_at > {now} FROM {p}lease_seats WHERE task = ?`), task)
	if err != nil {
		return nil, err
	}
	return ReplacedTokens(rows, row)
}

// ReplacedTokens reads a task's seats as rows of (token, live) and returns the tokens of the live
// grants a takeover of the lease row of token row ends (store.Replacement.Tokens), in order, and
// closes rows: every live seat's when the row is their summary — some seat, live or not, has its
// token (it carries the latest seat's, which may have been released or expired beside live
// ones) — else row alone, an exclusive grant (seats left are not current). SQLite's takeover reads
// its seats with it too.
func ReplacedTokens(rows *sql.Rows, row int64) ([]int64, error) {
	defer rows.Close()
	var live []int64
	summary := false
	for rows.Next() {
		var t int64
		var alive bool
		if err := rows.Scan(&t, &alive); err != nil {
			return nil, err
		}
		summary = summary || t == row
		if alive {
			live = append(live, t)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !summary {
		return []int64{row}, nil
	}
	slices.Sort(live)
	return live, nil
}

// Acquire is the Acquire of PostgreSQL and MySQL (store.Leaser): a seat of the lease with
// req.Limit (AcquireSeat), a takeover with req.Replace (Replace), else acquire, the backend's one
// round trip for a free or expired lease. until is the dialect's "now plus ? microseconds".
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest, until string,
	acquire func(context.Context, store.AcquireRequest) (store.Lease, error)) (store.Lease, error) {
	if req.Limit >= 2 {
		return s.AcquireSeat(ctx, req, until)
	}
	if req.Replace {
		return s.Replace(ctx, req, until, acquire)
	}
	return acquire(ctx, req)
}

// Replace is a backend's Acquire for req.Replace: TakeOver, or acquire (the backend's plain
// Acquire, which inserts the row) when the task has no row yet, again should a concurrent first
// acquire win the insert.
func (s *Store) Replace(ctx context.Context, req store.AcquireRequest, until string,
	acquire func(context.Context, store.AcquireRequest) (store.Lease, error)) (store.Lease, error) {
	if err := CheckAcquire(req); err != nil {
		return store.Lease{}, err
	}
	for try := 0; ; try++ {
		l, found, err := s.TakeOver(ctx, req, until)
		if err != nil || found {
			return l, err
		}
		if l, err = acquire(ctx, req); !errors.Is(err, store.ErrBusy) || try >= 2 {
			return l, err
		}
	}
}
