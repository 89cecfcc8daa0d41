package once_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

// Guard a function: at most one at a time across everything sharing the store, and at most once
// successfully per day.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "once-example")
	defer os.RemoveAll(dir)

	s, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "once.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	day, _ := slot.New("day", "", "", "UTC")
	opts := once.Options{Store: s, Task: "sync-orders", Slot: day.At(time.Now())}

	sync := func(ctx context.Context, run *once.Run) error {
		// ctx is cancelled if the lease is lost. run.Token is the fencing token; run.IdempotencyKey is
		// stable across attempts of this slot.
		fmt.Println("syncing, attempt", run.Attempt)
		return nil
	}
	for i := 0; i < 2; i++ {
		res, err := once.Do(ctx, opts, sync)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(res.Decision)
	}
	// Output:
	// syncing, attempt 1
	// ran
	// skipped
}
