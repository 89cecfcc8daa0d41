// Command storeflow plays the seed's incident end to end against a database and prints each act:
// 3,000 flows synced into an orders table, the nightly run dying at two thirds, cron and a catch-up
// service launching the job at once, a review and re-run, two unguarded runs by hand, and the final
// count: 3,000 orders, no duplicate. With -naive the claims are skipped, as the seed's job did.
//
//	go run ./examples/storeflow/cmd/storeflow                        # SQLite in a temporary directory
//	go run ./examples/storeflow/cmd/storeflow -dialect postgres -dsn 'postgres://u:p@host/db'
//	go run ./examples/storeflow/cmd/storeflow -dialect mysql -dsn 'u:p@tcp(host:3306)/db'
//
// The guard's own ledger is an embedded once store in the temporary directory.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/once-run/once/examples/storeflow"
	"github.com/once-run/once/keys"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

func main() {
	dialect := flag.String("dialect", "sqlite", "postgres, mysql or sqlite")
	dsn := flag.String("dsn", "", "database/sql DSN of the orders database (default: a SQLite file in a temporary directory)")
	flows := flag.Int("flows", 3000, "flows to sync")
	naive := flag.Bool("naive", false, "skip the claims, like the seed's job")
	flag.Parse()
	if err := run(*dialect, *dsn, *flows, *naive); err != nil {
		fmt.Fprintln(os.Stderr, "storeflow:", err)
		os.Exit(1)
	}
}

func run(dialectName, dsn string, flows int, naive bool) error {
	ctx := context.Background()
	d, err := keys.ParseDialect(dialectName)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "storeflow")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	driver := map[keys.Dialect]string{keys.Postgres: "pgx", keys.MySQL: "mysql", keys.SQLite: "sqlite"}[d]
	if dsn == "" {
		if d != keys.SQLite {
			return fmt.Errorf("-dsn is required for %s", d)
		}
		dsn = "file:" + filepath.Join(dir, "shop.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	k, err := keys.New(keys.Options{Dialect: d, Table: "storeflow_keys"})
	if err != nil {
		return err
	}
	ledger := filepath.Join(dir, "once.db")
	guard, err := sqlite.Open(ctx, ledger, sqlite.Options{})
	if err != nil {
		return err
	}
	defer guard.Close()
	shop := &storeflow.Shop{DB: db, Dialect: d, Keys: k, Orders: "storeflow_orders", Naive: naive,
		Crash: storeflow.BetweenClaimAndWrite, CrashAt: flows * 2 / 3}
	// Start from empty tables so the count means this run.
	for _, t := range []string{"storeflow_orders", "storeflow_keys", "storeflow_keys_checkpoints"} {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t)
	}
	rep, err := storeflow.Run(ctx, storeflow.Story{Shop: shop, Guard: guard, Machine: func(ctx context.Context) (store.Store, error) {
		return sqlite.Open(ctx, ledger, sqlite.Options{})
	}, Flows: flows, Log: os.Stdout})
	if err != nil {
		return err
	}
	if rep.Rows != rep.Distinct {
		return fmt.Errorf("%d duplicate orders", rep.Rows-rep.Distinct)
	}
	return nil
}
