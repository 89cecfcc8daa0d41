package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// A program that schedules its own jobs on every node of a fleet: a Go function every five
// minutes and a command each night, each slot run once across the fleet through the store. (A
// program that runs commands must run the supervision shim first thing in main: see package job.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s, err := store.Open(ctx, os.Getenv("ONCE_STORE")) // e.g. postgres://once@db/once
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	sch, err := scheduler.New(scheduler.Config{Store: s, Drain: time.Minute, Jobs: []scheduler.Job{
		{Job: jobfile.Job{Name: "refresh-cache", Schedule: "*/5 * * * *", TZ: "UTC", OnUnknown: "rerun"},
			Work: func(ctx context.Context, run *once.Run) error {
				fmt.Println("refreshing for slot", run.Slot, "with token", run.Token)
				return nil
			}},
		{Job: jobfile.Job{Name: "nightly-report", Schedule: "0 2 * * *", TZ: "Europe/Berlin",
			Command: []string{"/usr/local/bin/report"}, CatchUp: 24 * time.Hour, Timeout: time.Hour}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = sch.Run(ctx) // until SIGTERM, then a drain of at most a minute
}
