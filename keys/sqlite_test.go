package keys_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/internal/keystest"
	"github.com/once-run/once/keys"
)

// TestSQLiteAfterAllOld: after an all-old batch, a SQLite claim first looks for the batch's missing
// keys and inserts only those; the results are the same as the one-statement claim's, in batches,
// with in-call duplicates and with fingerprints, and the next batch with new keys claims in one
// statement again.
func TestSQLiteAfterAllOld(t *testing.T) {
	b := keystest.Backends()[0]
	f := keystest.NewFixture(t, b)
	ctx := ctxT(t, time.Minute)
	var err error
	if f.K, err = keys.New(keys.Options{Dialect: keys.SQLite, Table: f.Table, Batch: 10}); err != nil {
		t.Fatal(err)
	}
	all := seq("k", 0, 50)
	if got, err := f.Claim(ctx, "s", all[:30]); err != nil || !slices.Equal(got, all[:30]) {
		t.Fatalf("first = %q, %v", got, err)
	}
	if keys.SQLiteProbing(f.K) {
		t.Fatal("probing after a batch of new keys")
	}
	if got, err := f.Claim(ctx, "s", all[:30]); err != nil || len(got) != 0 {
		t.Fatalf("again = %q, %v", got, err)
	}
	if !keys.SQLiteProbing(f.K) {
		t.Fatal("not probing after all-old batches")
	}
	// Sorted, the first batch is all old, the second has 5 new keys, the third all new; in-call
	// duplicates count once.
	in := append(slices.Clone(all[20:45]), all[44], all[21], "k0000030")
	got, err := f.Claim(ctx, "s", in)
	if want := all[30:45]; err != nil || !slices.Equal(got, want) {
		t.Fatalf("mixed = %q, %v; want %q", got, err, want)
	}
	if keys.SQLiteProbing(f.K) {
		t.Fatal("probing after a batch of new keys")
	}
	// Fingerprints on the probe's path: the same one is old, another one is ErrFingerprint, a new
	// key stores its own.
	fa, fb := keys.Fingerprint([]byte("a")), keys.Fingerprint([]byte("b"))
	claim := func(items ...keys.Item) ([]bool, error) {
		var ok []bool
		err := f.InTx(ctx, func(tx keys.Execer) error {
			var err error
			ok, err = f.K.ClaimItems(ctx, tx, "p", items)
			return err
		})
		return ok, err
	}
	if ok, err := claim(keys.Item{Key: "x", Fingerprint: fa}); err != nil || !ok[0] {
		t.Fatalf("x = %v, %v", ok, err)
	}
	if ok, err := claim(keys.Item{Key: "x", Fingerprint: fa}); err != nil || ok[0] || !keys.SQLiteProbing(f.K) {
		t.Fatalf("x again = %v, %v", ok, err)
	}
	ok, err := claim(keys.Item{Key: "y", Fingerprint: fb}, keys.Item{Key: "x", Fingerprint: fb})
	var fe *keys.FingerprintError
	if !errors.As(err, &fe) || fe.Key != "x" || fe.Stored != fa {
		t.Fatalf("x with another fingerprint = %v, %v", ok, err)
	}
	if ok, err := claim(keys.Item{Key: "x", Fingerprint: fa}); err != nil || ok[0] || !keys.SQLiteProbing(f.K) {
		t.Fatalf("x = %v, %v", ok, err)
	}
	if ok, err := claim(keys.Item{Key: "z", Fingerprint: fb}, keys.Item{Key: "x", Fingerprint: fa}); err != nil || !ok[0] || ok[1] {
		t.Fatalf("z, x = %v, %v", ok, err)
	}
	if _, err := claim(keys.Item{Key: "z", Fingerprint: fa}); !errors.As(err, &fe) || fe.Key != "z" || fe.Stored != fb {
		t.Fatalf("z with another fingerprint = %v", err)
	}
}

// TestSQLiteProbeWaitsForWriter: in a deferred transaction (no _txlock=immediate), a claim after an
// all-old batch waits for another transaction's uncommitted claim of a key, as the one-statement
// claim does, and then finds that key old: the probe takes the write lock before it reads. Had it
// read first, its snapshot would predate the other commit and the INSERT of the key it found missing
// would fail (SQLITE_BUSY) instead of waiting.
//
// In both journal modes: WAL, and the rollback journal (DELETE), where the lock is RESERVED.
func TestSQLiteProbeWaitsForWriter(t *testing.T) {
	for _, mode := range []string{"WAL", "DELETE"} {
		t.Run(mode, func(t *testing.T) { probeWaitsForWriter(t, mode) })
	}
}

func probeWaitsForWriter(t *testing.T, mode string) {
	path := filepath.Join(t.TempDir(), "app.db")
	dsn := strings.Replace(keystest.SQLiteDSN(path), "&_txlock=immediate", "", 1)
	dsn = strings.Replace(dsn, "journal_mode(WAL)", "journal_mode("+mode+")", 1)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := ctxT(t, time.Minute)
	var jm string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&jm); err != nil || !strings.EqualFold(jm, mode) {
		t.Fatalf("journal_mode = %q, %v; want %s", jm, err, mode)
	}
	k, err := keys.New(keys.Options{Dialect: keys.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Ensure(ctx, keys.SQL(db)); err != nil {
		t.Fatal(err)
	}
	claim := func(tx *sql.Tx, ks ...string) []bool {
		ok, err := k.Claim(ctx, keys.SQL(tx), "w", ks...)
		if err != nil {
			t.Error(err)
		}
		return ok
	}
	for range 2 { // "a" new, then all old: the next claim probes
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		claim(tx, "a")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if !keys.SQLiteProbing(k) {
		t.Fatal("not probing after an all-old batch")
	}
	first, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback() //nolint:errcheck // committed below
	if _, err := first.ExecContext(ctx, "INSERT INTO once_keys (scope, ikey, created_ms) VALUES ('w', 'x', 0)"); err != nil {
		t.Fatal(err)
	}
	type res struct {
		ok  []bool
		err error
	}
	done := make(chan res, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			done <- res{nil, err}
			return
		}
		defer tx.Rollback() //nolint:errcheck // committed below
		ok, err := k.Claim(ctx, keys.SQL(tx), "w", "a", "x", "y")
		if err == nil {
			err = tx.Commit()
		}
		done <- res{ok, err}
	}()
	time.Sleep(300 * time.Millisecond) // the claim waits for the write lock (busy_timeout 10 s)
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !slices.Equal(r.ok, []bool{false, false, true}) {
		t.Fatalf("claim of a, x, y after the other commit of x = %v, %v; want [false false true]", r.ok, r.err)
	}
}

// TestSQLiteProbeConcurrent: claimers of overlapping sets on the probe's path, in deferred
// transactions (no _txlock=immediate) and out of any transaction (each statement on its own, maybe
// on another connection of the pool), claim their union exactly once; a rolled-back claim is none.
func TestSQLiteProbeConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", strings.Replace(keystest.SQLiteDSN(path), "&_txlock=immediate", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := ctxT(t, 5*time.Minute)
	k, err := keys.New(keys.Options{Dialect: keys.SQLite, Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Ensure(ctx, keys.SQL(db)); err != nil {
		t.Fatal(err)
	}
	all := seq("k", 0, 400)
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i+40 <= len(all); i += 13 {
				set := all[i : i+40]
				keys.SetSQLiteProbing(k, true)
				var ok []bool
				var err error
				rollback := i%5 == 0
				if g%2 == 0 && !rollback {
					ok, err = k.Claim(ctx, keys.SQL(db), "c", set...)
				} else {
					var tx *sql.Tx
					if tx, err = db.BeginTx(ctx, nil); err == nil {
						if ok, err = k.Claim(ctx, keys.SQL(tx), "c", set...); err == nil && !rollback {
							err = tx.Commit()
						} else {
							_ = tx.Rollback()
						}
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				if rollback {
					continue
				}
				mu.Lock()
				for j, b := range ok {
					if b {
						count[set[j]]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM once_keys WHERE scope = 'c'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(count) {
		t.Fatalf("table holds %d keys, claims reported %d new", n, len(count))
	}
	for key, c := range count {
		if c != 1 {
			t.Fatalf("key %s claimed %d times", key, c)
		}
	}
}
