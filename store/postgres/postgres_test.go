package postgres

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func serverDSN(tb testing.TB) string {
	return storetest.ServerDSN(tb, "ONCE_TEST_POSTGRES", "postgres")
}

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
	sqltest.ConcurrentMigrate(t, withPrefix(t, serverDSN(t))+"&connect_timeout=15")
}

func TestBadDSN(t *testing.T) { sqltest.BadDSN(t, serverDSN(t)) }

// TestAnotherServersPort: a postgres DSN at a MySQL server's port is unavailable (69) and says
// the answer is not PostgreSQL's; pgx's own words were "received unexpected message: %!w(<nil>)".
func TestAnotherServersPort(t *testing.T) {
	u, err := url.Parse(storetest.ServerDSN(t, "ONCE_TEST_MYSQL", "mysql"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctxT(t, 30*time.Second), "postgres://once:secret@"+u.Host+"/once?sslmode=disable&connect_timeout=5")
	if err == nil {
		s.Close()
		t.Fatal("opened a postgres store at a MySQL server's port")
	}
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), notPostgres) || strings.Contains(err.Error(), "%!") {
		t.Fatalf("%v; want ErrUnavailable saying %q", err, notPostgres)
	}
}

// TestBadSettingValue: a setting in the DSN with a value the server refuses is a bad DSN (64),
// and a search_path naming no schema is unavailable (69) with what to fix; both were internal
// errors (70).
func TestBadSettingValue(t *testing.T) {
	base := withPrefix(t, serverDSN(t))
	for q, want := range map[string]error{"lock_timeout=-5": store.ErrBadDSN, "lock_timeout=bogus": store.ErrBadDSN,
		"search_path=nosuch_schema": store.ErrUnavailable} {
		s, err := Open(ctxT(t, 30*time.Second), base+"&"+q)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", q)
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", q, err, want)
		}
	}
}

// TestNoPrivileges: a role that may connect to a database but not create tables in it (since
// PostgreSQL 15 nobody but the owner may create in schema public; here: our role in database
// "postgres") gets ErrUnavailable naming the missing privilege.
func TestNoPrivileges(t *testing.T) {
	u, err := url.Parse(withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	s, err := Open(ctxT(t, 30*time.Second), u.String())
	if err == nil {
		s.Close()
		t.Skip("this role may create tables in database postgres (PostgreSQL < 15 or a privileged role)")
	}
	t.Log(err)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("open without privileges: %v, want ErrUnavailable naming the privilege", err)
	}
}

// TestRestart: the server restarts while a lease is held; the store reconnects by itself.
func TestRestart(t *testing.T) {
	sqltest.Restart(t, "ONCE_TEST_POSTGRES_CTL", withPrefix(t, serverDSN(t)))
}

// TestParseDSNStrict: the query is parsed by store.ParseQuery, every refusal names the parameter, and
// the password never shows; no server needed.
func TestParseDSNStrict(t *testing.T) {
	sqltest.ParseDSNStrict(t, "postgres://u:pw@h:5432/db", func(dsn string) error { _, err := ParseDSN(dsn); return err },
		sqltest.Refusal{Tail: "?no_such_setting=1", Want: `"no_such_setting"`},
		sqltest.Refusal{Tail: "?sslmode=maybe", Want: "sslmode"},
		sqltest.Refusal{Tail: "?password=other", Want: `"password": also given`},
		sqltest.Refusal{Tail: "?timezone=UTC", Want: `"timezone"`},
		sqltest.Refusal{Tail: "?sslpassword=s3cr3t;x", Want: `"sslpassword"`},
		sqltest.Refusal{Tail: "?connect_timeout=0", Want: `"connect_timeout" is "0"`},
		sqltest.Refusal{Tail: "?connect_timeout=99999999999", Want: `"connect_timeout"`},
		sqltest.Refusal{Tail: "?connect_timeout=36028797018963973", Want: `"connect_timeout"`},
		sqltest.Refusal{Tail: "?idle_in_transaction_session_timeout=1", Want: `"idle_in_transaction_session_timeout" is "1"`}, // 70
		sqltest.Refusal{Tail: "?statement_timeout=500ms", Want: `"statement_timeout"`},
		sqltest.Refusal{Tail: "?statement_timeout=0.5s", Want: `"statement_timeout"`})
	for _, tail := range []string{
		"?sslmode=disable&application_name=once%20job&search_path=jobs&options=-c%20lock_timeout%3D5s",
		"?connect_timeout=2&prefix=team_b&target_session_attrs=read-write",
		"?statement_timeout=0&idle_in_transaction_session_timeout=1min",
		"?statement_timeout=1000&idle_in_transaction_session_timeout=2s",
	} {
		dsn := "postgres://u:pw@h:5432/db" + tail
		cfg, err := ParseDSN(dsn)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", dsn, err)
			continue
		}
		if cfg.Conn.Password != "pw" || cfg.Prefix == "" {
			t.Errorf("ParseDSN(%q) = %+v", dsn, cfg)
		}
	}
}

// TestSessionSettingsWin: options=-c cannot change the settings once's sessions need; the startup
// packet's parameters override the options' (checked on the server by the run below).
func TestSessionSettingsWin(t *testing.T) {
	cfg, err := ParseDSN("postgres://u:pw@h:5432/db?options=-c%20client_encoding%3DLATIN1%20-c%20datestyle%3DGerman")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Conn.RuntimeParams["client_encoding"] != "UTF8" || cfg.Conn.RuntimeParams["datestyle"] != "ISO, MDY" {
		t.Fatalf("runtime params %v", cfg.Conn.RuntimeParams)
	}
	dsn := os.Getenv("ONCE_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("ONCE_TEST_POSTGRES not set")
	}
	cfg, err = ParseDSN(withPrefix(t, dsn) + "&options=-c%20client_encoding%3DLATIN1%20-c%20datestyle%3DGerman")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg.Conn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if enc, ds := conn.PgConn().ParameterStatus("client_encoding"), conn.PgConn().ParameterStatus("DateStyle"); enc != "UTF8" || !strings.HasPrefix(ds, "ISO") {
		t.Fatalf("session has client_encoding %q, DateStyle %q", enc, ds)
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"postgres://u:p@127.0.0.1:5432/db?sslmode=disable",
		"postgresql://u@h/db?prefix=blue",
		"postgres://h/db?prefix=Bad",
		"postgres://u:p@[::1]:5/d?connect_timeout=2&prefix=a_1",
		"postgres://%zz@h/d",
		"postgres:///db?host=/tmp",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			sqltest.FuzzRefusal(t, dsn, err)
			return
		}
		if !strings.HasSuffix(cfg.Prefix, "_") || cfg.Conn.Database == "" {
			t.Fatalf("ParseDSN(%q) = prefix %q database %q", dsn, cfg.Prefix, cfg.Conn.Database)
		}
		if _, bad := cfg.Conn.RuntimeParams["prefix"]; bad {
			t.Fatalf("prefix leaked into runtime params")
		}
	})
}

// --- benchmarks: p50/p99 of a lease round versus raw advisory locks and durable writes ---

// floors: a raw pg_try_advisory_lock + pg_advisory_unlock on one key, and an upsert.
var floors = sqltest.Floors{
	Lock: "advisory",
	LockOp: func(ctx context.Context, db *sql.DB) error {
		var ok bool
		if err := db.QueryRowContext(ctx, "SELECT pg_try_advisory_lock(42, 42)").Scan(&ok); err != nil || !ok {
			return err
		}
		_, err := db.ExecContext(ctx, "SELECT pg_advisory_unlock(42, 42)")
		return err
	},
	Upsert: "INSERT INTO %s AS t (k, v) VALUES (%d, 1) ON CONFLICT (k) DO UPDATE SET v = t.v + 1",
	DB: func(tb testing.TB, dsn string) *sql.DB {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg.Conn)
		db.SetMaxOpenConns(1)
		return db
	},
}

// BenchmarkLease measures the floors of BenchmarkSuite/Contended (this store's acquire+release) on
// the same server: a raw advisory lock and unlock, and two durable single-row writes.
func BenchmarkLease(b *testing.B) { sqltest.BenchmarkFloors(b, serverDSN(b), floors) }

// BenchmarkLeaseInterleaved runs one client of each kind round-robin (sqltest.BenchmarkInterleaved).
func BenchmarkLeaseInterleaved(b *testing.B) {
	base := serverDSN(b)
	sqltest.BenchmarkInterleaved(b, base, withPrefix(b, base), floors)
}

// A holder gone inside a ledger transaction blocks the task only until the server ends its idle
// session (idle_in_transaction_session_timeout), not for TCP keepalive's two hours.
func TestIdleTransactionEnded(t *testing.T) {
	sqltest.IdleTx(t, withPrefix(t, serverDSN(t)), opener, "SELECT EXTRACT(EPOCH FROM current_setting('idle_in_transaction_session_timeout')::interval)::float8",
		"&idle_in_transaction_session_timeout=1s")
}

// A call on a connection gone silent ends within call_timeout instead of when the kernel gives up.
func TestSilentConnection(t *testing.T) {
	sqltest.SilentConnection(t, withPrefix(t, serverDSN(t)), opener)
}
