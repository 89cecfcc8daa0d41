package sqlstore

import (
	"context"

	"github.com/once-run/once/store"
)

// The attempts still running (store.RunningLister), read from an index that holds them alone, in
// its order, up to the limit: PostgreSQL's partial unique index attempts_one_running (task, slot)
// WHERE state = 'running' (migration 001); on MySQL/MariaDB, which have no partial index, the key
// attempts_running (running_slot, task) of migration 007 over the generated column running_slot
// (the slot while the attempt runs, NULL after), whose range running_slot IS NOT NULL skips every
// ended attempt, named with FORCE INDEX as every MySQL read of the ledger is (history.go's force).
// Either costs the attempts running, not the ledger.

// RunningQueryPostgres and RunningQueryMySQL list running attempts, at most ? of them.
const (
	RunningQueryPostgres = `SELECT ` + attemptCols + ` FROM {p}attempts WHERE state = 'running' ORDER BY task, slot LIMIT ?`
	RunningQueryMySQL    = `SELECT ` + attemptCols + ` FROM {p}attempts FORCE INDEX (attempts_running) WHERE running_slot IS NOT NULL ORDER BY running_slot, task LIMIT ?`
)

var _ store.RunningLister = (*Store)(nil)

// RunningQuery is the flavor's query of running attempts (exported for the backends' plan tests).
func (s *Store) RunningQuery() string {
	if s.Flavor == Postgres {
		return s.Q(RunningQueryPostgres)
	}
	return s.Q(RunningQueryMySQL)
}

// RunningAttempts lists the attempts still running (store.RunningLister), one more than limit read
// to tell whether there are more.
func (s *Store) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	if err := store.CheckRunningLimit(limit); err != nil {
		return store.RunningList{}, err
	}
	var out store.RunningList
	err := s.Do(ctx, func(ctx context.Context) error {
		out = store.RunningList{}
		rows, err := s.DB.QueryContext(ctx, s.RunningQuery(), limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAttempt(rows)
			if err != nil {
				return err
			}
			if len(out.Attempts) == limit {
				out.More = true
				continue
			}
			out.Attempts = append(out.Attempts, a)
		}
		return rows.Err()
	})
	if err != nil {
		return store.RunningList{}, err
	}
	return out, nil
}
