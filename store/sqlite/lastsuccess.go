package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/once-run/once/store"
)

var _ store.SuccessFinder = (*Store)(nil)

// NewestSuccess finds the newest succeeded attempt among task's newest within attempts
// (store.SuccessFinder): a walk of the (task, started_at) index, newest first, that stops at the
// first success or at within rows, whatever the task's history; when none succeeded, a count of at
// most within+1 entries of the same index (no table row read) says whether the task has more.
func (s *Store) NewestSuccess(ctx context.Context, task string, within int) (*store.Attempt, bool, error) {
	if err := store.CheckSuccessWithin(within); err != nil {
		return nil, false, err
	}
	if err := s.still(); err != nil {
		return nil, false, err
	}
	a, err := scanAttempt(s.db.QueryRowContext(ctx, newestSuccessQuery(s.t), task, within))
	switch {
	case err == nil:
		return &a, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, false, s.mapErr(err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, attemptsUpToQuery(s.t), task, within+1).Scan(&n); err != nil {
		return nil, false, s.mapErr(err)
	}
	return nil, n > within, nil
}

// newestSuccessQuery reads task ?1's newest succeeded attempt among its newest ?2: the inner
// walk is limited, and the outer query (which SQLite does not flatten into it: it has a WHERE
// and the walk a LIMIT) takes its rows in the walk's order and stops at the first success.
func newestSuccessQuery(t tables) string {
	return `SELECT ` + attemptCols + ` FROM ` + t.attempts + ` WHERE rowid = (SELECT r FROM (SELECT rowid AS r, state FROM ` +
		t.attempts + ` INDEXED BY ` + t.attempts + `_task_started WHERE task = ?1 ORDER BY started_at DESC, rowid DESC LIMIT ?2)
		WHERE state = 'succeeded' LIMIT 1)`
}

// attemptsUpToQuery counts task ?1's attempts, at most ?2, from its index alone.
func attemptsUpToQuery(t tables) string {
	return `SELECT count(*) FROM (SELECT 1 FROM ` + t.attempts + ` INDEXED BY ` + t.attempts + `_task_started WHERE task = ?1 LIMIT ?2)`
}
