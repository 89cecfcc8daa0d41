// Package postgres is the PostgreSQL store (DSN schemes postgres:// and postgresql://), on pgx v5.
//
// A lease is one row per task in <prefix>leases. Acquire is one statement, one round trip, timed by the
// server's clock:
//
//	INSERT INTO leases AS l (task, holder, run_id, token, acquired_at, expires_at)
//	VALUES ($1, $2, $3, 1, now(), now() + ttl)
//	ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, …, token = l.token + 1, …
//	WHERE l.expires_at <= now()
//	RETURNING token, acquired_at, expires_at
//
// ON CONFLICT DO UPDATE locks the conflicting row and evaluates its WHERE against the latest committed
// version, so of many concurrent callers exactly one takes a free or expired row and every other gets
// no row back (busy). The row is never deleted, so the token only grows. The ledger (attempts, events)
// is internal/sqlstore's; see docs/stores/postgres.md.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations are read on first use: parsing them at init cost every once run, on any store.
var migrations = sync.OnceValue(func() []sqlstore.Migration {
	m, err := sqlstore.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		panic("postgres: " + err.Error())
	}
	return m
})

func init() {
	open := func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }
	store.Register("postgres", open, store.TakesPassword)
	store.Register("postgresql", open, store.TakesPassword)
}

// Store is a PostgreSQL store. It is safe for concurrent use.
type Store struct {
	*sqlstore.Store
	d *dialect
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

// Config is what a DSN says, once parsed.
type Config struct {
	Conn   *pgx.ConnConfig
	Prefix string // table prefix, e.g. "once_"
	Where  string // "host:port/database", for messages
	// Connect is the DSN's connect_timeout, 0 when it gives none: it bounds Open's first contact
	// instead of store.ConnectTimeout (and each later connection attempt, 5s when not given).
	Connect time.Duration
	// Call is the DSN's call_timeout (sqlstore.DefaultCallTimeout when it gives none; 0: none).
	Call time.Duration
}

// Params are the query parameters a postgres:// DSN accepts (docs/stores/postgres.md): prefix; the
// libpq connection parameters pgx implements; and the server settings once lets through to the
// session (any other setting can go in options=-c NAME=VALUE, which the server checks). Anything else
// is refused before connecting, so a typo is never silently sent to the server as a setting.
var Params = []string{
	"prefix",
	"host", "port", "dbname", "user", "password", "passfile", "connect_timeout",
	"sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation", "sslpassword", "sslsni",
	"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
	"application_name", "options", "search_path", "statement_timeout", "lock_timeout",
	"idle_in_transaction_session_timeout", "call_timeout",
}

var spec = store.QuerySpec{Store: "postgres", Doc: "docs/stores/postgres.md", Known: Params}

// ParseDSN parses a postgres:// or postgresql:// DSN strictly (store.ParseURL, Params). Errors wrap
// store.ErrBadDSN, name what is wrong and never contain the password.
func ParseDSN(dsn string) (*Config, error) {
	u, q, err := store.ParseURL(spec, dsn, "postgres", "postgresql")
	if err != nil {
		return nil, err
	}
	_, hasPW := u.User.Password()
	for _, c := range []struct {
		key, where string
		set        bool
	}{
		{"user", "user info", u.User.Username() != ""},
		{"password", "user info", hasPW},
		{"host", "host", u.Hostname() != ""},
		{"port", "host", u.Port() != ""},
		{"dbname", "path", strings.Trim(u.Path, "/") != ""},
	} {
		if _, dup := q[c.key]; dup && c.set {
			return nil, fmt.Errorf("%w: postgres parameter %q: also given in the URL's %s; keep one", store.ErrBadDSN, c.key, c.where)
		}
	}
	prefixVal, _ := q.Take("prefix")
	prefix, err := sqlstore.TablePrefix(prefixVal)
	if err != nil {
		return nil, err
	}
	call, err := sqlstore.ParseCallTimeout("postgres", q)
	if err != nil {
		return nil, err
	}
	_, connectSet := q["connect_timeout"]
	if !connectSet {
		q["connect_timeout"] = "5"
	}
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		// pgx quotes the connection string (best-effort redacted): drop it, keep what is wrong.
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) {
			pe.ConnString = ""
		}
		return nil, fmt.Errorf("%w: %s: %s", store.ErrBadDSN, store.Redact(dsn), strings.TrimPrefix(oneLine(err.Error()), "cannot parse ``: "))
	}
	if cfg.Database == "" {
		return nil, fmt.Errorf("%w: %s names no database: add /DBNAME to the URL", store.ErrBadDSN, store.Redact(dsn))
	}
	session(cfg)
	// A once run opens a connection of its own and uses each statement about once on it: pgx's
	// default (prepare each statement on the connection, then execute it) costs two round trips a
	// statement; the extended protocol without preparing costs one (a run: 32 → 20 round trips,
	// internal/costs).
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	c := &Config{Conn: cfg, Prefix: prefix, Where: fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database), Call: call}
	if connectSet {
		d := cfg.ConnectTimeout // checked as written too: pgx multiplies by time.Second, and a huge number wraps around
		if n, err := strconv.Atoi(q["connect_timeout"]); err != nil || n < 1 || n > 3600 {
			d = 0
		}
		if err := store.CheckConnectTimeout("postgres", "connect_timeout", q["connect_timeout"], d, "whole seconds from 1 to 3600, e.g. 5"); err != nil {
			return nil, err
		}
		c.Connect = cfg.ConnectTimeout
	}
	if err := checkSessionTimeouts(q); err != nil {
		return nil, err
	}
	return c, nil
}

// session sets what every session of the store needs, whatever the DSN's options=-c … say: the
// startup packet's parameters are applied after the options' -c settings, so these win.
func session(cfg *pgx.ConnConfig) {
	// A client_encoding other than UTF8 would store a slot or holder as other bytes (a second row
	// for the slot "café", run again); a DateStyle other than ISO makes pgx unable to read a timestamp (every run exits 70).
	cfg.RuntimeParams["client_encoding"] = "UTF8"
	cfg.RuntimeParams["datestyle"] = "ISO, MDY"
	// once's statements each touch a few rows by an index; the planner's cost of one with hashed
	// subplans (Forget's test of a gone claimant) passed jit_above_cost, and compiling it took
	// 29 ms for a 3 ms batch of 5,000 keys (forgetting 500,000 keys: 1.1 s in one statement, 8.0 s
	// in batches with JIT, 0.96 s without).
	cfg.RuntimeParams["jit"] = "off"
	// A holder that vanishes inside a ledger transaction without its FIN reaching the server (a
	// partition, a frozen VM) would keep the task's lease row locked until TCP keepalive gives up
	// (two hours by default), and every next holder would wait on it. once's transactions take
	// milliseconds, so the server ends a session idle in a transaction for IdleTxTimeout.
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.Itoa(int(sqlstore.IdleTxTimeout/time.Millisecond)) + "ms"
	}
}

// pgMillis reads a setting's duration as the server does: a number, in milliseconds unless a unit
// follows (us, ms, s, min, h, d). ok is false for what it does not read so (the server decides).
func pgMillis(v string) (ms float64, ok bool) {
	v = strings.TrimSpace(v)
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit, ok := map[string]float64{"": 1, "us": 0.001, "ms": 1, "s": 1e3, "min": 6e4, "h": 3.6e6, "d": 8.64e7}[strings.TrimSpace(v[i:])]
	return n * unit, ok
}

// checkSessionTimeouts refuses a statement_timeout or idle_in_transaction_session_timeout under
// 1s (0 is none): with idle_in_transaction_session_timeout=1 the server ended the session inside
// the run's transaction (70), with statement_timeout=1 every statement (69). What the server would
// not read as a duration it refuses itself (64).
func checkSessionTimeouts(q store.Params) error {
	for _, k := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
		if d, ok := pgMillis(q[k]); ok && d != 0 && d < 1000 {
			return fmt.Errorf("%w: postgres parameter %q is %q: give 0 (none) or at least 1s, e.g. 30s", store.ErrBadDSN, k, q[k])
		}
	}
	return nil
}

// Open connects, creates or upgrades the schema (under a transaction-scoped advisory lock, so many
// processes may open an empty database at once) and returns the store. Connection, authentication and
// permission trouble is an error wrapping store.ErrUnavailable that names host and database.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	d := &dialect{where: cfg.Where}
	db := stdlib.OpenDB(*cfg.Conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(sqlstore.ConnMaxIdle)
	s := &Store{Store: &sqlstore.Store{DB: db, Dialect: d, Prefix: cfg.Prefix, Flavor: sqlstore.Postgres, Retries: 3, Backoff: 50 * time.Millisecond, CallTimeout: cfg.Call}, d: d}
	if err := s.Reach(ctx, cfg.Connect, "postgres "+cfg.Where); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	s.Schema = int64(migrations()[len(migrations())-1].Version) // CheckSchema's
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	latest := migrations()[len(migrations())-1].Version
	var have int
	err := s.DB.QueryRowContext(ctx, s.Q("SELECT COALESCE(MAX(version), 0) FROM {p}schema_version")).Scan(&have)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && have == latest:
		return nil // the common case: one round trip, no lock
	case err == nil && have > latest:
		return fmt.Errorf("%w: postgres %s: schema version %d (prefix %q) is newer than this once knows (%d); upgrade once",
			store.ErrUnavailable, s.d.where, have, strings.TrimSuffix(s.Prefix, "_"), latest)
	case err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P01"): // 42P01: no such table yet
		if s.d.Retryable(err) {
			// Let Do retry the whole migration below.
			break
		}
		return s.d.MapError(err)
	}
	return s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Serialise concurrent migrators of this prefix; released at commit.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(1869504357, hashtext($1))", "once-migrate:"+s.Prefix); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.Q(`CREATE TABLE IF NOT EXISTS {p}schema_version (
			version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, s.Q("SELECT COALESCE(MAX(version), 0) FROM {p}schema_version")).Scan(&have); err != nil {
			return err
		}
		for _, m := range migrations() {
			if m.Version <= have {
				continue
			}
			for _, stmt := range m.Statements {
				if _, err := tx.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", s.Prefix)); err != nil {
					return fmt.Errorf("migration %s: %w", m.Name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, s.Q("INSERT INTO {p}schema_version (version) VALUES (?)"), m.Version); err != nil {
				return err
			}
		}
		return nil
	})
}

const acquireSQL = acquireSQLHead + "now()" + acquireSQLTail

// acquireLazySQL is acquireSQL committing with synchronous_commit off (StartLazy): its grant's time
// is lazyNow.
const acquireLazySQL = acquireSQLHead + lazyNow + acquireSQLTail

const (
	acquireSQLHead = `INSERT INTO {p}leases AS l (task, holder, run_id, token, acquired_at, expires_at)
	VALUES (?, ?, ?, 1, `
	acquireSQLTail = `, now() + ?::bigint * interval '1 microsecond')
	ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, run_id = excluded.run_id, token = l.token + 1,
		acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
	WHERE l.expires_at <= now()
	RETURNING token, acquired_at, expires_at, ` + sqlstore.SchemaVersion
)

// acquire is Acquire without Replace.
func (s *Store) acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if err := sqlstore.CheckAcquire(req); err != nil {
		return store.Lease{}, err
	}
	l := store.Lease{Task: req.Task, Holder: req.Holder, RunID: req.RunID}
	q := s.Q(acquireSQL)
	for try := 0; ; try++ {
		got := false
		var v int64
		err := s.Do(ctx, func(ctx context.Context) error {
			err := s.DB.QueryRowContext(ctx, q, req.Task, req.Holder, req.RunID, req.TTL.Microseconds()).
				Scan(&l.Token, &l.Acquired, &l.Expires, &v)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			got = err == nil
			return err
		})
		if err != nil {
			return store.Lease{}, err
		}
		if got {
			l.Acquired, l.Expires = l.Acquired.UTC(), l.Expires.UTC()
			return l, s.Refuse(ctx, l, v, releaseSQL)
		}
		cur, live, err := s.current(ctx, req.Task)
		if err != nil {
			return store.Lease{}, err
		}
		if live || try >= 2 {
			return store.Lease{}, &store.BusyError{Lease: cur}
		}
		// It expired or was released between the two statements: try again.
	}
}

// current reads the task's lease row and whether it is live by the server's clock.
func (s *Store) current(ctx context.Context, task string) (store.Lease, bool, error) {
	cur := store.Lease{Task: task}
	var live bool
	err := s.Do(ctx, func(ctx context.Context) error {
		err := s.DB.QueryRowContext(ctx, s.Q(`SELECT holder, run_id, token, acquired_at, expires_at, expires_at > now()
			FROM {p}leases WHERE task = ?`), task).Scan(&cur.Holder, &cur.RunID, &cur.Token, &cur.Acquired, &cur.Expires, &live)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	cur.Acquired, cur.Expires = cur.Acquired.UTC(), cur.Expires.UTC()
	return cur, live && cur.Holder != "", err
}

// Renew extends the current, unexpired grant l by ttl from now by the server's clock (store.Leaser).
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Limit >= 2 && ttl >= time.Millisecond {
		return s.RenewSeat(ctx, l, ttl, replaceUntil)
	}
	if ttl < time.Millisecond {
		return store.Lease{}, fmt.Errorf("postgres: renew task %q: ttl %v is below 1ms", l.Task, ttl)
	}
	out := l
	got := false
	err := s.Do(ctx, func(ctx context.Context) error {
		err := s.DB.QueryRowContext(ctx, s.Q(`UPDATE {p}leases SET expires_at = now() + ?::bigint * interval '1 microsecond'
			WHERE task = ? AND holder = ? AND token = ? AND holder <> '' AND expires_at > now()
			RETURNING run_id, acquired_at, expires_at`), ttl.Microseconds(), l.Task, l.Holder, l.Token).
			Scan(&out.RunID, &out.Acquired, &out.Expires)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		got = err == nil
		return err
	})
	if err != nil {
		return store.Lease{}, err
	}
	if !got {
		return store.Lease{}, fmt.Errorf("%w: task %q: token %d of %s has expired or was replaced", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	out.Acquired, out.Expires = out.Acquired.UTC(), out.Expires.UTC()
	return out, nil
}

const releaseSQL = sqlstore.ReleasePostgres

// Release frees the grant l if it is still the task's latest (store.Leaser). The row and its token stay.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	return s.ReleaseLease(ctx, l, releaseSQL)
}

// dialect is PostgreSQL's half of sqlstore.
type dialect struct {
	where string // host:port/database
}

func (d *dialect) Now() string { return "now()" }

func (d *dialect) Rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// SQLSTATE classes and codes this store treats as connection trouble.
func unavailableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "28"), // invalid authorization
		strings.HasPrefix(code, "53"), // insufficient resources (too many connections, disk full)
		strings.HasPrefix(code, "57"), // operator intervention (shutdown, cannot connect now)
		strings.HasPrefix(code, "58"), // system error
		code == "3D000",               // database does not exist
		code == "42501",               // insufficient privilege
		code == "25006",               // read-only transaction (a standby)
		code == "25P03":               // idle-in-transaction timeout: the server ended the session
		return true
	}
	return false
}

// Full reports "too many connections" (53300): the server has no slot left, for now.
func (d *dialect) Full(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

func (d *dialect) Retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03", "53300", "08000", "08003", "08006":
			return true
		}
		return false
	}
	return isConnErr(err)
}

// isConnErr reports network-level failures (no SQLSTATE): refused, reset, EOF, timeouts.
func isConnErr(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, driver.ErrBadConn)
}

// MapError maps pgx errors to the store's sentinels, in one place.
func (d *dialect) MapError(err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{store.ErrBusy, store.ErrNotHeld, store.ErrConflict, store.ErrNotFound, store.ErrUnavailable, store.ErrBadDSN} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			return fmt.Errorf("%w: postgres %s: %w", store.ErrUnavailable, d.where, c)
		}
	}
	if sqlstore.Closed(err) {
		return fmt.Errorf("%w: postgres %s: the store was closed (Close); open it again", store.ErrUnavailable, d.where)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
		switch {
		case pgErr.Code == "23505", pgErr.Code == "23514":
			return fmt.Errorf("%w: postgres %s: %s", store.ErrConflict, d.where, msg)
		case strings.HasPrefix(pgErr.Code, "28"):
			return fmt.Errorf("%w: postgres %s: %s; check the user and password in the DSN", store.ErrUnavailable, d.where, msg)
		case pgErr.Code == "3D000":
			return fmt.Errorf("%w: postgres %s: %s; check the database name in the DSN", store.ErrUnavailable, d.where, msg)
		case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "configuration parameter"):
			// pgx sends unknown DSN parameters to the server as settings.
			return fmt.Errorf("%w: postgres %s: %s; remove the parameter from the DSN", store.ErrBadDSN, d.where, msg)
		case (pgErr.Code == "22023" || pgErr.Code == "22P02") && strings.Contains(pgErr.Message, "parameter"):
			// A setting given in the DSN with a value the server refuses (lock_timeout=-5).
			return fmt.Errorf("%w: postgres %s: %s; fix the parameter's value in the DSN", store.ErrBadDSN, d.where, msg)
		case pgErr.Code == "3F000":
			return fmt.Errorf("%w: postgres %s: %s; create the schema, or fix search_path (in the DSN or the role's settings)", store.ErrUnavailable, d.where, msg)
		case pgErr.Code == "42501":
			return fmt.Errorf("%w: postgres %s: %s; grant the privileges in docs/stores/postgres.md", store.ErrUnavailable, d.where, msg)
		case unavailableCode(pgErr.Code):
			return fmt.Errorf("%w: postgres %s: %s", store.ErrUnavailable, d.where, msg)
		}
		return fmt.Errorf("postgres %s: %s", d.where, msg)
	}
	if isConnErr(err) {
		return fmt.Errorf("%w: postgres %s: %s; is the server up and the host and port right?", store.ErrUnavailable, d.where, rootCause(err))
	}
	return fmt.Errorf("postgres %s: %s", d.where, oneLine(err.Error()))
}

// rootCause is the innermost useful message of a connection error, on one line. pgx words an
// answer that is not PostgreSQL's protocol (another server at the port: MySQL's 3306) as
// "received unexpected message: %!w(<nil>)"; that part is said plainly.
func rootCause(err error) string {
	msg := err.Error()
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if u := errors.Unwrap(ce); u != nil {
			msg = u.Error()
		}
	}
	msg = strings.ReplaceAll(msg, "received unexpected message: %!w(<nil>)", notPostgres)
	return oneLine(msg)
}

const notPostgres = "the server's answer is not PostgreSQL's protocol (another server at this port?)"

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n\t", "; ")
	return strings.ReplaceAll(s, "\n", "; ")
}
