package sqlstore

// An attempt's life in the ledger: fenced by the task's lease row, begun, reported on, finished.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/once-run/once/store"
)

// fence locks the task's lease row for the rest of tx and fails with ErrNotHeld unless token is the
// task's latest token or a current seat's (seatFence), and with store.ErrSchemaAhead when a newer
// once upgraded the schema (Ahead: the version is a column of the same statement).
func (s *Store) fence(ctx context.Context, tx *sql.Tx, task string, token int64) error {
	var cur, v int64
	err := tx.QueryRowContext(ctx, s.Q(FenceQuery), task).Scan(&cur, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: task %q has no lease (token %d)", store.ErrNotHeld, task, token)
	}
	if err != nil {
		return err
	}
	if err := s.Ahead(v); err != nil {
		return err
	}
	return s.fenceAt(ctx, tx, task, token, cur)
}

// FenceQuery locks task ?'s lease row and reads its latest token and the store's schema version.
// The lock is the lease row's alone: a locking read does not lock what a subquery reads.
const FenceQuery = `SELECT token, ` + SchemaVersion + ` FROM {p}leases WHERE task = ? FOR UPDATE`

// fenceAt is fence's check of token against cur, the task's latest token read under the lock.
func (s *Store) fenceAt(ctx context.Context, tx *sql.Tx, task string, token, cur int64) error {
	if cur != token {
		if ok, err := s.seatFence(ctx, tx, task, token); err != nil || ok {
			return err
		}
		return fmt.Errorf("%w: task %q: token %d is not the latest (%d)", store.ErrNotHeld, task, token, cur)
	}
	return nil
}

// lockRun reads the attempt runID (its latest, if the run id was reused), locks its task's lease
// row and checks token against it (fence). On PostgreSQL that is one statement; elsewhere, and
// when it finds nothing (no such attempt, or no lease: the two statements then say which), the
// read and the fence one after the other. The attempt as read may be older than the lock.
func (s *Store) lockRun(ctx context.Context, tx *sql.Tx, runID string, token int64) (store.Attempt, error) {
	if s.Flavor == Postgres {
		var cur, v int64
		a, err := scanAttempt(extra{tx.QueryRowContext(ctx, s.Q(RunLockQuery), runID), []any{&cur, &v}})
		if err == nil {
			if err := s.Ahead(v); err != nil {
				return a, err
			}
			return a, s.fenceAt(ctx, tx, a.Task, token, cur)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return a, err
		}
	}
	a, err := s.attemptByRun(ctx, tx, runID)
	if err != nil {
		return a, err
	}
	return a, s.fence(ctx, tx, a.Task, token)
}

// RunQuery reads the attempt of a run id (its latest, if the id was reused). Argument: the run id.
const RunQuery = `SELECT ` + attemptCols + ` FROM {p}attempts WHERE run_id = ? ORDER BY id DESC LIMIT 1`

// runIDPostgres is the id of a run id's latest attempt on PostgreSQL, which ordered RunQuery by
// walking the primary key backwards until it met the run id: cheap for a run just begun, a walk
// of every later attempt for an older one. OFFSET 0 keeps the inner read on the run id's index
// (planned apart), and MAX takes the latest of its few rows; the plans are tested (sqltest).
const runIDPostgres = `(SELECT MAX(r.id) FROM (SELECT id FROM {p}attempts WHERE run_id = ? OFFSET 0) r)`

// RunQueryPostgres is RunQuery as PostgreSQL runs it.
const RunQueryPostgres = `SELECT ` + attemptCols + ` FROM {p}attempts WHERE id = ` + runIDPostgres

// RunLockQuery is RunQueryPostgres with the task's latest token, its lease row locked (FOR
// UPDATE OF: PostgreSQL only), and the store's schema version. No row: no such attempt, or its
// task has no lease.
var RunLockQuery = `SELECT ` + qualified("a", attemptCols) + `, l.token, ` + SchemaVersion + ` FROM {p}attempts a
	JOIN {p}leases l ON l.task = a.task WHERE a.id = ` + runIDPostgres + ` FOR UPDATE OF l`

// runQuery is RunQuery in this store's flavor.
func (s *Store) runQuery() string {
	if s.Flavor == Postgres {
		return RunQueryPostgres
	}
	return RunQuery
}

// qualified prefixes each column of the list cols with the table alias t.
func qualified(t, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = t + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Begin records a new running attempt (store.Ledger). When a.Number is 0 the next number is used.
func (s *Store) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	if err := a.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	n := a.Number
	// The unique constraints turn a duplicate number or a second running attempt into ErrConflict.
	insert := attemptInsert + `VALUES (` + attemptValues + `)`
	args := func(n int) []any {
		return []any{a.Task, a.Slot, a.RunID, n, a.Holder, a.Token, a.Records, a.Progress, a.Checkpoint, a.Note, a.Limit}
	}
	var err error
	long := true
	if s.Flavor == Postgres && a.Number > 0 && a.Limit < 2 {
		// One statement and no transaction around it (one round trip, where the transaction
		// takes four): it locks the lease row if token is still the task's, deletes the wait
		// the new attempt ends and inserts the attempt, or does nothing at all. Nothing (no row)
		// goes the long way below, which says why (no lease, another token, a seat's).
		err = s.Do(ctx, func(ctx context.Context) error {
			var err error
			out, err = scanAttempt(s.DB.QueryRowContext(ctx, s.Q(BeginPostgres), append([]any{a.Task, a.Token, a.Task, a.Slot, a.Task, a.Slot}, args(n)...)...))
			if long = errors.Is(err, sql.ErrNoRows); long {
				return nil
			}
			return err
		})
	}
	if long && err == nil {
		err = s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.fence(ctx, tx, a.Task, a.Token); err != nil {
				return err
			}
			// The slot's last attempt, locked: a resolve (which locks it too) is then either
			// seen here or made after this attempt, and refused, since it is no longer the last.
			var last sql.NullInt64
			var resolved sql.NullString
			lerr := tx.QueryRowContext(ctx, s.Q(`SELECT attempt, res_as FROM {p}attempts WHERE task = ? AND slot = ?
				ORDER BY attempt DESC LIMIT 1 FOR UPDATE`), a.Task, a.Slot).Scan(&last, &resolved)
			if lerr != nil && !errors.Is(lerr, sql.ErrNoRows) {
				return lerr
			}
			if resolved.String == string(store.Succeeded) && a.Slot != "" { // slot "": no memory, every run runs
				return store.ResolvedDone(a.Task, a.Slot, int(last.Int64))
			}
			if a.Number == 0 {
				n = int(last.Int64) + 1 // the slot's last attempt, just read (0 when none)
			}
			if s.Flavor == Postgres {
				// The wait the new attempt ends is deleted in the same statement, and the row
				// comes back as written.
				var err error
				out, err = scanAttempt(tx.QueryRowContext(ctx, s.Q(`WITH w AS (`+deleteWait+`) `+
					insert+` RETURNING `+attemptCols), append([]any{a.Task, a.Slot}, args(n)...)...))
				return err
			}
			if _, err := tx.ExecContext(ctx, s.Q(insert), args(n)...); err != nil {
				return err
			}
			var err error
			if out, err = s.attemptTx(ctx, tx, a.Task, a.Slot, n); err != nil {
				return err
			}
			return s.notWaiting(ctx, tx, a.Task, a.Slot) // a new attempt ends a wait
		})
	}
	if errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrResolvedDone) {
		// Only a unique constraint raises it here (but store.ResolvedDone): say which rule in words.
		err = fmt.Errorf("%w: task %q slot %q already has attempt %d or a running attempt (%s)", store.ErrConflict,
			a.Task, a.Slot, n, strings.TrimPrefix(err.Error(), store.ErrConflict.Error()+": "))
	}
	return out, err
}

// BeginPostgres is Begin's one statement on PostgreSQL for the exclusive lease: the lease row
// locked when the token is still the task's (l), the slot's last attempt locked (r: a resolve
// locks it too; not the slot "", which has no memory: NULLIF makes its condition false before the
// planner prices it, where a test of the column let it scan the whole table for the slot of a task
// without --slot, every run: 0.26 s at 2 million attempts) and the attempt refused when a person
// resolved it as succeeded or a newer once upgraded the schema (ok: SchemaGuard), the wait
// deleted (w) and the attempt inserted only then. Nothing done (no row) goes Begin's long way,
// which says why. Arguments: task, token; task, slot; task, slot; the attempt's eleven values.
const BeginPostgres = `WITH l AS (SELECT token FROM {p}leases WHERE task = ? AND token = ? FOR UPDATE),
	r AS (SELECT res_as FROM {p}attempts WHERE task = ? AND slot = NULLIF(?, '') ORDER BY attempt DESC LIMIT 1 FOR UPDATE),
	ok AS (SELECT token FROM l WHERE NOT EXISTS (SELECT 1 FROM r WHERE res_as = 'succeeded') AND ` + SchemaGuard + `),
	w AS (` + deleteWait + ` AND EXISTS (SELECT 1 FROM ok))
	` + attemptInsert + `SELECT ` + attemptValues + ` FROM ok
	RETURNING ` + attemptCols

// attemptInsert and attemptValues are a new running attempt's columns and values, which Begin
// inserts with VALUES and BeginPostgres with SELECT … FROM l: task, slot, run id, number, holder,
// token, records, progress, checkpoint, note, seats.
const (
	attemptInsert = `INSERT INTO {p}attempts
	(task, slot, run_id, attempt, state, holder, token, started_at, records, progress, checkpoint, note, seats) `
	attemptValues = `?, ?, ?, ?, 'running', ?, ?, {now}, ?, ?, ?, ?, ?`
)

// deleteWait deletes the wait of slot ? of task ? (a new attempt ends it): arguments task, slot.
const deleteWait = `DELETE FROM {p}waiting WHERE task = ? AND slot = ?`

// attemptByRun reads the attempt runID (its latest, if the run id was reused) for update.
func (s *Store) attemptByRun(ctx context.Context, tx *sql.Tx, runID string) (store.Attempt, error) {
	a, err := scanAttempt(tx.QueryRowContext(ctx, s.Q(s.runQuery()), runID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("%w: no attempt for run %q", store.ErrNotFound, runID)
	}
	return a, err
}

// Finish moves the running attempt runID to o.State (store.Ledger).
func (s *Store) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	if err := o.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = s.FinishTx(ctx, tx, runID, token, o)
		return err
	})
	return out, err
}

// FinishTx is Finish inside tx (for a backend's store.Finisher): it locks the task's lease row for
// the rest of tx.
func (s *Store) FinishTx(ctx context.Context, tx *sql.Tx, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	if !o.State.Finishable() {
		return store.Attempt{}, fmt.Errorf("%w: an attempt can only finish as succeeded, failed or unknown, not %q", store.ErrConflict, o.State)
	}
	a, err := s.lockRun(ctx, tx, runID, token)
	if err != nil {
		return a, err
	}
	// Under the lease row's lock, the attempt ends if it is still running under token: Abandon may
	// have ended it since the read above, and the statement's conditions see that. Only when it
	// changes nothing does a second read say why.
	set, args := s.finishSet(o)
	update := `UPDATE {p}attempts SET ` + set + `
		WHERE task = ? AND slot = ? AND attempt = ? AND state = 'running' AND token = ?`
	args = append(args, a.Task, a.Slot, a.Number, token)
	var out store.Attempt
	changed := true
	if s.Flavor == Postgres { // the row as written, in the same round trip
		out, err = scanAttempt(tx.QueryRowContext(ctx, s.Q(update+` RETURNING `+attemptCols), args...))
		if changed = !errors.Is(err, sql.ErrNoRows); changed && err != nil {
			return a, err
		}
	} else {
		res, err := tx.ExecContext(ctx, s.Q(update), args...)
		if err != nil {
			return a, err
		}
		if n, err := res.RowsAffected(); err == nil && n != 1 {
			changed = false
		} else if out, err = s.attemptTx(ctx, tx, a.Task, a.Slot, a.Number); err != nil {
			return a, err
		}
	}
	if !changed {
		if a, err = s.attemptByRun(ctx, tx, runID); err != nil {
			return a, err
		}
		if err := runningUnder(a, runID, token); err != nil {
			return a, err
		}
		return a, fmt.Errorf("%w: run %q is no longer running", store.ErrConflict, runID)
	}
	if o.State == store.Unknown {
		if err := s.waitsSince(ctx, tx, a.Task, a.Slot, a.Number, false); err != nil {
			return a, err
		}
	}
	return out, nil
}

// finishSet is the SET clause that ends an attempt with outcome o, and its arguments.
func (s *Store) finishSet(o store.Outcome) (string, []any) { return s.finishSetOf(o, "") }

// finishSetOf is finishSet with its columns qualified by t ("t." in a multi-table UPDATE).
func (s *Store) finishSetOf(o store.Outcome, t string) (string, []any) {
	var exit any
	if o.ExitCode != nil {
		exit = *o.ExitCode
	}
	note, args := t+"note", []any{string(o.State), exit}
	if o.Note != "" {
		concat := "CONCAT(" + t + "note, '; ', ?)"
		if s.Flavor == Postgres {
			concat = t + "note || '; ' || ?"
		}
		// CHAR_LENGTH, not = '': MySQL's collation pads, so a note of spaces would equal ''.
		note = "CASE WHEN CHAR_LENGTH(" + t + "note) = 0 THEN ? ELSE " + concat + " END"
		args = append(args, o.Note, o.Note)
	}
	return t + `state = ?, ` + t + `ended_at = {now}, ` + t + `exit_code = ?, ` + t + `note = ` + note, args
}

// runningUnder is why a, read as run runID's attempt, may not be written under token: it is not
// running, or began under another token; nil when it may.
func runningUnder(a store.Attempt, runID string, token int64) error {
	if a.State != store.Running {
		return fmt.Errorf("%w: run %q is %s, not running", store.ErrConflict, runID, a.State)
	}
	if a.Token != token {
		return notItsToken(runID, a.Token, token)
	}
	return nil
}

// attemptTx reads attempt number n of task's slot.
func (s *Store) attemptTx(ctx context.Context, tx *sql.Tx, task, slot string, n int) (store.Attempt, error) {
	return scanAttempt(tx.QueryRowContext(ctx, s.Q(`SELECT `+attemptCols+` FROM {p}attempts
		WHERE task = ? AND slot = ? AND attempt = ?`), task, slot, n))
}

// Report attaches figures to the running attempt runID (store.Ledger).
func (s *Store) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	if err := r.Check(); err != nil {
		return err
	}
	return s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		a, err := s.attemptByRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if err := s.fence(ctx, tx, a.Task, token); err != nil {
			return err
		}
		if a, err = s.attemptByRun(ctx, tx, runID); err != nil {
			return err
		}
		if err := runningUnder(a, runID, token); err != nil {
			return err
		}
		r.Apply(&a)
		_, err = tx.ExecContext(ctx, s.Q(`UPDATE {p}attempts SET records = ?, progress = ?, checkpoint = ?, note = ?
			WHERE task = ? AND slot = ? AND attempt = ? AND state = 'running'`),
			a.Records, a.Progress, a.Checkpoint, a.Note, a.Task, a.Slot, a.Number)
		return err
	})
}

// FinishAndRelease records the outcome of the running attempt runID and releases l in one
// transaction (what a backend's store.Finisher does): one commit where Finish and Release make two.
// release is the backend's release statement (arguments: task, holder, token), which must change
// one row when l is still the current grant.
func (s *Store) FinishAndRelease(ctx context.Context, runID string, l store.Lease, o store.Outcome, release string) (store.Attempt, error) {
	if err := o.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	if s.Flavor == MySQL && l.Limit < 2 && o.State.Finishable() && o.State != store.Unknown {
		// One round trip where the transaction takes seven (finish.go); nothing done goes the
		// long way below, which says why.
		a, done, err := s.finishReleaseMySQL(ctx, runID, l, o)
		if err != nil || done {
			return a, err
		}
	}
	if s.Flavor == Postgres && l.Limit < 2 && o.State.Finishable() && o.State != store.Unknown {
		// One statement and no transaction around it (one round trip, where the transaction
		// takes five). Nothing done (no row) goes the long way below, which says why; so does
		// an unknown outcome, which also ends the slot's wait.
		long, tries := false, 0
		q, args := s.FinishReleasePostgres(runID, l, o)
		err := s.Do(ctx, func(ctx context.Context) error {
			var err error
			tries++
			out, err = scanAttempt(s.DB.QueryRowContext(ctx, q, args...))
			if long = errors.Is(err, sql.ErrNoRows); long {
				if tries > 1 { // an earlier try may have committed, its answer lost (as on MySQL)
					a, err := scanAttempt(s.DB.QueryRowContext(ctx, s.Q(RunQueryPostgres), runID))
					if err == nil && committedBefore(a, runID, l.Token, o.State) {
						out, long = a, false
					}
				}
				return nil
			}
			return err
		})
		if err != nil || !long {
			return out, err
		}
	}
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if out, err = s.FinishTx(ctx, tx, runID, l.Token, o); err != nil {
			return err
		}
		if l.Limit >= 2 {
			return s.releaseSeatTx(ctx, tx, l)
		}
		res, err := tx.ExecContext(ctx, s.Q(release), l.Task, l.Holder, l.Token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%w: task %q: token %d of %s was released or replaced", store.ErrNotHeld, l.Task, l.Token, l.Holder)
		}
		return nil
	})
	return out, err
}

// FinishReleasePostgres is FinishAndRelease's one statement on PostgreSQL for the exclusive lease
// l, and its arguments: the run's attempt found (i), the task's lease row locked while it is still
// l's grant (l: holder and token, not released), the attempt ended with o if it is still running
// under the token (a), and only then the lease released (r) — the conditions of FinishTx and of
// the release statement, and the schema no newer than this process opened (SchemaGuard), in one
// implicit transaction. No row: one of them did not hold.
func (s *Store) FinishReleasePostgres(runID string, l store.Lease, o store.Outcome) (string, []any) {
	set, args := s.finishSet(o)
	return s.Q(fmt.Sprintf(finishReleasePostgres, set)), append(append([]any{runID, l.Holder, l.Token}, args...), l.Task, l.Token, l.Task, l.Holder, l.Token)
}

// finishReleasePostgres is FinishReleasePostgres's statement, with finishSet's clause at %s. The
// attempt is matched by the lease's task too, so that it is a search of whichever index the
// planner takes (the running attempts' is on task and slot), never a walk. Arguments: run id;
// holder, token; the SET clause's; task, token (the attempt's); task, holder, token (the release's).
var finishReleasePostgres = `WITH i AS (SELECT id, task FROM {p}attempts WHERE id = ` + runIDPostgres + `),
	l AS (SELECT l.task FROM {p}leases l JOIN i ON l.task = i.task
		WHERE l.holder = ? AND l.token = ? AND l.holder <> '' AND ` + SchemaGuard + ` FOR UPDATE OF l),
	a AS (UPDATE {p}attempts t SET %s FROM i
		WHERE t.task = ? AND t.id = i.id AND t.state = 'running' AND t.token = ?
			AND EXISTS (SELECT 1 FROM l)
		RETURNING ` + qualified("t", attemptCols) + `),
	r AS (` + ReleasePostgres + ` AND EXISTS (SELECT 1 FROM a))
	SELECT ` + attemptCols + ` FROM a`

// ReleasePostgres is PostgreSQL's release of a grant (arguments: task, holder, token): the row
// and its token stay, the holder goes. FinishReleasePostgres releases with it too.
const ReleasePostgres = `UPDATE {p}leases SET holder = '', run_id = '', expires_at = TIMESTAMPTZ '1970-01-01 00:00:00+00'
	WHERE task = ? AND holder = ? AND token = ? AND holder <> ''`
