package sqlite

import (
	"context"
	"database/sql"

	"github.com/once-run/once/store"
)

var _ store.RunningLister = (*Store)(nil)

// runningQuery lists the running attempts, at most ? of them: a walk of the partial unique index
// <attempts>_running (task, slot) WHERE state = 'running', which holds the running attempts alone,
// so it costs them, not the ledger.
func runningQuery(t tables) string {
	return `SELECT ` + attemptCols + ` FROM ` + t.attempts + ` WHERE state = 'running' ORDER BY task, slot LIMIT ?`
}

// RunningAttempts lists the attempts still running (store.RunningLister), one more than limit
// read to tell whether there are more.
func (s *Store) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	if err := store.CheckRunningLimit(limit); err != nil {
		return store.RunningList{}, err
	}
	var out store.RunningList
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, runningQuery(s.t), limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAttempt(rows)
			if err != nil {
				return err
			}
			out.Add(a, limit)
		}
		return rows.Err()
	})
	if err != nil {
		return store.RunningList{}, err
	}
	return out, nil
}
