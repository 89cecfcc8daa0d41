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
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
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

// Config is what a DSN says, once parsed.
type Config struct {
	Driver *gomysql.Config
	Prefix string // table prefix, e.g. "once_"
	Where  string // "host:port/database", for messages
	// Connect is the DSN's timeout=, 0 when it gives none: it bounds Open's first contact instead
	// of store.ConnectTimeout (and each later dial, 5s when not given).
	Connect time.Duration
}

// Params are the query parameters a mysql:// DSN accepts (docs/stores/mysql.md): prefix, MariaDB's
// idle_transaction_timeout, and go-sql-driver/mysql's connection parameters that leave once's
// session as once needs it. Anything else is refused before connecting: the driver would send an
// unknown name to the server as a session variable, so a typo that happens to name one would be
// applied without a word.
var Params = []string{
	"prefix", "idle_transaction_timeout",
	"tls", "timeout", "readTimeout", "writeTimeout", "charset", "collation", "compress",
	"allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords", "allowOldPasswords",
	"checkConnLiveness", "maxAllowedPacket", "rejectReadOnly", "serverPubKey", "connectionAttributes",
}

var spec = store.QuerySpec{Store: "mysql", Doc: "docs/stores/mysql.md", Known: Params, Refused: map[string]string{
	"parseTime": "once sets it itself", "loc": "once sets it itself (UTC)", "time_zone": "once sets it itself ('+00:00')",
	"sql_mode": "once sets it itself (strict)", "multiStatements": "once sets it itself", "interpolateParams": "once sets it itself",
	"clientFoundRows": "once sets it itself (false)",
}}

// unescaped are the parameters go-sql-driver/mysql percent-decodes itself; it takes the others as written.
var unescaped = map[string]bool{"tls": true, "serverPubKey": true, "connectionAttributes": true, "idle_transaction_timeout": true}

// ParseDSN parses mysql://user:password@host[:port]/database[?params] strictly (store.ParseURL,
// Params). The store always sets parseTime, UTC, time_zone '+00:00', a strict sql_mode,
// multiStatements and interpolateParams (the lease batch needs the last two). Errors wrap
// store.ErrBadDSN, name what is wrong and never contain the password.
func ParseDSN(dsn string) (*Config, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s: %s", store.ErrBadDSN, store.Redact(dsn), why)
	}
	u, q, err := store.ParseURL(spec, dsn, "mysql")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, bad("no host; use mysql://user:password@host:port/database")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, bad("name one database: mysql://user:password@host:port/database")
	}
	prefixVal, _ := q.Take("prefix")
	prefix, err := sqlstore.TablePrefix(prefixVal)
	if err != nil {
		return nil, err
	}
	if v, ok := q["idle_transaction_timeout"]; ok && strings.Trim(v, "0123456789") != "" {
		return nil, fmt.Errorf("%w: mysql parameter \"idle_transaction_timeout\" is %q: give whole seconds, e.g. 10", store.ErrBadDSN, v)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "3306"
	}
	addr := net.JoinHostPort(host, port)
	base := "tcp(" + addr + ")/" + url.PathEscape(db)
	query, err := driverQuery(base, q)
	if err != nil {
		return nil, err
	}
	cfg, err := gomysql.ParseDSN(base + query)
	if err != nil {
		return nil, bad(oneLine(err.Error()))
	}
	cfg.DBName = db
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	connect := cfg.Timeout // the DSN's timeout=, 0 when not given
	if v, ok := q["timeout"]; ok {
		if err := store.CheckConnectTimeout("mysql", "timeout", v, connect, "a duration between 1ms and 1h, e.g. 5s"); err != nil {
			return nil, err
		}
	}
	session(cfg)
	return &Config{Driver: cfg, Prefix: prefix, Where: addr + "/" + db, Connect: connect}, nil
}

// driverQuery checks the DSN's driver parameters one at a time, so that an error names the parameter
// (the driver's do not), and returns them as the driver's query string.
func driverQuery(base string, q store.Params) (string, error) {
	var params []string
	for _, k := range slices.Sorted(maps.Keys(q)) {
		v := q[k]
		if unescaped[k] {
			v = url.QueryEscape(v)
		} else if strings.ContainsAny(v, "&=") {
			return "", fmt.Errorf("%w: mysql parameter %q is %q: '&' and '=' cannot be part of it", store.ErrBadDSN, k, v)
		}
		if _, err := gomysql.ParseDSN(base + "?" + k + "=" + v); err != nil {
			return "", fmt.Errorf("%w: mysql parameter %q is %q: %s", store.ErrBadDSN, k, q[k], oneLine(err.Error()))
		}
		params = append(params, k+"="+v)
	}
	if len(params) == 0 {
		return "", nil
	}
	return "?" + strings.Join(params, "&"), nil
}

// session sets what every connection of the store needs, whatever the DSN says: UTC, strict SQL,
// changed-row counts, and an end to a session idle in a transaction.
func session(cfg *gomysql.Config) {
	cfg.Logger = slogger{}
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = false // ROW_COUNT() must count changed rows, not matched ones
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"
	// A holder that vanishes inside a ledger transaction without its FIN reaching the server (a
	// partition, a frozen VM) would keep the task's lease row locked until wait_timeout (8 hours by
	// default). MariaDB ≥ 10.3 ends a session idle in a transaction after idle_transaction_timeout;
	// the driver sends the params as one SET, and the executable comment runs on MariaDB only
	// (MySQL has no such variable and skips the comment).
	if _, set := cfg.Params["idle_transaction_timeout"]; !set {
		cfg.Params["sql_mode"] += fmt.Sprintf(" /*M!100300 , idle_transaction_timeout = %d */", int(sqlstore.IdleTxTimeout/time.Second))
	}
}

// slogger sends go-sql-driver's own log lines (e.g. "closing bad idle connection") through slog's
// default logger, which the CLI makes its own, instead of straight to stderr in its own format.
type slogger struct{}

func (slogger) Print(v ...any) {
	slog.Default().Warn("mysql: " + oneLine(strings.TrimSpace(fmt.Sprint(v...))))
}

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
	s := &Store{Store: &sqlstore.Store{DB: db, Dialect: d, Prefix: cfg.Prefix, Flavor: sqlstore.MySQL, Retries: 3, Backoff: 50 * time.Millisecond, SessionReadCommitted: true}, d: d}
	if err := s.Reach(ctx, cfg.Connect, "mysql "+cfg.Where); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.migrate(ctx, cfg.Driver.DBName); err != nil {
		db.Close()
		return nil, err
	}
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

// acquireBody takes the lease when it is free or expired and reads the row back (arguments: task,
// holder, run id, TTL in µs, task): Acquire runs it as a transaction of its own, Start inside
// one that goes on.
const acquireBody = `INSERT INTO {p}leases (task, holder, run_id, token, acquired_at, expires_at)
	VALUES (?, ?, ?, 1, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)
	ON DUPLICATE KEY UPDATE
	holder = IF(expires_at <= NOW(6), VALUES(holder), holder),
	run_id = IF(expires_at <= NOW(6), VALUES(run_id), run_id),
	token = IF(expires_at <= NOW(6), token + 1, token),
	acquired_at = IF(expires_at <= NOW(6), VALUES(acquired_at), acquired_at),
	expires_at = IF(expires_at <= NOW(6), VALUES(expires_at), expires_at);
SELECT ROW_COUNT(), holder, run_id, token, acquired_at, expires_at, expires_at > NOW(6) FROM {p}leases WHERE task = ?`

// row is what the lease batches read back.
type row struct {
	changed int64
	lease   store.Lease
	live    bool
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
// run id, token, acquired, expires, live), and closes rows.
func scanRow(rows *sql.Rows) (r row, found bool, err error) {
	defer rows.Close()
	for {
		if cols, _ := rows.Columns(); len(cols) > 0 {
			for rows.Next() {
				if err := rows.Scan(&r.changed, &r.lease.Holder, &r.lease.RunID, &r.lease.Token,
					&r.lease.Acquired, &r.lease.Expires, &r.live); err != nil {
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
			return r.lease, nil
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
		SELECT ROW_COUNT(), holder, run_id, token, acquired_at, expires_at, expires_at > NOW(6) FROM {p}leases WHERE task = ?`),
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
	if l.Limit >= 2 {
		return s.ReleaseSeat(ctx, l)
	}
	var n int64
	err := s.Do(ctx, func(ctx context.Context) error {
		res, err := s.DB.ExecContext(ctx, s.Q(releaseSQL), l.Task, l.Holder, l.Token)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: task %q: token %d of %s was released or replaced", store.ErrNotHeld, l.Task, l.Token, l.Holder)
	}
	return nil
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
		errors.Is(err, gomysql.ErrPktSync) || errors.Is(err, gomysql.ErrPktSyncMul) || errors.Is(err, sql.ErrConnDone)
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
