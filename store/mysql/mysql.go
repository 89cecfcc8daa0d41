// Package mysql is the MySQL/MariaDB store (DSN scheme mysql://), on go-sql-driver/mysql. It targets
// MySQL 8 and MariaDB 10.11 semantics.
//
// A lease is one row per task in <prefix>leases. Acquire is one round trip, timed by the server's
// clock: a single batch (multi-statement query) that runs
//
//	START TRANSACTION;
//	INSERT INTO leases (…) VALUES (task, holder, run, 1, NOW(6), NOW(6) + INTERVAL ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE
//	  holder      = IF(expires_at <= NOW(6), VALUES(holder), holder),
//	  run_id      = IF(expires_at <= NOW(6), VALUES(run_id), run_id),
//	  token       = IF(expires_at <= NOW(6), token + 1, token),
//	  acquired_at = IF(expires_at <= NOW(6), VALUES(acquired_at), acquired_at),
//	  expires_at  = IF(expires_at <= NOW(6), VALUES(expires_at), expires_at);  -- last: see below
//	SELECT ROW_COUNT(), holder, run_id, token, acquired_at, expires_at, expires_at > NOW(6) FROM leases WHERE task = ?;
//	COMMIT
//
// MySQL evaluates ON DUPLICATE KEY UPDATE assignments left to right and later ones see the columns
// already assigned, so expires_at is assigned last: every IF before it tests the old expiry. The
// upsert takes the row's exclusive lock, so concurrent callers are serialised on it; ROW_COUNT() is 1
// (inserted) or 2 (updated) for the one that took the lease and 0 for everyone else, and the SELECT in
// the same transaction reads the row as this caller left it: the new grant, or the current holder for
// the busy answer. The row is never deleted, so the token only grows. See docs/stores/mysql.md.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations are read on first use: parsing them at init cost every once run, on any store.
var migrations = sync.OnceValue(func() []sqlstore.Migration {
	m, err := sqlstore.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		panic("mysql: " + err.Error())
	}
	return m
})

func init() {
	store.Register("mysql", func(ctx context.Context, dsn string) (store.Store, error) { return Open(ctx, dsn) }, store.TakesPassword)
}

// Store is a MySQL/MariaDB store. It is safe for concurrent use.
type Store struct {
	*sqlstore.Store
	d *dialect

	retMu    sync.Mutex
	ret      bool // the server has INSERT … RETURNING (returning), once retKnown
	retKnown bool
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Clock = (*Store)(nil)
)

// Open connects, creates or upgrades the schema (under GET_LOCK, so many processes may open an empty
// database at once) and returns the store. Connection, authentication and permission trouble is an
// error wrapping store.ErrUnavailable that names host and database.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	conn, err := gomysql.NewConnector(cfg.Driver)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", store.ErrBadDSN, store.Redact(dsn), err)
	}
	d := &dialect{where: cfg.Where}
	db := sql.OpenDB(readCommitted{conn})
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(sqlstore.ConnMaxIdle)
	s := &Store{Store: &sqlstore.Store{DB: db, Dialect: d, Prefix: cfg.Prefix, Flavor: sqlstore.MySQL, Retries: 3, Backoff: 50 * time.Millisecond, SessionReadCommitted: true, CallTimeout: cfg.Call}, d: d}
	if err := s.Reach(ctx, cfg.Connect, "mysql "+cfg.Where); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.migrate(ctx, cfg.Driver.DBName); err != nil {
		db.Close()
		return nil, err
	}
	s.Schema = int64(migrations()[len(migrations())-1].Version) // CheckSchema's
	s.Returning = s.returning
	return s, nil
}

// returning reports whether the server has INSERT … RETURNING (MariaDB), asked on the first claim
// rather than at Open: a once run that claims no keys pays no round trip for it. An error keeps
// MySQL 8's read-back path (exact on both) and asks again next time.
func (s *Store) returning(ctx context.Context, tx *sql.Tx) bool {
	s.retMu.Lock()
	defer s.retMu.Unlock()
	if s.retKnown {
		return s.ret
	}
	var version string
	if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return false
	}
	s.ret, s.retKnown = !noReturning.Load() && strings.Contains(strings.ToLower(version), "mariadb"), true
	return s.ret
}

// noReturning, set by tests, keeps INSERT … RETURNING off on MariaDB (sqlstore.Store.Returning), so
// that MySQL 8's claim path runs on the MariaDB test server too.
var noReturning atomic.Bool

func (s *Store) migrate(ctx context.Context, dbName string) error {
	latest := migrations()[len(migrations())-1].Version
	var have int
	err := s.DB.QueryRowContext(ctx, s.Q("SELECT COALESCE(MAX(version), 0) FROM {p}schema_version")).Scan(&have)
	var myErr *gomysql.MySQLError
	switch {
	case err == nil && have == latest:
		return nil // the common case: one round trip, no lock
	case err == nil && have > latest:
		return fmt.Errorf("%w: mysql %s: schema version %d (prefix %q) is newer than this once knows (%d); upgrade once",
			store.ErrUnavailable, s.d.where, have, strings.TrimSuffix(s.Prefix, "_"), latest)
	case err != nil && !(errors.As(err, &myErr) && (myErr.Number == 1146 || myErr.Number == 1109)): // no such table yet
		if !s.d.Retryable(err) {
			return s.d.MapError(err)
		}
	}
	// GET_LOCK is server-wide and names are at most 64 characters: hash database and prefix.
	sum := sha256.Sum256([]byte(dbName + "/" + s.Prefix))
	lockName := "once-migrate-" + hex.EncodeToString(sum[:])[:40]
	return s.Do(ctx, func(ctx context.Context) error {
		conn, err := s.DB.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", lockName).Scan(&got); err != nil {
			return err
		}
		if !got.Valid || got.Int64 != 1 {
			return fmt.Errorf("%w: mysql %s: timed out after 60s waiting for the schema migration lock %s", store.ErrUnavailable, s.d.where, lockName)
		}
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lockName) }()
		// DDL commits implicitly in MySQL, so every statement is idempotent (IF NOT EXISTS) and the
		// version is recorded after its migration; the lock keeps concurrent migrators out.
		if _, err := conn.ExecContext(ctx, s.Q(`CREATE TABLE IF NOT EXISTS {p}schema_version (
			version INT NOT NULL PRIMARY KEY, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`)); err != nil {
			return err
		}
		if err := conn.QueryRowContext(ctx, s.Q("SELECT COALESCE(MAX(version), 0) FROM {p}schema_version")).Scan(&have); err != nil {
			return err
		}
		for _, m := range migrations() {
			if m.Version <= have {
				continue
			}
			for _, stmt := range m.Statements {
				if _, err := conn.ExecContext(ctx, strings.ReplaceAll(stmt, "{p}", s.Prefix)); err != nil {
					// 1061, 1060: an index or a column a migration cut short already added (MySQL
					// has no ADD KEY IF NOT EXISTS nor ADD COLUMN IF NOT EXISTS, MariaDB's; each
					// ALTER TABLE is all or nothing).
					if errors.As(err, &myErr) && (myErr.Number == 1061 || myErr.Number == 1060) {
						continue
					}
					return fmt.Errorf("migration %s: %w", m.Name, err)
				}
			}
			if _, err := conn.ExecContext(ctx, s.Q("INSERT INTO {p}schema_version (version, applied_at) VALUES (?, NOW(6))"), m.Version); err != nil {
				return err
			}
		}
		return nil
	})
}

const acquireSQL = "START TRANSACTION;\n" + acquireBody + ";\nCOMMIT"

// acquireBody takes the lease when it is free or expired and reads the row back, with the schema
// version (arguments: task, holder, run id, TTL in µs, task): Acquire runs it as a transaction of
// its own, Start inside one that goes on (and rolls back when the version is newer than it opened).
const acquireBody = `INSERT INTO {p}leases (task, holder, run_id, token, acquired_at, expires_at)
	VALUES (?, ?, ?, 1, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)
	ON DUPLICATE KEY UPDATE
	holder = IF(expires_at <= NOW(6), VALUES(holder), holder),
	run_id = IF(expires_at <= NOW(6), VALUES(run_id), run_id),
	token = IF(expires_at <= NOW(6), token + 1, token),
	acquired_at = IF(expires_at <= NOW(6), VALUES(acquired_at), acquired_at),
	expires_at = IF(expires_at <= NOW(6), VALUES(expires_at), expires_at);
SELECT ROW_COUNT(), holder, run_id, token, acquired_at, expires_at, expires_at > NOW(6), ` + sqlstore.SchemaVersion + `
	FROM {p}leases WHERE task = ?`

// row is what the lease batches read back.
type row struct {
	changed int64
	lease   store.Lease
	live    bool
	schema  int64 // the schema version, read by acquireBody only
}

// batch runs a multi-statement query on one connection and scans the single row of its one result
// set with columns into a row. On error the connection is rolled back or, failing that, discarded,
// so no half-done transaction goes back to the pool.
func (s *Store) batch(ctx context.Context, query string, args ...any) (row, bool, error) {
	var r row
	found := false
	err := s.Do(ctx, func(ctx context.Context) error {
		conn, err := s.DB.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		err = func() error {
			rows, err := conn.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			r, found, err = scanRow(rows)
			return err
		}()
		if err != nil {
			if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		return err
	})
	r.lease.Acquired, r.lease.Expires = r.lease.Acquired.UTC(), r.lease.Expires.UTC()
	return r, found, err
}

// scanRow reads the single row of the one result set with columns of a lease batch (changed, holder,
// run id, token, acquired, expires, live, and the schema version when there are eight), and closes
// rows.
func scanRow(rows *sql.Rows) (r row, found bool, err error) {
	defer rows.Close()
	for {
		if cols, _ := rows.Columns(); len(cols) > 0 {
			for rows.Next() {
				dest := []any{&r.changed, &r.lease.Holder, &r.lease.RunID, &r.lease.Token, &r.lease.Acquired, &r.lease.Expires, &r.live}
				if len(cols) > len(dest) {
					dest = append(dest, &r.schema)
				}
				if err := rows.Scan(dest...); err != nil {
					return r, found, err
				}
				found = true
			}
		}
		if !rows.NextResultSet() {
			break
		}
	}
	return r, found, rows.Err()
}

// acquire is Acquire without Replace.
func (s *Store) acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if err := sqlstore.CheckAcquire(req); err != nil {
		return store.Lease{}, err
	}
	q := s.Q(acquireSQL)
	for try := 0; ; try++ {
		r, found, err := s.batch(ctx, q, req.Task, req.Holder, req.RunID, req.TTL.Microseconds(), req.Task)
		if err != nil {
			return store.Lease{}, err
		}
		if !found {
			return store.Lease{}, fmt.Errorf("%w: mysql %s: lease row for task %q vanished", store.ErrUnavailable, s.d.where, req.Task)
		}
		r.lease.Task = req.Task
		if r.changed > 0 {
			return r.lease, s.Refuse(ctx, r.lease, r.schema, releaseSQL)
		}
		if (r.live && r.lease.Holder != "") || try >= 2 {
			return store.Lease{}, &store.BusyError{Lease: r.lease}
		}
		// It expired between the two statements: try again.
	}
}

// Renew extends the current, unexpired grant l by ttl from now by the server's clock (store.Leaser).
// One round trip: the conditional UPDATE and a read-back of the row.
func (s *Store) Renew(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.Limit >= 2 && ttl >= time.Millisecond {
		return s.RenewSeat(ctx, l, ttl, replaceUntil)
	}
	if ttl < time.Millisecond {
		return store.Lease{}, fmt.Errorf("mysql: renew task %q: ttl %v is below 1ms", l.Task, ttl)
	}
	r, found, err := s.batch(ctx, s.Q(`UPDATE {p}leases SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
		WHERE task = ? AND holder = ? AND token = ? AND holder <> '' AND expires_at > NOW(6);
		SELECT ROW_COUNT(), holder, run_id, token, acquired_at, expires_at, expires_at > NOW(6), `+sqlstore.SchemaVersion+`
	FROM {p}leases WHERE task = ?`),
		ttl.Microseconds(), l.Task, l.Holder, l.Token, l.Task)
	if err != nil {
		return store.Lease{}, err
	}
	// Success is read from the row, not from ROW_COUNT(): an UPDATE that happens to write the same
	// expiry changes no row. Only this grant's renewals move its expiry, so a live row with our
	// holder and token means the UPDATE matched.
	if !found || !r.live || r.lease.Holder != l.Holder || r.lease.Token != l.Token {
		return store.Lease{}, fmt.Errorf("%w: task %q: token %d of %s has expired or was replaced", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	r.lease.Task = l.Task
	return r.lease, nil
}

// Release frees the grant l if it is still the task's latest (store.Leaser). The row and its token stay.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	return s.ReleaseLease(ctx, l, releaseSQL)
}

// releaseSQL gives a grant up (arguments: task, holder, token); it changes one row when the grant
// is still the current one.
const releaseSQL = `UPDATE {p}leases SET holder = '', run_id = '', expires_at = '1970-01-01 00:00:00'
	WHERE task = ? AND holder = ? AND token = ? AND holder <> ''`

// dialect is MySQL's half of sqlstore.
type dialect struct {
	where string // host:port/database
}

func (d *dialect) Now() string            { return "NOW(6)" }
func (d *dialect) Rebind(q string) string { return q }

// Server error numbers after which trying again may succeed.
var retryableNumbers = map[uint16]bool{
	1040: true, // too many connections
	1053: true, // server shutdown in progress
	1205: true, // lock wait timeout
	1213: true, // deadlock: the transaction was rolled back
	1927: true, // MariaDB: connection was killed
	3024: true, // query execution was interrupted (max_execution_time)
}

// Server error numbers that mean the store cannot be used as configured.
var unavailableNumbers = map[uint16]string{
	1040: "",
	1044: "check the database name and the user's grants (docs/stores/mysql.md)",
	1045: "check the user and password in the DSN",
	1698: "check the user and password in the DSN (the account may authenticate by unix socket only)",
	1049: "check the database name in the DSN",
	1053: "",
	1142: "grant the privileges in docs/stores/mysql.md",
	1143: "grant the privileges in docs/stores/mysql.md",
	1227: "grant the privileges in docs/stores/mysql.md",
	1290: "the server is read-only",
	1836: "the server is read-only",
	1927: "",
	1130: "the server does not accept this user from this host",
	1129: "the host is blocked; FLUSH HOSTS on the server",
	1226: "the user exceeded a resource limit",
}

// Full reports "too many connections" (1040): the server has no slot left, for now.
func (d *dialect) Full(err error) bool {
	var myErr *gomysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == 1040
}

func (d *dialect) Retryable(err error) bool {
	var myErr *gomysql.MySQLError
	if errors.As(err, &myErr) {
		return retryableNumbers[myErr.Number]
	}
	return isConnErr(err)
}

func isConnErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, gomysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, gomysql.ErrMalformPkt) ||
		errors.Is(err, gomysql.ErrPktSync) || errors.Is(err, gomysql.ErrPktSyncMul) || errors.Is(err, sql.ErrConnDone) ||
		strings.HasSuffix(err.Error(), "bad connection") // the driver's unexported errBadConnNoWrite: a write timed out
}

// MapError maps go-sql-driver/mysql errors to the store's sentinels, in one place.
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
			return fmt.Errorf("%w: mysql %s: %w", store.ErrUnavailable, d.where, c)
		}
	}
	if sqlstore.Closed(err) {
		return fmt.Errorf("%w: mysql %s: the store was closed (Close); open it again", store.ErrUnavailable, d.where)
	}
	var myErr *gomysql.MySQLError
	if errors.As(err, &myErr) {
		msg := fmt.Sprintf("%s (error %d)", oneLine(myErr.Message), myErr.Number)
		switch n := myErr.Number; {
		case n == 1062, n == 3819, n == 4025: // duplicate key; check constraint (MySQL, MariaDB)
			return fmt.Errorf("%w: mysql %s: %s", store.ErrConflict, d.where, msg)
		case n == 1193, n == 1231, n == 1232: // unknown variable, bad value: the driver sends unknown DSN parameters as settings
			return fmt.Errorf("%w: mysql %s: %s; fix or remove the parameter in the DSN", store.ErrBadDSN, d.where, msg)
		default:
			if hint, ok := unavailableNumbers[n]; ok {
				if hint != "" {
					msg += "; " + hint
				}
				return fmt.Errorf("%w: mysql %s: %s", store.ErrUnavailable, d.where, msg)
			}
		}
		return fmt.Errorf("mysql %s: %s", d.where, msg)
	}
	for _, authErr := range []error{gomysql.ErrNoTLS, gomysql.ErrCleartextPassword, gomysql.ErrNativePassword,
		gomysql.ErrOldPassword, gomysql.ErrUnknownPlugin, gomysql.ErrOldProtocol} {
		if errors.Is(err, authErr) {
			return fmt.Errorf("%w: mysql %s: %s", store.ErrUnavailable, d.where, oneLine(err.Error()))
		}
	}
	if isConnErr(err) {
		return fmt.Errorf("%w: mysql %s: %s; is the server up and the host and port right?", store.ErrUnavailable, d.where, oneLine(err.Error()))
	}
	return fmt.Errorf("mysql %s: %s", d.where, oneLine(err.Error()))
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}
