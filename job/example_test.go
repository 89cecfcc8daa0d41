package job_test

import (
	"context"
	"fmt"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Run a command at most once per day under the guard, as a scheduler would for each launch. The
// program must run the shim when started as one (see the package comment).
func Example() {
	ctx := context.Background()
	s, err := store.Open(ctx, "sqlite:///var/lib/myscheduler/once.db")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	r, err := job.New(job.Job{Args: []string{"/usr/local/bin/sync-orders"}, Grace: 10 * time.Second})
	if err != nil {
		fmt.Println("cannot run it:", err) // nothing was recorded
		return
	}
	defer r.Close()
	day, _ := slot.New("day", "", "", "UTC")
	res, err := r.Do(ctx, once.Options{Store: s, Task: "sync-orders", Slot: day.At(time.Now())})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Decision)
}
