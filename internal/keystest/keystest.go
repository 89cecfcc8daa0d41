// Package keystest holds the fixtures of the tests of package keys and of the examples built on it:
// the databases they run against (SQLite, PostgreSQL through database/sql and pgx, MySQL), a fresh
// keys table per test, a claim in one committed transaction.
package keystest

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/once-run/once/keys"
	oncemysql "github.com/once-run/once/store/mysql"
	"github.com/once-run/once/store/storetest"
)

// Backend is one database the tests run against: SQLite always, PostgreSQL (database/sql and pgx)
// and MySQL/MariaDB when ONCE_TEST_POSTGRES / ONCE_TEST_MYSQL are set.
type Backend struct {
	Name    string
	Dialect keys.Dialect
	// Open returns a fresh database/sql handle and a pgx pool (PostgreSQL only, else nil).
	Open func(t testing.TB) (*sql.DB, *pgxpool.Pool)
	Pgx  bool // use the pgx adapter instead of database/sql
}

// Backends lists the databases: SQLite always; PostgreSQL and MySQL need their test servers.
func Backends() []Backend {
	return []Backend{
		{Name: "sqlite", Dialect: keys.SQLite, Open: openSQLite},
		{Name: "postgres", Dialect: keys.Postgres, Open: openPostgres},
		{Name: "pgx", Dialect: keys.Postgres, Open: openPostgres, Pgx: true},
		{Name: "mysql", Dialect: keys.MySQL, Open: openMySQL},
	}
}

// SQLiteDSN is how SQLite should be opened for concurrent claimers: WAL, a busy timeout, and
// BEGIN IMMEDIATE so a transaction takes the write lock up front instead of failing on upgrade.
func SQLiteDSN(path string) string {
	path = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) // a URI path
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=cache_size(-65536)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

func openSQLite(t testing.TB) (*sql.DB, *pgxpool.Pool) {
	db, err := sql.Open("sqlite", SQLiteDSN(filepath.Join(t.TempDir(), "app.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, nil
}

func openPostgres(t testing.TB) (*sql.DB, *pgxpool.Pool) {
	dsn := storetest.ServerDSN(t, "ONCE_TEST_POSTGRES", "postgres")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, pool
}

func mysqlDriverDSN(t testing.TB) string {
	cfg, err := oncemysql.ParseDSN(storetest.ServerDSN(t, "ONCE_TEST_MYSQL", "mysql"))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Driver.Clone()
	d.InterpolateParams = false
	d.MultiStatements = false
	return d.FormatDSN()
}

func openMySQL(t testing.TB) (*sql.DB, *pgxpool.Pool) {
	db, err := sql.Open("mysql", mysqlDriverDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, nil
}

// Fixture is an opened Backend with a fresh keys table.
type Fixture struct {
	B     Backend
	DB    *sql.DB
	Pool  *pgxpool.Pool
	K     *keys.Keys
	Table string
}

// NewFixture opens b and creates a fresh keys table, dropped when the test ends.
func NewFixture(t testing.TB, b Backend) *Fixture {
	db, pool := b.Open(t)
	f := &Fixture{B: b, DB: db, Pool: pool, Table: "k" + storetest.RandHex(t)}
	var err error
	f.K, err = keys.New(keys.Options{Dialect: b.Dialect, Table: f.Table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := Context(t, time.Minute)
	if err := f.K.Ensure(ctx, keys.SQL(db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{f.Table, f.Table + "_checkpoints"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + tb)
		}
	})
	return f
}

// Context is a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// inTx runs fn in a transaction of the Fixture's adapter and commits when fn returns nil.
func (f *Fixture) InTx(ctx context.Context, fn func(tx keys.Execer) error) error {
	if f.B.Pgx {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
		if err := fn(keys.Pgx(tx)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(keys.SQL(tx)); err != nil {
		return err
	}
	return tx.Commit()
}

// claim claims ks in one committed transaction and returns the new ones in input order.
func (f *Fixture) Claim(ctx context.Context, scope string, ks []string) ([]string, error) {
	var got []string
	err := f.InTx(ctx, func(tx keys.Execer) error {
		got = got[:0]
		ok, err := f.K.Claim(ctx, tx, scope, ks...)
		if err != nil {
			return err
		}
		for i, b := range ok {
			if b {
				got = append(got, ks[i])
			}
		}
		return nil
	})
	return got, err
}
