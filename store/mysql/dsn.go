package mysql

// The DSN: what a mysql:// URL may say, and the driver configuration and session it becomes.

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

// Config is what a DSN says, once parsed.
type Config struct {
	Driver *gomysql.Config
	Prefix string // table prefix, e.g. "once_"
	Where  string // "host:port/database", for messages
	// Connect is the DSN's timeout=, 0 when it gives none: it bounds Open's first contact instead
	// of store.ConnectTimeout (and each later dial, 5s when not given).
	Connect time.Duration
	// Call is the DSN's call_timeout (sqlstore.DefaultCallTimeout when it gives none; 0: none).
	Call time.Duration
}

// Params are the query parameters a mysql:// DSN accepts (docs/stores/mysql.md): prefix, MariaDB's
// idle_transaction_timeout, and go-sql-driver/mysql's connection parameters that leave once's
// session as once needs it. Anything else is refused before connecting: the driver would send an
// unknown name to the server as a session variable, so a typo that happens to name one would be
// applied without a word.
var Params = []string{
	"prefix", "idle_transaction_timeout", "call_timeout",
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
	call, err := sqlstore.ParseCallTimeout("mysql", q)
	if err != nil {
		return nil, err
	}
	if v, ok := q["idle_transaction_timeout"]; ok && strings.Trim(v, "0123456789") != "" {
		return nil, fmt.Errorf("%w: mysql parameter \"idle_transaction_timeout\" is %q: give whole seconds, e.g. 10", store.ErrBadDSN, v)
	}
	// The tables are utf8mb4 with the binary collation: a connection in another character set
	// would have the server convert what once sends, and a slot "café" recorded as other bytes is
	// another slot (run again by a host whose DSN has the default).
	if v, ok := q["charset"]; ok && v != "utf8mb4" {
		return nil, fmt.Errorf("%w: mysql parameter \"charset\" is %q: once's tables are utf8mb4; remove it (or give utf8mb4)", store.ErrBadDSN, v)
	}
	if v, ok := q["collation"]; ok && !strings.HasPrefix(v, "utf8mb4_") {
		return nil, fmt.Errorf("%w: mysql parameter \"collation\" is %q: once's tables are utf8mb4; remove it (or give a utf8mb4_ collation)", store.ErrBadDSN, v)
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
		if err := store.CheckConnectTimeout("mysql", "timeout", v, connect, ""); err != nil {
			return nil, err
		}
	}
	if err := checkIOTimeouts(q, cfg); err != nil {
		return nil, err
	}
	session(cfg)
	return &Config{Driver: cfg, Prefix: prefix, Where: addr + "/" + db, Connect: connect, Call: call}, nil
}

// checkIOTimeouts refuses a readTimeout or writeTimeout under 1s or over 1h (0 is none, the
// driver's default). A negative one was silently no timeout, and one of 1ns cut every query: a
// launch failed with "bad connection" (70) while the DSN was at fault.
func checkIOTimeouts(q store.Params, cfg *gomysql.Config) error {
	for _, p := range []struct {
		k string
		d time.Duration
	}{{"readTimeout", cfg.ReadTimeout}, {"writeTimeout", cfg.WriteTimeout}} {
		if v, ok := q[p.k]; ok && p.d != 0 && (p.d < time.Second || p.d > store.MaxConnectTimeout) {
			return fmt.Errorf("%w: mysql parameter %q is %q: give 0 (none) or a duration between 1s and 1h, e.g. 30s", store.ErrBadDSN, p.k, v)
		}
	}
	return nil
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
