package keys_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/once-run/once/keys"
)

// Claim the flow ids of a batch in the transaction that writes their orders: a re-run, a concurrent
// run or a crash between the two can never write an order twice.
func ExampleKeys_Claim() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "keys-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "shop.db")))
	defer db.Close()
	_, _ = db.Exec(`CREATE TABLE orders (flow_id TEXT, amount INTEGER)`)

	k, _ := keys.New(keys.Options{Dialect: keys.SQLite})
	if err := k.Ensure(ctx, keys.SQL(db)); err != nil { // or run keys.Schema's DDL in a migration
		panic(err)
	}
	sync := func(flows []string) int {
		tx, _ := db.BeginTx(ctx, nil)
		defer tx.Rollback()
		fresh, err := k.Claim(ctx, keys.SQL(tx), "orders", flows...)
		if err != nil {
			panic(err)
		}
		n := 0
		for i, f := range flows {
			if fresh[i] {
				_, _ = tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, 100)`, f)
				n++
			}
		}
		_ = k.SaveCheckpoint(ctx, keys.SQL(tx), "sync", "2026-11-29", flows[len(flows)-1])
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		return n
	}
	fmt.Println(sync([]string{"f1", "f2", "f3"}))
	fmt.Println(sync([]string{"f2", "f3", "f4"})) // a re-run over an overlapping range
	cp, _, _ := k.LoadCheckpoint(ctx, keys.SQL(db), "sync", "2026-11-29")
	fmt.Println(cp)
	// Output:
	// 3
	// 1
	// f4
}

func ExampleSchema() {
	ddl, _ := keys.Schema(keys.Postgres, "")
	fmt.Print(ddl)
	// Output:
	// CREATE TABLE IF NOT EXISTS once_keys (
	//   scope       text   NOT NULL,
	//   ikey        text   NOT NULL,
	//   fingerprint text,
	//   created_ms  bigint NOT NULL,
	//   PRIMARY KEY (scope, ikey)
	// );
	//
	// CREATE TABLE IF NOT EXISTS once_keys_checkpoints (
	//   task       text   NOT NULL,
	//   slot       text   NOT NULL,
	//   value      text   NOT NULL,
	//   updated_ms bigint NOT NULL,
	//   PRIMARY KEY (task, slot)
	// );
}
