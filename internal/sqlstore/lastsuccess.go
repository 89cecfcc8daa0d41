package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/once-run/once/store"
)

var _ store.SuccessFinder = (*Store)(nil)

// NewestSuccess finds the newest succeeded attempt among task's newest within attempts
// (store.SuccessFinder): a limited walk of attempts_task_time (migration 003), whatever the task's
// history; when none succeeded, a count of at most within+1 entries of the same index says
// whether the task has more. No new index: an older once shares the schema.
func (s *Store) NewestSuccess(ctx context.Context, task string, within int) (*store.Attempt, bool, error) {
	if err := store.CheckSuccessWithin(within); err != nil {
		return nil, false, err
	}
	var a *store.Attempt
	var beyond bool
	err := s.Do(ctx, func(ctx context.Context) error {
		a, beyond = nil, false
		got, err := scanAttempt(s.DB.QueryRowContext(ctx, s.NewestSuccessQuery(within), task))
		if err == nil {
			a = &got
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var n int
		if err := s.DB.QueryRowContext(ctx, s.AttemptsUpToQuery(within+1), task).Scan(&n); err != nil {
			return err
		}
		beyond = n > within
		return nil
	})
	return a, beyond, err
}

// NewestSuccessQuery reads a task's newest succeeded attempt among its newest within: the
// derived table is a walk of attempts_task_time limited to within rows (an index search on the
// task, in time order), and the outer query picks the newest success of those rows by its id.
// Exported for the backends' plan tests.
func (s *Store) NewestSuccessQuery(within int) string {
	return s.Q(`SELECT ` + attemptCols + ` FROM {p}attempts WHERE id = (SELECT h.id FROM (SELECT id, state, started_at
		FROM {p}attempts` + s.force("attempts_task_time") + ` WHERE task = ? ORDER BY started_at DESC, id DESC LIMIT ` + strconv.Itoa(within) + `) h
		WHERE h.state = 'succeeded' ORDER BY h.started_at DESC, h.id DESC LIMIT 1)`)
}

// AttemptsUpToQuery counts a task's attempts, at most limit, from attempts_task_time alone.
// Exported for the backends' plan tests.
func (s *Store) AttemptsUpToQuery(limit int) string {
	return s.Q(`SELECT COUNT(*) FROM (SELECT 1 AS one FROM {p}attempts` + s.force("attempts_task_time") +
		` WHERE task = ? LIMIT ` + strconv.Itoa(limit) + `) c`)
}
