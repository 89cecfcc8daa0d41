package storeflow_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/examples/storeflow"
	"github.com/once-run/once/internal/keystest"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// guardStore is the guard's ledger, an embedded once store, and the opener of the nightly
// machine's own handle on it.
func guardStore(t *testing.T) (store.Store, func(context.Context) (store.Store, error)) {
	path := filepath.Join(t.TempDir(), "once.db")
	guard, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guard.Close() })
	return guard, func(ctx context.Context) (store.Store, error) { return sqlite.Open(ctx, path, sqlite.Options{}) }
}

// TestStoreFlow plays the seed's incident (this example) with a crash injected at row 2,000
// at every point of a batch's transaction, on every backend: 3,000 flows must end as 3,000 orders
// with no duplicate, whatever the crash point, the two concurrent launches, the re-run after review
// and two unguarded runs by hand.
func TestStoreFlow(t *testing.T) {
	for _, b := range keystest.Backends() {
		if b.Pgx {
			continue // the example uses database/sql; pgx is covered by the claim tests
		}
		t.Run(b.Name, func(t *testing.T) {
			for _, tc := range []struct {
				crash      storeflow.Crash
				checkpoint bool
			}{
				{storeflow.BeforeClaim, false},
				{storeflow.BetweenClaimAndWrite, false},
				{storeflow.AfterWrite, false},
				{storeflow.AfterCommit, false},
				{storeflow.BetweenClaimAndWrite, true},
				{storeflow.AfterCommit, true},
			} {
				name := tc.crash.String()
				if tc.checkpoint {
					name += " with checkpoint"
				}
				t.Run(name, func(t *testing.T) {
					f := keystest.NewFixture(t, b)
					ctx := keystest.Context(t, 2*time.Minute)
					guard, machine := guardStore(t)
					orders := f.Table + "_orders"
					t.Cleanup(func() { _, _ = f.DB.Exec("DROP TABLE IF EXISTS " + orders) })
					shop := &storeflow.Shop{DB: f.DB, Dialect: b.Dialect, Keys: f.K, Orders: orders,
						Checkpoint: tc.checkpoint, Crash: tc.crash, CrashAt: 2000}
					rep, err := storeflow.Run(ctx, storeflow.Story{Shop: shop, Guard: guard, Machine: machine, Flows: 3000})
					if err != nil {
						t.Fatal(err)
					}
					if rep.Crashed == nil || rep.Crashed.At != tc.crash {
						t.Fatalf("crash = %v, want %s", rep.Crashed, tc.crash)
					}
					// Act 2: neither launch runs the slot (it waits for review); at most one is busy.
					for _, d := range rep.Launches {
						if d != once.Review && d != once.Busy {
							t.Fatalf("act 2 launches = %v, want review/busy", rep.Launches)
						}
					}
					// Act 3: exactly one re-run, the other busy; it writes what the crash lost.
					if !(rep.Rerun[0] == once.Ran && rep.Rerun[1] == once.Busy || rep.Rerun[0] == once.Busy && rep.Rerun[1] == once.Ran) {
						t.Fatalf("act 3 = %v, want one ran and one busy", rep.Rerun)
					}
					committed := 1900
					if tc.crash == storeflow.AfterCommit {
						committed = 2000
					}
					if rep.RerunWrote != 3000-committed {
						t.Fatalf("re-run wrote %d orders, want %d", rep.RerunWrote, 3000-committed)
					}
					if rep.ByHandWrote != 0 {
						t.Fatalf("unguarded runs by hand wrote %d orders, want 0", rep.ByHandWrote)
					}
					if rep.Rows != 3000 || rep.Distinct != 3000 {
						t.Fatalf("end: %d orders, %d distinct flows; want 3000 and 3000", rep.Rows, rep.Distinct)
					}
				})
			}
		})
	}
}

// TestStoreFlowNaive is the control: the same story without the claims duplicates orders, so the
// test above would see a duplicate if the claims failed.
func TestStoreFlowNaive(t *testing.T) {
	f := keystest.NewFixture(t, keystest.Backends()[0])
	ctx := keystest.Context(t, time.Minute)
	guard, machine := guardStore(t)
	shop := &storeflow.Shop{DB: f.DB, Dialect: f.B.Dialect, Keys: f.K, Naive: true, Crash: storeflow.AfterCommit, CrashAt: 2000}
	rep, err := storeflow.Run(ctx, storeflow.Story{Shop: shop, Guard: guard, Machine: machine})
	if err != nil {
		t.Fatal(err)
	}
	// The re-run rewrites the 2,000 committed flows; two runs by hand write 3,000 each.
	if rep.Distinct != 3000 || rep.Rows != 3000+2000+6000 {
		t.Fatalf("naive: %d orders, %d distinct; want 11000 and 3000", rep.Rows, rep.Distinct)
	}
}
