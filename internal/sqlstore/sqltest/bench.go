package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/once-run/once/store/storetest"
)

// Floors are what a SQL store's lease round is measured against on the same server: a raw lock
// of the server (not durable) and two durable single-row writes (the floor for a durable acquire
// plus release).
type Floors struct {
	Lock   string                                      // the lock's name in metrics: "advisory", "getlock"
	LockOp func(ctx context.Context, db *sql.DB) error // one lock and unlock
	Upsert string                                      // the upsert of row %[2]d of table %[1]s (k INT, v BIGINT)
	DB     func(tb testing.TB, dsn string) *sql.DB     // a raw connection to the server
}

// BenchmarkFloors measures the floors, each with one client and with 16 contenders (one lock; the
// writers each write their own row). Reported: p50 and p99 of one round.
func BenchmarkFloors(b *testing.B, base string, f Floors) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("%s/c%d", f.Lock, n), func(b *testing.B) {
			storetest.RunContended(b, n, func(int) (storetest.Op, func()) { return lockOp(b, base, f) })
		})
		b.Run(fmt.Sprintf("twowrites/c%d", n), func(b *testing.B) {
			table := benchTable(b, base, f)
			storetest.RunContended(b, n, func(i int) (storetest.Op, func()) { return writesOp(b, base, table, i, f) })
		})
	}
}

// BenchmarkInterleaved runs one client of each kind (the store on dsn, the lock, the writes)
// round-robin, so that load from elsewhere on the machine hits all alike, and reports each p50/p99
// and the p50 ratios to two writes.
func BenchmarkInterleaved(b *testing.B, base, dsn string, f Floors) {
	st, done1 := storetest.LeaseRound(b, dsn, "h0")
	defer done1()
	lk, done2 := lockOp(b, base, f)
	defer done2()
	wr, done3 := writesOp(b, base, benchTable(b, base, f), 0, f)
	defer done3()
	storetest.RunInterleaved(b, []storetest.Named{{Name: "store", Op: st}, {Name: f.Lock, Op: lk}, {Name: "twowrites", Op: wr}})
}

func lockOp(b *testing.B, dsn string, f Floors) (storetest.Op, func()) {
	db := f.DB(b, dsn)
	return func(ctx context.Context) error { return f.LockOp(ctx, db) }, func() { db.Close() }
}

// writesOp is two durable single-row writes (autocommit upserts) by client i on its own row.
func writesOp(b *testing.B, dsn, table string, i int, f Floors) (storetest.Op, func()) {
	db := f.DB(b, dsn)
	up := fmt.Sprintf(f.Upsert, table, i)
	return func(ctx context.Context) error {
		if _, err := db.ExecContext(ctx, up); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, up)
		return err
	}, func() { db.Close() }
}

// benchTable creates a table for writesOp, dropped when b ends.
func benchTable(b *testing.B, dsn string, f Floors) string {
	table := "bench_w_" + storetest.RandHex(b)
	setup := f.DB(b, dsn)
	if _, err := setup.Exec("CREATE TABLE " + table + " (k INT PRIMARY KEY, v BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = setup.Exec("DROP TABLE " + table); setup.Close() })
	return table
}
