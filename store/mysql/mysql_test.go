package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func serverDSN(tb testing.TB) string { return storetest.ServerDSN(tb, "ONCE_TEST_MYSQL", "mysql") }

func withPrefix(tb testing.TB, dsn string) string { return storetest.WithPrefix(tb, dsn) }

func harness() storetest.Harness {
	return storetest.Harness{DSN: func(tb testing.TB) string { return withPrefix(tb, serverDSN(tb)) }}
}

// opener opens the store for the sqltest helpers that need its SQL side too.
func opener(ctx context.Context, dsn string) (store.Store, *sqlstore.Store, error) {
	s, err := Open(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Store, nil
}

func TestConformance(t *testing.T) { storetest.Run(t, harness()) }

// TestKeysConformanceReadBack runs the keys cases with MySQL 8's claim path (INSERT IGNORE, then the
// claim-id read-back of a partly new batch) on a server that has RETURNING (MariaDB).
func TestKeysConformanceReadBack(t *testing.T) {
	noReturning.Store(true)
	t.Cleanup(func() { noReturning.Store(false) })
	s, err := Open(ctxT(t, 30*time.Second), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	if returning(t, s) {
		t.Fatal("Returning is on with noReturning set")
	}
	s.Close()
	storetest.RunKeys(t, harness())
}

// TestReturningOnMariaDB: on MariaDB, claims use INSERT … RETURNING.
func TestReturningOnMariaDB(t *testing.T) {
	s, err := Open(ctxT(t, 30*time.Second), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v string
	if err := s.DB.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if want, got := strings.Contains(strings.ToLower(v), "mariadb"), returning(t, s); got != want {
		t.Fatalf("server %q: Returning = %v, want %v", v, got, want)
	}
}

// returning asks s.Returning in a transaction of its own, as a claim does.
func returning(t *testing.T, s *Store) bool {
	t.Helper()
	tx, err := s.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return s.Returning(context.Background(), tx)
}

// BenchmarkSuite: the suite's benchmarks (docs/benchmarks.md).
func BenchmarkSuite(b *testing.B) { storetest.RunBenchmarks(b, harness()) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestConcurrentMigrate: 50 clients with their own pools open one empty prefix at once; all succeed.
// TestConcurrentMigrate: 50 clients open a new prefix at once. Their first contact may wait 15 s,
// not the default 2.5 s: 50 handshakes at once on a loaded machine under -race took longer (a
// fresh-clone run), and what the test checks is the migration's lock, not the bound.
func TestConcurrentMigrate(t *testing.T) {
	sqltest.ConcurrentMigrate(t, withPrefix(t, serverDSN(t))+"&timeout=15s")
}

func TestBadDSN(t *testing.T) { sqltest.BadDSN(t, serverDSN(t)) }

// TestNoPrivileges: a user that may use a database but not create tables in it (here: our user in
// information_schema) gets ErrUnavailable naming the refusal.
func TestNoPrivileges(t *testing.T) {
	u, err := url.Parse(withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/information_schema"
	s, err := Open(ctxT(t, 30*time.Second), u.String())
	if err == nil {
		s.Close()
		t.Fatal("created tables in information_schema")
	}
	t.Log(err)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), "information_schema") {
		t.Fatalf("open without privileges: %v, want ErrUnavailable naming the refusal", err)
	}
}

// TestRestart: the server restarts while a lease is held; the store reconnects by itself.
func TestRestart(t *testing.T) {
	sqltest.Restart(t, "ONCE_TEST_MYSQL_CTL", withPrefix(t, serverDSN(t)))
}

// TestParseDSNStrict: the query is parsed by store.ParseQuery, every refusal names the parameter, and
// the password never shows; no server needed.
func TestParseDSNStrict(t *testing.T) {
	sqltest.ParseDSNStrict(t, "mysql://u:pw@h:3306/db", func(dsn string) error { _, err := ParseDSN(dsn); return err },
		sqltest.Refusal{Tail: "?parseTime=false", Want: `once sets it itself`},
		sqltest.Refusal{Tail: "?sql_mode=ANSI", Want: `once sets it itself`},
		sqltest.Refusal{Tail: "?wait_timeout=10", Want: `"wait_timeout"`},
		sqltest.Refusal{Tail: "?idle_transaction_timeout=10s", Want: `whole seconds`},
		sqltest.Refusal{Tail: "?readTimeout=zz", Want: "readTimeout"},
		sqltest.Refusal{Tail: "?timeout=0s", Want: `"timeout" is "0s"`},
		sqltest.Refusal{Tail: "?timeout=-1s", Want: `"timeout"`},
		sqltest.Refusal{Tail: "?timeout=2h", Want: `"timeout"`},
		sqltest.Refusal{Tail: "?writeTimeout=1ns", Want: `"writeTimeout" is "1ns"`}, // every query cut: 70
		sqltest.Refusal{Tail: "?readTimeout=-1s", Want: `"readTimeout"`},            // silently none
		sqltest.Refusal{Tail: "?readTimeout=2h", Want: `"readTimeout"`},
		sqltest.Refusal{Tail: "?charset=latin1", Want: `"charset"`}, // "café" was stored as "cafÃ©": run again
		sqltest.Refusal{Tail: "?charset=utf8", Want: `"charset"`},
		sqltest.Refusal{Tail: "?collation=latin1_swedish_ci", Want: `"collation"`})
	for _, tail := range []string{
		"?tls=false&timeout=2s&readTimeout=5s&charset=utf8mb4",
		"?readTimeout=0&writeTimeout=1h",
		"?prefix=team_b&idle_transaction_timeout=30",
	} {
		dsn := "mysql://u:pw@h:3306/db" + tail
		cfg, err := ParseDSN(dsn)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", dsn, err)
			continue
		}
		if _, ok := cfg.Driver.Logger.(slogger); !ok || cfg.Driver.Passwd != "pw" || cfg.Prefix == "" || !cfg.Driver.ParseTime || !cfg.Driver.MultiStatements {
			t.Errorf("ParseDSN(%q) = %+v", dsn, cfg)
		}
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"mysql://u:p@127.0.0.1:3306/db",
		"mysql://u@h/db?prefix=blue",
		"mysql://h/db?prefix=Bad",
		"mysql://u:p@[::1]:5/d?timeout=2s&prefix=a_1&tls=false",
		"mysql://u:p%40ss@h/d",
		"mysql://u:p@h/d/e",
		"mysql://u:p@h/d?readTimeout=zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			sqltest.FuzzRefusal(t, dsn, err)
			return
		}
		if !strings.HasSuffix(cfg.Prefix, "_") || cfg.Driver.DBName == "" || !cfg.Driver.MultiStatements || !cfg.Driver.InterpolateParams {
			t.Fatalf("ParseDSN(%q) = %+v", dsn, cfg)
		}
		if _, bad := cfg.Driver.Params["prefix"]; bad {
			t.Fatalf("prefix leaked into session params")
		}
	})
}

// --- benchmarks: p50/p99 of a lease round versus raw named locks and durable writes ---

// floors: a raw GET_LOCK + RELEASE_LOCK on one name, and an upsert.
var floors = sqltest.Floors{
	Lock: "getlock",
	LockOp: func(ctx context.Context, db *sql.DB) error {
		var ok sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT GET_LOCK('once-bench', 0)").Scan(&ok); err != nil || ok.Int64 != 1 {
			return err
		}
		_, err := db.ExecContext(ctx, "DO RELEASE_LOCK('once-bench')")
		return err
	},
	Upsert: "INSERT INTO %s (k, v) VALUES (%d, 1) ON DUPLICATE KEY UPDATE v = v + 1",
	DB: func(tb testing.TB, dsn string) *sql.DB {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		conn, err := gomysql.NewConnector(cfg.Driver)
		if err != nil {
			tb.Fatal(err)
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(1)
		return db
	},
}

// BenchmarkLease measures the floors of BenchmarkSuite/Contended (this store's acquire+release) on
// the same server: a raw getlock lock and unlock, and two durable single-row writes.
func BenchmarkLease(b *testing.B) { sqltest.BenchmarkFloors(b, serverDSN(b), floors) }

// BenchmarkLeaseInterleaved runs one client of each kind round-robin (sqltest.BenchmarkInterleaved).
func BenchmarkLeaseInterleaved(b *testing.B) {
	base := serverDSN(b)
	sqltest.BenchmarkInterleaved(b, base, withPrefix(b, base), floors)
}

// A holder gone inside a ledger transaction blocks the task only until MariaDB ends its idle
// session (idle_transaction_timeout), not for wait_timeout's eight hours.
func TestIdleTransactionEnded(t *testing.T) {
	sqltest.IdleTx(t, withPrefix(t, serverDSN(t)), opener, "SELECT CAST(@@idle_transaction_timeout AS DOUBLE)", "&idle_transaction_timeout=1")
}

// TestBadConnectionUnavailable: the driver's "bad connection" after a write timed out (an
// unexported error, not driver.ErrBadConn) is the store unavailable (69), not an internal error (70).
func TestBadConnectionUnavailable(t *testing.T) {
	err := (&dialect{where: "h:3306/db"}).MapError(fmt.Errorf("exec: %w", errors.New("bad connection")))
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%v; want ErrUnavailable", err)
	}
}

// A call on a connection gone silent ends within call_timeout instead of when the kernel gives up.
func TestSilentConnection(t *testing.T) {
	sqltest.SilentConnection(t, withPrefix(t, serverDSN(t)), opener)
}
