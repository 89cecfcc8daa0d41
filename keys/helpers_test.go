package keys_test

import (
	"context"
	"database/sql"
	"fmt"
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

// backend is one database the tests run against: SQLite always, PostgreSQL (database/sql and pgx)
// and MySQL/MariaDB when ONCE_TEST_POSTGRES / ONCE_TEST_MYSQL are set.
type backend struct {
	name    string
	dialect keys.Dialect
	// open returns a fresh database/sql handle and a pgx pool (PostgreSQL only, else nil).
	open func(t testing.TB) (*sql.DB, *pgxpool.Pool)
	pgx  bool // use the pgx adapter instead of database/sql
}

func backends() []backend {
	return []backend{
		{name: "sqlite", dialect: keys.SQLite, open: openSQLite},
		{name: "postgres", dialect: keys.Postgres, open: openPostgres},
		{name: "pgx", dialect: keys.Postgres, open: openPostgres, pgx: true},
		{name: "mysql", dialect: keys.MySQL, open: openMySQL},
	}
}

// SQLiteDSN is how SQLite should be opened for concurrent claimers: WAL, a busy timeout, and
// BEGIN IMMEDIATE so a transaction takes the write lock up front instead of failing on upgrade.
func sqliteDSN(path string) string {
	path = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) // a URI path
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=cache_size(-65536)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

func openSQLite(t testing.TB) (*sql.DB, *pgxpool.Pool) {
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "app.db")))
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

// fixture is an opened backend with a fresh keys table.
type fixture struct {
	b     backend
	db    *sql.DB
	pool  *pgxpool.Pool
	k     *keys.Keys
	table string
}

func newFixture(t testing.TB, b backend) *fixture {
	db, pool := b.open(t)
	f := &fixture{b: b, db: db, pool: pool, table: "k" + storetest.RandHex(t)}
	var err error
	f.k, err = keys.New(keys.Options{Dialect: b.dialect, Table: f.table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	if err := f.k.Ensure(ctx, keys.SQL(db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{f.table, f.table + "_checkpoints"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + tb)
		}
	})
	return f
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// inTx runs fn in a transaction of the fixture's adapter and commits when fn returns nil.
func (f *fixture) inTx(ctx context.Context, fn func(tx keys.Execer) error) error {
	if f.b.pgx {
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
		if err := fn(keys.Pgx(tx)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	tx, err := f.db.BeginTx(ctx, nil)
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
func (f *fixture) claim(ctx context.Context, scope string, ks []string) ([]string, error) {
	var got []string
	err := f.inTx(ctx, func(tx keys.Execer) error {
		got = got[:0]
		ok, err := f.k.Claim(ctx, tx, scope, ks...)
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

func seq(prefix string, lo, hi int) []string {
	out := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, fmt.Sprintf("%s%07d", prefix, i))
	}
	return out
}
