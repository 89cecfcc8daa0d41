package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/once-run/once/store"
)

// FinishReleaseMySQL is FinishAndRelease's one statement on MySQL/MariaDB for the exclusive lease
// l, and its arguments: one multi-table UPDATE ends the attempt with o and releases the lease —
// both rows or neither. The lease row is matched while it is still l's grant (holder and token,
// not released) and read first (STRAIGHT_JOIN; a primary key lookup, so it is locked before the
// attempt, the order every other transaction locks them in); the attempt while it is still running
// under the token: the conditions of FinishTx and of the release statement, and the schema no
// newer than this process opened (SchemaGuard). Its ROW_COUNT() is 2 when both rows changed, 0
// when a condition did not hold.
func (s *Store) FinishReleaseMySQL(runID string, l store.Lease, o store.Outcome) (string, []any) {
	set, args := s.finishSetOf(o, "t.")
	return s.Q(fmt.Sprintf(finishReleaseMySQL, set)), append(args, l.Task, l.Holder, l.Token, runID, l.Token)
}

// finishReleaseMySQL is FinishReleaseMySQL's statement, with finishSetOf's clause at %s.
const finishReleaseMySQL = `UPDATE {p}leases l STRAIGHT_JOIN {p}attempts t ON t.task = l.task
	SET %s, l.holder = '', l.run_id = '', l.expires_at = '1970-01-01 00:00:00'
	WHERE l.task = ? AND l.holder = ? AND l.token = ? AND l.holder <> ''
		AND t.run_id = ? AND t.state = 'running' AND t.token = ? AND ` + SchemaGuard

// finishReleaseMySQL runs FinishReleaseMySQL autocommitted and reads the attempt back in the same
// batch (the store's connections run multi-statement queries): one round trip where the long way's
// transaction takes seven. done is false when it changed nothing (or found no attempt): the caller
// then goes the long way, whose transaction says why.
func (s *Store) finishReleaseMySQL(ctx context.Context, runID string, l store.Lease, o store.Outcome) (a store.Attempt, done bool, err error) {
	q, args := s.FinishReleaseMySQL(runID, l, o)
	q += s.Q(`;
	SELECT ` + attemptCols + `, ROW_COUNT() FROM {p}attempts WHERE run_id = ? ORDER BY id DESC LIMIT 1`)
	args = append(args, runID)
	tries := 0
	err = s.Do(ctx, func(ctx context.Context) error {
		tries++
		rows, err := s.DB.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		a, done, err = scanChanged(rows, 2)
		if err == nil && !done && tries > 1 && committedBefore(a, runID, l.Token, o.State) {
			done = true // an earlier try committed and its answer was lost: this is its outcome
		}
		return err
	})
	return a, done, err
}

// committedBefore reports whether a, read as run runID's attempt, is what an earlier try of
// FinishReleaseMySQL or FinishReleasePostgres wrote: ended in state under token. Nothing else
// ends an attempt as succeeded or failed (Abandon makes it unknown), and the statement released
// the lease with it.
func committedBefore(a store.Attempt, runID string, token int64, state store.State) bool {
	return a.RunID == runID && a.Token == token && a.State == state && a.EndedAt != nil
}

// scanChanged reads the one row of a batch's result sets, an attempt and ROW_COUNT(), and closes
// rows. done is whether the row was there and the count was want.
func scanChanged(rows *sql.Rows, want int64) (a store.Attempt, done bool, err error) {
	defer rows.Close()
	for {
		if cols, _ := rows.Columns(); len(cols) > 0 {
			for rows.Next() {
				var n int64
				if a, err = scanAttempt(extra{rows, []any{&n}}); err != nil {
					return a, false, err
				}
				done = n == want
			}
		}
		if !rows.NextResultSet() {
			break
		}
	}
	return a, done, rows.Err()
}
