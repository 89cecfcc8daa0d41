package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

func serverDSN(tb testing.TB) string { return sqltest.ServerDSN(tb, "ONCE_TEST_MYSQL", "mysql") }

func withPrefix(tb testing.TB, dsn string) string { return sqltest.WithPrefix(tb, dsn) }

func harness() storetest.Harness {
	return storetest.Harness{DSN: func(tb testing.TB) string { return withPrefix(tb, serverDSN(tb)) }}
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
func TestConcurrentMigrate(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	stores := make(chan *Store, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			stores <- s
		}()
	}
	wg.Wait()
	close(errs)
	close(stores)
	for err := range errs {
		t.Errorf("open: %v", err)
	}
	var tokens []int64
	for s := range stores {
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "m", Holder: "h", RunID: "r", TTL: time.Minute})
		if err == nil {
			tokens = append(tokens, l.Token)
		} else if !errors.Is(err, store.ErrBusy) {
			t.Errorf("acquire: %v", err)
		}
		s.Close()
	}
	if len(tokens) != 1 {
		t.Errorf("50 clients acquired %d leases, want 1", len(tokens))
	}
}

func TestBadDSN(t *testing.T) {
	good := serverDSN(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	user := u.User.Username()
	with := func(f func(u *url.URL)) string {
		c := *u
		f(&c)
		return c.String()
	}
	cases := []struct {
		name, dsn, want string
		sentinel        error
	}{
		{"password", with(func(u *url.URL) { u.User = url.UserPassword(user, "wrong-"+pw) }), "password", store.ErrUnavailable},
		{"host", with(func(u *url.URL) { u.Host = "127.0.0.1:1" }), "127.0.0.1:1", store.ErrUnavailable},
		{"database", with(func(u *url.URL) { u.Path = "/no_such_db" }), "no_such_db", store.ErrUnavailable},
		{"prefix", with(func(u *url.URL) { u.RawQuery = "prefix=Bad-Name" }), "prefix", store.ErrBadDSN},
		{"param", with(func(u *url.URL) { u.RawQuery = "no_such_setting=1" }), "no_such_setting", store.ErrBadDSN},
		{"nodb", with(func(u *url.URL) { u.Path = "" }), "database", store.ErrBadDSN},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			s, err := store.Open(ctxT(t, 30*time.Second), c.dsn)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", store.Redact(c.dsn))
			}
			msg := err.Error()
			t.Logf("%s (%v)", msg, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, c.sentinel) {
				t.Errorf("error %q does not wrap %v", msg, c.sentinel)
			}
			if pw != "" && strings.Contains(msg, pw) {
				t.Errorf("error %q contains the password", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is more than one line", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not mention %q", msg, c.want)
			}
			if c.sentinel == store.ErrUnavailable && !strings.Contains(msg, u.Hostname()) {
				t.Errorf("error %q does not name the host", msg)
			}
		})
	}
}

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

// TestRestart: the server restarts while a lease is held. The store reconnects by itself: renew after
// the restart succeeds (the lease row is durable and the TTL has not run out), and the token survives.
func TestRestart(t *testing.T) {
	ctl := os.Getenv("ONCE_TEST_MYSQL_CTL")
	dsn := withPrefix(t, serverDSN(t))
	if ctl == "" {
		t.Skip("ONCE_TEST_MYSQL_CTL is not set (a server of your own); restart test needs the private server")
	}
	ctx := ctxT(t, 60*time.Second)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "r", Holder: "h", RunID: "run", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ctl, "stop").CombinedOutput(); err != nil {
		t.Fatalf("ctl stop: %v %s", err, out)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			_ = exec.Command(ctl, "start").Run()
		}
	})
	// While it is down: a clean ErrUnavailable within the retry budget, not a hang.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = s.Renew(dctx, l, 30*time.Second)
	cancel()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("renew while the server is down: %v, want ErrUnavailable", err)
	}
	if out, err := exec.Command(ctl, "start").CombinedOutput(); err != nil {
		t.Fatalf("ctl start: %v %s", err, out)
	}
	started = true
	l2, err := s.Renew(ctx, l, 30*time.Second)
	if err != nil {
		t.Fatalf("renew after restart: %v", err)
	}
	if l2.Token != l.Token || !l2.Expires.After(l.Expires) {
		t.Fatalf("renew after restart = %+v, from %+v", l2, l)
	}
	if err := s.Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
}

// TestParseDSNStrict: the query is parsed by store.ParseQuery, every refusal names the parameter, and
// the password never shows; no server needed.
func TestParseDSNStrict(t *testing.T) {
	for _, c := range []struct{ tail, want string }{
		{"?prefix=teamA;x", `"prefix"`},
		{"?prefix=teamb;x", `"prefix"`},
		{"?prefix=a%zz", `"prefix"`},
		{"?prefx=teamb", `did you mean "prefix"`},
		{"?prefix=", `"prefix" is empty`},
		{"?prefix=a&prefix=b", `given twice`},
		{"?parseTime=false", `once sets it itself`},
		{"?sql_mode=ANSI", `once sets it itself`},
		{"?wait_timeout=10", `"wait_timeout"`},
		{"?idle_transaction_timeout=10s", `whole seconds`},
		{"?readTimeout=zz", "readTimeout"},
		{"#x", "'#'"},
	} {
		_, err := ParseDSN("mysql://u:pw@h:3306/db" + c.tail)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "pw@") ||
			strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseDSN(…%s) = %v; want ErrBadDSN naming %s", c.tail, err, c.want)
		}
	}
	for _, tail := range []string{
		"?tls=false&timeout=2s&readTimeout=5s&charset=utf8mb4",
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
			if !errors.Is(err, store.ErrBadDSN) {
				t.Fatalf("ParseDSN(%q): %v does not wrap ErrBadDSN", dsn, err)
			}
			if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Contains(err.Error(), pw) {
					t.Fatalf("error %q leaks the password", err)
				}
			}
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

// lockOp is a raw GET_LOCK + RELEASE_LOCK on one name.
func lockOp(b *testing.B, dsn string) (storetest.Op, func()) {
	db := rawDB(b, dsn)
	return func(ctx context.Context) error {
		var ok sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT GET_LOCK('once-bench', 0)").Scan(&ok); err != nil || ok.Int64 != 1 {
			return err
		}
		_, err := db.ExecContext(ctx, "DO RELEASE_LOCK('once-bench')")
		return err
	}, func() { db.Close() }
}

// writesOp is two durable single-row writes (autocommit upserts) by client i on its own row.
func writesOp(b *testing.B, dsn, table string, i int) (storetest.Op, func()) {
	db := rawDB(b, dsn)
	up := fmt.Sprintf("INSERT INTO %s (k, v) VALUES (%d, 1) ON DUPLICATE KEY UPDATE v = v + 1", table, i)
	return func(ctx context.Context) error {
		if _, err := db.ExecContext(ctx, up); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, up)
		return err
	}, func() { db.Close() }
}

// benchTable creates a table for writesOp, dropped when b ends.
func benchTable(b *testing.B, dsn string) string {
	table := "bench_w_" + sqltest.RandHex(b)
	setup := rawDB(b, dsn)
	if _, err := setup.Exec("CREATE TABLE " + table + " (k INT PRIMARY KEY, v BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = setup.Exec("DROP TABLE " + table); setup.Close() })
	return table
}

// BenchmarkLease measures the floors of BenchmarkSuite/Contended (this store's acquire+release) on
// the same server: a raw getlock lock and unlock, and two durable single-row writes (the floor for a
// durable acquire plus release), each with one client and with 16 contenders (one lock; the
// writers each write their own row). Reported: p50 and p99 of one round.
func BenchmarkLease(b *testing.B) {
	base := serverDSN(b)
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("getlock/c%d", n), func(b *testing.B) {
			storetest.RunContended(b, n, func(int) (storetest.Op, func()) { return lockOp(b, base) })
		})
		b.Run(fmt.Sprintf("twowrites/c%d", n), func(b *testing.B) {
			table := benchTable(b, base)
			storetest.RunContended(b, n, func(i int) (storetest.Op, func()) { return writesOp(b, base, table, i) })
		})
	}
}

// BenchmarkLeaseInterleaved runs one client of each kind round-robin, so that load from elsewhere on
// the machine hits all alike, and reports each p50/p99 and the p50 ratios to two writes.
func BenchmarkLeaseInterleaved(b *testing.B) {
	base := serverDSN(b)
	st, done1 := storetest.LeaseRound(b, withPrefix(b, base), "h0")
	defer done1()
	lk, done2 := lockOp(b, base)
	defer done2()
	wr, done3 := writesOp(b, base, benchTable(b, base), 0)
	defer done3()
	storetest.RunInterleaved(b, []storetest.Named{{Name: "store", Op: st}, {Name: "getlock", Op: lk}, {Name: "twowrites", Op: wr}})
}

func rawDB(b *testing.B, dsn string) *sql.DB {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := gomysql.NewConnector(cfg.Driver)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	return db
}

// A holder gone inside a ledger transaction blocks the task only until MariaDB ends its idle
// session (idle_transaction_timeout), not for wait_timeout's eight hours.
func TestIdleTransactionEnded(t *testing.T) {
	sqltest.IdleTx(t, withPrefix(t, serverDSN(t)), func(ctx context.Context, dsn string) (store.Store, *sqlstore.Store, error) {
		s, err := Open(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Store, nil
	}, "SELECT CAST(@@idle_transaction_timeout AS DOUBLE)", "&idle_transaction_timeout=1")
}
