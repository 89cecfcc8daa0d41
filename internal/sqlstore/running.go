package sqlstore

import (
	"context"

	"github.com/once-run/once/store"
)

// The attempts still running (store.RunningLister), up to the limit. PostgreSQL reads its partial
// unique index attempts_one_running (task, slot) WHERE state = 'running' (migration 001), which holds
// them alone: the cost is the attempts running. MySQL/MariaDB have no partial index: their
// attempts_one_running is UNIQUE (task, running_slot) over the generated column running_slot (the
// slot while the attempt runs, NULL after), whose running rows are spread through the whole index.
// So each task's lease row (one per task ever granted, kept for ever; every attempt is begun under a
// grant of its task) leads to a search of that key for the task's running rows, which sit after its
// NULLs: the cost is the tasks and the attempts running, not the ledger, without a new index, which
// would be a migration that every older once on the fleet then refuses (docs/operations.md).

// RunningQueryPostgres and RunningQueryMySQL list running attempts, at most ? of them.
const (
	RunningQueryPostgres = `SELECT ` + attemptCols + ` FROM {p}attempts WHERE state = 'running' ORDER BY task, slot LIMIT ?`
	RunningQueryMySQL    = `SELECT ` + attemptColsA + ` FROM {p}leases l STRAIGHT_JOIN {p}attempts a FORCE INDEX (attempts_one_running)` +
		` ON a.task = l.task AND a.running_slot IS NOT NULL ORDER BY l.task LIMIT ?`
)

// attemptColsA is attemptCols of the attempts table named a (the leases table has some of its names).
const attemptColsA = `a.task, a.slot, a.run_id, a.attempt, a.state, a.holder, a.token, a.started_at, a.ended_at, a.exit_code,
	a.records, a.progress, a.checkpoint, a.note, a.res_as, a.res_by, a.res_at, a.res_note, a.seats`

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
			out.Add(a, limit)
		}
		return rows.Err()
	})
	if err != nil {
		return store.RunningList{}, err
	}
	return out, nil
}
