// Package sqlstore is the run ledger shared by the SQL stores (store/postgres, store/mysql).
//
// The ledger's queries are written once, in the common subset of PostgreSQL and MySQL/MariaDB, with
// "?" placeholders and two substitutions: {p} (the table prefix) and {now} (the database's clock).
// What differs between the databases (the lease statements, migrations, error codes) lives in the
// backend package behind Dialect.
//
// Every ledger write that is made on behalf of a run is fenced: it runs in a transaction that first
// locks the task's row in the leases table (SELECT … FOR UPDATE) and compares its token, so a write
// carrying a stale token cannot commit after a newer token was issued, and writes for one task are
// serialised by that row lock. Unique constraints (one attempt number per slot, one running attempt per
// slot) make the illegal states unrepresentable even if that logic were wrong.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-run/once/store"
)

// Dialect is what a SQL backend supplies.
type Dialect interface {
	// Rebind turns "?" placeholders into the database's own ($1, $2, … for PostgreSQL).
	Rebind(query string) string
	// Now is the SQL expression for the database's current time with microseconds.
	Now() string
	// MapError maps a driver error to the store's sentinels (ErrConflict for unique violations,
	// ErrUnavailable for connection, authentication and permission trouble). Errors that already
	// wrap a store sentinel are returned unchanged. It never includes a password.
	MapError(err error) error
	// Retryable reports whether err (as returned by the driver) is transient connection trouble
	// (refused, reset, server shutting down, deadlock) after which trying again may succeed.
	Retryable(err error) bool
}

// Store is the shared half of a SQL store: connection handling, retries and the Ledger. Backends
// embed it and add the Leaser.
type Store struct {
	DB      *sql.DB
	Dialect Dialect
	Prefix  string // table name prefix, e.g. "once_"
	// Flavor is Postgres or MySQL: it selects the statements of store.Keys and names the backend in
	// their errors.
	Flavor string
	// Returning, on the MySQL flavor, reports whether the server has INSERT … RETURNING (MariaDB
	// 10.5+), asked inside the claim's transaction: a claim is then one statement per batch,
	// without the claim-id read-back MySQL 8 needs. Nil: it has not.
	Returning func(ctx context.Context, tx *sql.Tx) bool
	// Retries is how many times an operation is retried after transient connection trouble, with
	// exponential backoff from Backoff; never past the caller's ctx.
	Retries int
	Backoff time.Duration
	// CallTimeout bounds each try of Do (a statement, a transaction, the handshake of a new
	// connection) when it is positive: the DSN's call_timeout, DefaultCallTimeout by default.
	CallTimeout time.Duration
	// SessionReadCommitted says every connection's session is READ COMMITTED already (MySQL sets it
	// once at connect), so Tx does not ask for the level per transaction: go-sql-driver sends that
	// as a statement of its own, one round trip more for each transaction.
	SessionReadCommitted bool

	// Schema is the schema version this process opened (the backend's newest migration), which
	// CheckSchema compares with the store's; 0: not checked.
	Schema int64
	ahead  atomic.Pointer[error] // CheckSchema found the schema newer: every operation returns it

	closeOnce sync.Once
	closeErr  error

	orderMu   sync.Mutex
	taskOrder string // the byte-order comparison of the leases' task column (tasks.go), once known
}

// Q expands {p}, {now} and {schema} (the schema version this process opened, SchemaGuard's) and
// rebinds the placeholders of query.
func (s *Store) Q(query string) string {
	query = strings.ReplaceAll(query, "{p}", s.Prefix)
	query = strings.ReplaceAll(query, "{now}", s.Dialect.Now())
	if strings.Contains(query, "{schema}") {
		v := s.Schema
		if v == 0 { // not checked: no version is newer
			v = math.MaxInt32
		}
		query = strings.ReplaceAll(query, "{schema}", strconv.FormatInt(v, 10))
	}
	return s.Dialect.Rebind(query)
}

// IdleTxTimeout is how long the server lets a session sit idle inside a transaction before ending
// it (PostgreSQL idle_in_transaction_session_timeout, MariaDB idle_transaction_timeout; a DSN
// parameter of that name overrides it). once's transactions take milliseconds; a session idle
// that long belongs to a holder that is gone or frozen, and its locks on the task's lease row
// would block every next holder.
const IdleTxTimeout = 10 * time.Second

// FullWait is how long Do keeps trying while the server has no connection left for it (a dialect's
// Full). A host that starts hundreds of jobs at the same second asks for hundreds of connections at
// once, and a run holds none while its command runs (ConnMaxIdle), so they come free within seconds:
// a full server is a queue, not an outage.
const FullWait = 10 * time.Second

// ConnMaxIdle is how long a pooled connection may sit unused before it is closed: a `once run` holds
// no connection while its command runs (its renewals, every ttl/3, and its finish open one again).
const ConnMaxIdle = time.Second

// fuller is implemented by dialects that can tell "the server has no connection slot left" (too many
// connections) from other trouble.
type fuller interface{ Full(err error) bool }

// Do runs fn, retrying it after transient connection trouble (at most s.Retries more times, with
// exponential backoff, never past ctx; for up to FullWait while the server is full), and returns its
// error mapped by the dialect. Each try is bounded by s.CallTimeout as well; a try cut off by it is
// not retried (a connection gone silent does not come back within a backoff, and a write it carried
// may have landed): its error says so. fn must be safe to repeat: every write the stores make is
// either conditional or fails closed when repeated.
func (s *Store) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	backoff := s.Backoff
	if backoff <= 0 {
		backoff = 50 * time.Millisecond
	}
	if p := s.ahead.Load(); p != nil {
		return *p
	}
	var fullSince time.Time
	for attempt := 0; ; {
		cutOff, err := s.try(ctx, fn)
		if err == nil || cutOff {
			return err
		}
		if ctx.Err() != nil || !s.Dialect.Retryable(err) {
			return s.Dialect.MapError(err)
		}
		wait := backoff
		if f, ok := s.Dialect.(fuller); ok && f.Full(err) {
			if fullSince.IsZero() {
				fullSince = time.Now()
			}
			if time.Since(fullSince) >= FullWait {
				return s.Dialect.MapError(err)
			}
			// Spread the retries of a burst's processes over the wait, without growing past it.
			wait = min(backoff, 500*time.Millisecond)
			wait = wait/2 + rand.N(wait/2+1)
		} else {
			if attempt >= s.Retries {
				return s.Dialect.MapError(err)
			}
			attempt++
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.Dialect.MapError(err)
		case <-t.C:
		}
		backoff *= 2
	}
}

// Tx runs fn in a READ COMMITTED transaction under Do. fn's error rolls the transaction back.
func (s *Store) Tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.Do(ctx, func(ctx context.Context) error {
		opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
		if s.SessionReadCommitted {
			opts = nil
		}
		tx, err := s.DB.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// Closed reports whether err is database/sql's refusal of a pool that was closed (Close): the
// dialects map it to store.ErrUnavailable, as every backend answers a call on a closed store.
// database/sql does not export that error, so it is known by its text.
func Closed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sql: database is closed")
}

// Close closes the connection pool. Leases are not released.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.DB.Close() })
	return s.closeErr
}

// Now returns the database's current time (store.Clock).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.Do(ctx, func(ctx context.Context) error {
		return s.DB.QueryRowContext(ctx, s.Q("SELECT {now}")).Scan(&t)
	})
	return t.UTC(), err
}

// Refuse is Ahead for a grant l that a statement of its own committed (a backend's plain acquire,
// whose read-back has the schema version v): when v is newer, l is given back with release (the
// backend's release statement: task, holder, token), past the refusal Do now makes and best
// effort, so that the newer once's runs do not find the task held until l expires.
func (s *Store) Refuse(ctx context.Context, l store.Lease, v int64, release string) error {
	err := s.Ahead(v)
	if err != nil {
		_, _ = s.DB.ExecContext(ctx, s.Q(release), l.Task, l.Holder, l.Token)
	}
	return err
}

// CheckSchema reads the store's schema version (one round trip) and fails with
// store.ErrSchemaAhead when a newer once upgraded it since this process opened it; from then on
// every operation of this Store fails so, without a round trip (store.SchemaChecker). A
// long-running process calls it at each poll: between polls, only the writes that start or end
// work read the version (Ahead, in statements they make anyway: fence, Begin, Start, Finish, a
// seat's or a takeover's acquire); reads and the other writes do not.
func (s *Store) CheckSchema(ctx context.Context) error {
	if s.Schema == 0 {
		return nil
	}
	var v int64
	err := s.Do(ctx, func(ctx context.Context) error {
		return s.DB.QueryRowContext(ctx, s.Q("SELECT "+SchemaVersion)).Scan(&v)
	})
	if err != nil {
		return err
	}
	return s.Ahead(v)
}

// SchemaVersion is the store's schema version as a scalar subquery: a column of a statement a
// write runs anyway (fence, a lease acquire's read-back), so that the write learns of a newer
// once's upgrade without a round trip of its own and fails with Ahead. One row of a tiny table,
// read by its primary key: the plans are tested (sqltest).
const SchemaVersion = `(SELECT COALESCE(MAX(version), 0) FROM {p}schema_version)`

// SchemaGuard is a condition that holds while the store's schema is no newer than this process
// opened, for a statement that commits alone (autocommit): it then does nothing, and its caller's
// long way, whose transaction reads SchemaVersion, says why.
const SchemaGuard = SchemaVersion + ` <= {schema}`

// Ahead is nil when v, the store's schema version as a write read it, is not newer than s.Schema;
// otherwise store.ErrSchemaAhead (and ErrUnavailable), which every later operation of this Store
// returns too, without a round trip (Do): a newer once upgraded the store since this process
// opened it. The write that read v must not commit.
func (s *Store) Ahead(v int64) error {
	if s.Schema == 0 || v <= s.Schema {
		return nil
	}
	e := store.SchemaAhead(fmt.Sprintf("%s (prefix %q)", s.Flavor, strings.TrimSuffix(s.Prefix, "_")), v, s.Schema)
	s.ahead.CompareAndSwap(nil, &e)
	return *s.ahead.Load()
}

// Leases lists the grants that have not expired, by task. The leases table must have the columns
// task, holder, run_id, token, acquired_at and expires_at; a released lease has holder ”.
func (s *Store) Leases(ctx context.Context) ([]store.Lease, error) {
	var out []store.Lease
	err := s.Do(ctx, func(ctx context.Context) error {
		out = out[:0]
		// A lease row whose token is a seat's is the seats' summary (seats.go): its seats are listed.
		rows, err := s.DB.QueryContext(ctx, s.Q(`SELECT task, holder, run_id, token, acquired_at, expires_at, 0 AS seats
			FROM {p}leases l WHERE expires_at > {now} AND holder <> ''
				AND NOT EXISTS (SELECT 1 FROM {p}lease_seats c WHERE c.task = l.task AND c.token = l.token)
			UNION ALL SELECT task, holder, run_id, token, acquired_at, expires_at, seats FROM {p}lease_seats WHERE expires_at > {now}
			ORDER BY task, token`))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l store.Lease
			if err := rows.Scan(&l.Task, &l.Holder, &l.RunID, &l.Token, &l.Acquired, &l.Expires, &l.Limit); err != nil {
				return err
			}
			l.Acquired, l.Expires = l.Acquired.UTC(), l.Expires.UTC()
			out = append(out, l)
		}
		return rows.Err()
	})
	return out, err
}

// attemptCols are the attempts columns scanAttempt reads, in order.
const attemptCols = `task, slot, run_id, attempt, state, holder, token, started_at, ended_at, exit_code,
	records, progress, checkpoint, note, res_as, res_by, res_at, res_note, seats`

type scanner interface{ Scan(dest ...any) error }

func scanAttempt(r scanner) (store.Attempt, error) {
	var (
		a                     store.Attempt
		state                 string
		ended, resAt          sql.NullTime
		exit                  sql.NullInt64
		resAs, resBy, resNote sql.NullString
	)
	err := r.Scan(&a.Task, &a.Slot, &a.RunID, &a.Number, &state, &a.Holder, &a.Token, &a.StartedAt, &ended, &exit,
		&a.Records, &a.Progress, &a.Checkpoint, &a.Note, &resAs, &resBy, &resAt, &resNote, &a.Limit)
	if err != nil {
		return a, err
	}
	a.State = store.State(state)
	a.StartedAt = a.StartedAt.UTC()
	if ended.Valid {
		t := ended.Time.UTC()
		a.EndedAt = &t
	}
	if exit.Valid {
		c := int(exit.Int64)
		a.ExitCode = &c
	}
	if resAs.Valid && resAs.String != "" {
		a.Resolution = &store.Resolution{As: store.State(resAs.String), By: resBy.String, At: resAt.Time.UTC(), Note: resNote.String}
	}
	return a, nil
}

// Abandon marks the running attempts of task with a lower token as unknown (store.Ledger).
func (s *Store) Abandon(ctx context.Context, task string, token int64) ([]store.Attempt, error) {
	var out []store.Attempt
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = nil
		if err := s.fence(ctx, tx, task, token); err != nil {
			return err
		}
		var err error
		out, err = s.AbandonTx(ctx, tx, task, token)
		return err
	})
	return out, err
}

// AbandonQuery reads, locked, a task's attempts running under a token older than ? and no live
// seat's (arguments: task, token, task): a search of the task's running attempts, which every start
// makes, so it costs the attempts running, not the task's history. On MySQL/MariaDB, which have no
// partial index, that is attempts_one_running past the task's NULLs (running_slot is the slot while
// the attempt runs); a filter on state there walked the whole table (1.0 s at 2 million attempts on
// MariaDB 10.11). The rows are locked in the order of that index, by slot (one running attempt a
// slot), never sorted. Exported for the backends' plan tests.
func (s *Store) AbandonQuery() string {
	if s.Flavor == MySQL {
		return s.Q(`SELECT ` + attemptCols + ` FROM {p}attempts FORCE INDEX (attempts_one_running)
		WHERE task = ? AND running_slot IS NOT NULL AND token < ? AND ` + notLiveSeat + ` ORDER BY running_slot FOR UPDATE`)
	}
	return s.Q(`SELECT ` + attemptCols + ` FROM {p}attempts
		WHERE task = ? AND state = 'running' AND token < ? AND ` + notLiveSeat + ` ORDER BY slot FOR UPDATE`)
}

// AbandonTx is Abandon inside tx, for a caller that holds the task's lease row locked with token
// as its latest (a backend's store.Starter, right after it took the lease in tx).
func (s *Store) AbandonTx(ctx context.Context, tx *sql.Tx, task string, token int64) ([]store.Attempt, error) {
	rows, err := tx.QueryContext(ctx, s.AbandonQuery(), task, token, task)
	if err != nil {
		return nil, err
	}
	var found []store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		found = append(found, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []store.Attempt
	for _, a := range found {
		if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}attempts SET state = 'unknown', ended_at = {now}
			WHERE task = ? AND slot = ? AND attempt = ? AND state = 'running'`), a.Task, a.Slot, a.Number); err != nil {
			return nil, err
		}
		if err := s.waitsSince(ctx, tx, a.Task, a.Slot, a.Number, false); err != nil {
			return nil, err
		}
		u, err := scanAttempt(tx.QueryRowContext(ctx, s.Q(`SELECT `+attemptCols+` FROM {p}attempts
			WHERE task = ? AND slot = ? AND attempt = ?`), a.Task, a.Slot, a.Number))
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// Resolve attaches a person's decision to the slot's last attempt (store.Ledger).
func (s *Store) Resolve(ctx context.Context, r store.ResolveRequest) (store.Attempt, error) {
	if r.As != store.Succeeded && r.As != store.Failed {
		return store.Attempt{}, fmt.Errorf("%w: resolve as %q: only succeeded or failed", store.ErrConflict, r.As)
	}
	if err := r.Check(); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		a, err := scanAttempt(tx.QueryRowContext(ctx, s.Q(`SELECT `+attemptCols+` FROM {p}attempts
			WHERE task = ? AND slot = ? ORDER BY attempt DESC LIMIT 1 FOR UPDATE`), r.Task, r.Slot))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: task %q slot %q has no attempt", store.ErrNotFound, r.Task, r.Slot)
		}
		if err != nil {
			return err
		}
		if (a.State != store.Unknown && a.State != store.Failed) || a.Resolution != nil {
			return fmt.Errorf("%w: task %q slot %q: attempt %d is %s%s; only an unresolved unknown or failed attempt can be resolved",
				store.ErrConflict, r.Task, r.Slot, a.Number, a.State, map[bool]string{true: " and resolved", false: ""}[a.Resolution != nil])
		}
		// Still the last? A Begin that locked it first (Begin) may have added one since this
		// statement began: PostgreSQL returns the row the statement waited for, not the newer one.
		// A new statement (a locking read, for MySQL's repeatable read) sees it.
		var newer int
		switch err := tx.QueryRowContext(ctx, s.Q(`SELECT attempt FROM {p}attempts WHERE task = ? AND slot = ? AND attempt > ?
			ORDER BY attempt LIMIT 1 FOR UPDATE`), r.Task, r.Slot, a.Number).Scan(&newer); {
		case err == nil:
			return fmt.Errorf("%w: task %q slot %q: attempt %d began after attempt %d was read; resolve again if it still needs a decision",
				store.ErrConflict, r.Task, r.Slot, newer, a.Number)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if _, err := tx.ExecContext(ctx, s.Q(`UPDATE {p}attempts SET res_as = ?, res_by = ?, res_at = {now}, res_note = ?
			WHERE task = ? AND slot = ? AND attempt = ?`), string(r.As), r.By, r.Note, r.Task, r.Slot, a.Number); err != nil {
			return err
		}
		if err := s.notWaiting(ctx, tx, r.Task, r.Slot); err != nil {
			return err
		}
		out, err = scanAttempt(tx.QueryRowContext(ctx, s.Q(`SELECT `+attemptCols+` FROM {p}attempts
			WHERE task = ? AND slot = ? AND attempt = ?`), r.Task, r.Slot, a.Number))
		return err
	})
	return out, err
}

// Record keeps an event (store.Ledger). Events are not fenced.
func (s *Store) Record(ctx context.Context, e store.Event) error {
	if err := store.CheckEvent(e); err != nil {
		return err
	}
	insert := s.Q(`INSERT INTO {p}events (task, slot, kind, run_id, holder, token, attempt, note, happened_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, {now})`)
	args := []any{e.Task, e.Slot, string(e.Kind), e.RunID, e.Holder, e.Token, e.Attempt, e.Note}
	if e.Kind == store.Review { // it may make the slot wait: one transaction with its waiting row
		return s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
				return err
			}
			return s.waitsSince(ctx, tx, e.Task, e.Slot, e.Attempt, true)
		})
	}
	return s.Do(ctx, func(ctx context.Context) error {
		_, err := s.DB.ExecContext(ctx, insert, args...)
		return err
	})
}

// Slot reads what the ledger knows about one slot (store.Ledger).
func (s *Store) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	var st store.SlotState
	err := s.Do(ctx, func(ctx context.Context) error {
		var err error
		st, err = s.slot(ctx, task, slot)
		return err
	})
	return st, err
}

func (s *Store) slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	return s.SlotTx(ctx, s.DB, task, slot)
}

// Querier is what SlotTx reads through: the pool, or a transaction.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SlotTx is Slot read through q (a backend's store.Starter reads it in its transaction).
func (s *Store) SlotTx(ctx context.Context, q Querier, task, slot string) (store.SlotState, error) {
	st := store.SlotState{Task: task, Slot: slot}
	var reviews int
	row := q.QueryRowContext(ctx, s.SlotQuery(), task, slot, task, slot, task, slot, task, slot)
	last, err := scanAttempt(extra{row, []any{&st.Failures, &st.Checkpoint, &reviews}})
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Last = &last
	st.Waiting = last.Resolution == nil && (last.State == store.Unknown || reviews > 0)
	return st, nil
}

// extra scans the columns after an attempt's into its pointers.
type extra struct {
	r    scanner
	dest []any
}

func (e extra) Scan(dest ...any) error { return e.r.Scan(append(dest, e.dest...)...) }

// CheckAcquire refuses an AcquireRequest no backend could honour (store.AcquireRequest.Check, a
// TTL below 1ms), before it reaches the database.
func CheckAcquire(req store.AcquireRequest) error {
	if err := req.Check(); err != nil {
		return err
	}
	switch {
	case req.TTL < time.Millisecond:
		return fmt.Errorf("store: acquire task %q: ttl %v is below 1ms", req.Task, req.TTL)
	}
	return nil
}
