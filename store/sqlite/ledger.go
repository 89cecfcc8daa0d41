package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/once-run/once/store"
)

const attemptCols = `task, slot, number, run_id, state, holder, token, started_at, ended_at, exit_code,
	records, progress, checkpoint, note, resolved_as, resolved_by, resolved_at, resolution_note, seats`

type scanner interface{ Scan(dest ...any) error }

func scanAttempt(r scanner) (store.Attempt, error) {
	var a store.Attempt
	var state string
	var started int64
	var ended, exit, resAt sql.NullInt64
	var resAs, resBy, resNote sql.NullString
	if err := r.Scan(&a.Task, &a.Slot, &a.Number, &a.RunID, &state, &a.Holder, &a.Token, &started, &ended, &exit,
		&a.Records, &a.Progress, &a.Checkpoint, &a.Note, &resAs, &resBy, &resAt, &resNote, &a.Limit); err != nil {
		return a, err
	}
	a.State = store.State(state)
	a.StartedAt = micros(started)
	if ended.Valid {
		t := micros(ended.Int64)
		a.EndedAt = &t
	}
	if exit.Valid {
		c := int(exit.Int64)
		a.ExitCode = &c
	}
	if resAs.Valid {
		a.Resolution = &store.Resolution{As: store.State(resAs.String), By: resBy.String, At: micros(resAt.Int64), Note: resNote.String}
	}
	return a, nil
}

// fence fails with ErrNotHeld unless token is task's latest lease token or a current seat's
// (seatFence).
func (s *Store) fence(ctx context.Context, tx *sql.Tx, task string, token int64) error {
	l, found, err := s.lease(ctx, tx, task)
	if err != nil {
		return err
	}
	if found && l.Token != token {
		if ok, err := s.seatFence(ctx, tx, task, token); err != nil || ok {
			return err
		}
	}
	if !found || l.Token != token {
		return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d, held by %q)", store.ErrNotHeld, token, task, l.Token, l.Holder)
	}
	return nil
}

func (s *Store) attemptByRun(ctx context.Context, tx *sql.Tx, runID string) (store.Attempt, error) {
	a, err := scanAttempt(tx.QueryRowContext(ctx, `SELECT `+attemptCols+` FROM `+s.t.attempts+` WHERE run_id = ?`, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
	}
	return a, err
}

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

// Begin records a running attempt for (a.Task, a.Slot), fenced by a.Token. a.Number must be
// the slot's last attempt number + 1 (0 picks it). See store.Ledger.
func (s *Store) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	if err := a.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.tx(ctx, func(tx *sql.Tx, _ int64) error {
		now := s.wall() // recorded times are for people: this host's wall clock
		if err := s.fence(ctx, tx, a.Task, a.Token); err != nil {
			return err
		}
		var last int
		var running, resolved sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(number), 0),
			(SELECT run_id FROM `+s.t.attempts+` WHERE task = ?1 AND slot = ?2 AND state = 'running'),
			(SELECT resolved_as FROM `+s.t.attempts+` WHERE task = ?1 AND slot = ?2 ORDER BY number DESC LIMIT 1)
			FROM `+s.t.attempts+` WHERE task = ?1 AND slot = ?2`, a.Task, a.Slot).Scan(&last, &running, &resolved); err != nil {
			return err
		}
		if running.Valid {
			return fmt.Errorf("%w: task %q slot %q already has a running attempt (run %s)", store.ErrConflict, a.Task, a.Slot, running.String)
		}
		if resolved.String == string(store.Succeeded) && a.Slot != "" { // slot "": no memory, every run runs
			// A person marked the slot done between the run's read of it and this Begin.
			return store.ResolvedDone(a.Task, a.Slot, last)
		}
		n := a.Number
		if n == 0 {
			n = last + 1
		}
		if n != last+1 {
			return fmt.Errorf("%w: task %q slot %q: attempt %d refused, the next attempt is %d", store.ErrConflict, a.Task, a.Slot, n, last+1)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.t.attempts+` (task, slot, number, run_id, state, holder, token,
			started_at, records, progress, checkpoint, note, seats) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.Task, a.Slot, n, a.RunID, a.Holder, a.Token, now, a.Records, a.Progress, a.Checkpoint, a.Note, a.Limit); err != nil {
			return err
		}
		out = a
		out.Number, out.State, out.StartedAt = n, store.Running, micros(now)
		out.EndedAt, out.ExitCode, out.Resolution = nil, nil, nil
		return nil
	})
	return out, err
}

// running loads the attempt runID for a fenced write: ErrNotFound, ErrNotHeld (token is not
// the task's latest), ErrConflict (not running), then ErrNotHeld (not the token the attempt
// began with: a later holder cannot write another run's attempt).
func (s *Store) running(ctx context.Context, tx *sql.Tx, runID string, token int64) (store.Attempt, error) {
	a, err := s.attemptByRun(ctx, tx, runID)
	if err != nil {
		return a, err
	}
	if err := s.fence(ctx, tx, a.Task, token); err != nil {
		return a, err
	}
	if a.State != store.Running {
		return a, fmt.Errorf("%w: run %s is %s, not running", store.ErrConflict, runID, a.State)
	}
	if a.Token != token {
		return a, fmt.Errorf("%w: run %s began under token %d, not %d", store.ErrNotHeld, runID, a.Token, token)
	}
	return a, nil
}

// Finish moves the running attempt runID to o.State (succeeded, failed or unknown), fenced by token.
func (s *Store) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	if err := checkOutcome(o); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.tx(ctx, func(tx *sql.Tx, _ int64) error {
		var err error
		out, err = s.finish(ctx, tx, runID, token, o)
		return err
	})
	return out, err
}

func checkOutcome(o store.Outcome) error {
	if !o.State.Finishable() {
		return fmt.Errorf("%w: an attempt can only finish as succeeded, failed or unknown, not %q", store.ErrConflict, o.State)
	}
	return o.Check()
}

// finish is Finish inside tx.
func (s *Store) finish(ctx context.Context, tx *sql.Tx, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	now := s.wall() // recorded times are for people: this host's wall clock
	a, err := s.running(ctx, tx, runID, token)
	if err != nil {
		return a, err
	}
	note := store.JoinNote(a.Note, o.Note)
	if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.attempts+` SET state = ?, ended_at = ?, exit_code = ?, note = ?
		WHERE run_id = ? AND state = 'running'`, string(o.State), now, nullInt(o.ExitCode), note, runID); err != nil {
		return a, err
	}
	end := micros(now)
	a.State, a.EndedAt, a.Note = o.State, &end, note
	if o.ExitCode != nil {
		c := *o.ExitCode
		a.ExitCode = &c
	}
	return a, nil
}

// Report attaches figures to the running attempt runID, fenced by token. Zero fields are kept.
func (s *Store) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	if err := r.Check(); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx, _ int64) error {
		a, err := s.running(ctx, tx, runID, token)
		if err != nil {
			return err
		}
		r.Apply(&a)
		_, err = tx.ExecContext(ctx, `UPDATE `+s.t.attempts+` SET records = ?, progress = ?, checkpoint = ?, note = ?
			WHERE run_id = ? AND state = 'running'`, a.Records, a.Progress, a.Checkpoint, a.Note, runID)
		return err
	})
}

// Abandon marks task's running attempts begun under tokens below token as unknown and returns
// them; token must be the task's latest lease token.
func (s *Store) Abandon(ctx context.Context, task string, token int64) ([]store.Attempt, error) {
	var out []store.Attempt
	err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
		if err := s.fence(ctx, tx, task, token); err != nil {
			return err
		}
		var err error
		out, err = s.abandon(ctx, tx, now, task, token)
		return err
	})
	return out, err
}

// abandon is Abandon inside tx, once token is known to be the task's latest.
func (s *Store) abandon(ctx context.Context, tx *sql.Tx, clock int64, task string, token int64) ([]store.Attempt, error) {
	now := s.wall() // recorded times are for people: this host's wall clock
	rows, err := tx.QueryContext(ctx, `SELECT `+attemptCols+` FROM `+s.t.attempts+`
		WHERE task = ?1 AND state = 'running' AND token < ?2 AND `+s.notLiveSeat()+` ORDER BY slot, number`, task, token, clock)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Attempt
	end := micros(now)
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		a.State, a.EndedAt = store.Unknown, &end
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	_, err = tx.ExecContext(ctx, `UPDATE `+s.t.attempts+` SET state = 'unknown', ended_at = ?4
		WHERE task = ?1 AND state = 'running' AND token < ?2 AND `+s.notLiveSeat(), task, token, clock, now)
	return out, err
}

// notLiveSeat is true for an attempt (task ?1) whose token is not an unexpired seat's at ?3 (the
// store's clock): Abandon leaves the attempts of the task's other live seats running.
func (s *Store) notLiveSeat() string {
	return `token NOT IN (SELECT token FROM ` + s.t.seats + ` WHERE task = ?1 AND expires_at > ?3)`
}

// Resolve attaches a person's decision to the slot's last attempt when it is failed or unknown
// and unresolved.
func (s *Store) Resolve(ctx context.Context, r store.ResolveRequest) (store.Attempt, error) {
	if r.As != store.Succeeded && r.As != store.Failed {
		return store.Attempt{}, fmt.Errorf("%w: a slot can only be resolved as succeeded or failed, not %q", store.ErrConflict, r.As)
	}
	if err := r.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.tx(ctx, func(tx *sql.Tx, _ int64) error {
		now := s.wall() // recorded times are for people: this host's wall clock
		a, err := s.last(ctx, tx, r.Task, r.Slot)
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("%w: task %q slot %q has no attempt to resolve", store.ErrNotFound, r.Task, r.Slot)
		}
		if a.Resolution != nil {
			return fmt.Errorf("%w: task %q slot %q attempt %d was already resolved as %s by %s", store.ErrConflict, r.Task, r.Slot, a.Number, a.Resolution.As, a.Resolution.By)
		}
		if a.State != store.Failed && a.State != store.Unknown {
			return fmt.Errorf("%w: task %q slot %q attempt %d is %s; only failed or unknown attempts can be resolved", store.ErrConflict, r.Task, r.Slot, a.Number, a.State)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+s.t.attempts+` SET resolved_as = ?, resolved_by = ?, resolved_at = ?, resolution_note = ?
			WHERE task = ? AND slot = ? AND number = ?`, string(r.As), r.By, now, r.Note, r.Task, r.Slot, a.Number); err != nil {
			return err
		}
		a.Resolution = &store.Resolution{As: r.As, By: r.By, At: micros(now), Note: r.Note}
		out = *a
		return nil
	})
	return out, err
}

// Record keeps an event (store.EventKinds), stamped by this machine's clock. Not fenced.
func (s *Store) Record(ctx context.Context, e store.Event) error {
	if err := store.CheckEvent(e); err != nil {
		return err
	}
	return s.txRaw(ctx, func(tx *sql.Tx) error { return s.record(ctx, tx, e) })
}

// RecordLazy is Record without waiting for the disk (store.LazyRecorder): a crash or power loss
// soon after may lose the event; the next durable commit on this file makes it durable.
// A review event is recorded durably, by Record: it decides whether the slot waits for a person.
func (s *Store) RecordLazy(ctx context.Context, e store.Event) error {
	if err := store.CheckEvent(e); err != nil {
		return err
	}
	if e.Kind == store.Review {
		return s.Record(ctx, e)
	}
	return s.write(ctx, true, func(tx *sql.Tx) error { return s.record(ctx, tx, e) })
}

func (s *Store) record(ctx context.Context, tx *sql.Tx, e store.Event) error {
	now := s.wall() // recorded times are for people: this host's wall clock
	_, err := tx.ExecContext(ctx, `INSERT INTO `+s.t.events+` (task, slot, kind, run_id, holder, token, attempt, at, note)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.Task, e.Slot, string(e.Kind), e.RunID, e.Holder, e.Token, e.Attempt, now, e.Note)
	return err
}

func (s *Store) last(ctx context.Context, q querier, task, slot string) (*store.Attempt, error) {
	a, err := scanAttempt(q.QueryRowContext(ctx, lastQuery(s.t), task, slot))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (s *Store) slotState(ctx context.Context, q querier, task, slot string) (store.SlotState, error) {
	st := store.SlotState{Task: task, Slot: slot}
	last, err := s.last(ctx, q, task, slot)
	if err != nil || last == nil {
		return st, err
	}
	st.Last = last
	var review bool
	if err := q.QueryRowContext(ctx, slotQuery(s.t), task, slot, last.Number).Scan(&st.Failures, &st.Checkpoint, &review); err != nil {
		return st, err
	}
	st.Waiting = last.Resolution == nil && (last.State == store.Unknown || review)
	return st, nil
}

// Slot returns what the ledger knows about (task, slot).
func (s *Store) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	var out store.SlotState
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.slotState(ctx, tx, task, slot)
		return err
	})
	return out, err
}

// rowWith scans extra trailing columns into extra.
type rowWith struct {
	r     *sql.Rows
	extra []any
}

func (r rowWith) Scan(dest ...any) error { return r.r.Scan(append(dest, r.extra...)...) }
