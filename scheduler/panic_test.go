package scheduler_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// A Work function that panics fails its own attempt and nothing else: the node goes on running
// its jobs. The panic went on up the launch's goroutine and ended the process, so every other
// job's attempt running then was left running, and read as unknown (review) by the next holder.
func TestWorkPanicFailsOnlyItsAttempt(t *testing.T) {
	f := newFleet(t, 1)
	longStarted := make(chan struct{}, 1)
	panicked := make(chan struct{}, 1)
	long := workJob("long-panic-peer", "* * * * * *", func(ctx context.Context, _ *once.Run) error {
		select {
		case longStarted <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	bad := workJob("panics", "* * * * * *", func(ctx context.Context, _ *once.Run) error {
		select {
		case <-longStarted:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case panicked <- struct{}{}:
		default:
		}
		panic("boom")
	})
	n := f.start(0, scheduler.Config{Drain: 5 * time.Second, Jobs: []scheduler.Job{long, bad}})
	select {
	case <-panicked:
	case <-time.After(20 * time.Second):
		t.Fatal("the panicking job did not run")
	}
	f.awaitHistory("panics", 10*time.Second, func(h []store.Entry) bool {
		return len(h) > 0 && h[len(h)-1].State == store.Failed
	})
	n.stop() // the node is alive: it drains, and the other job's attempt ends recorded
	var failed bool
	for _, e := range f.history("panics") {
		failed = failed || e.State == store.Failed && strings.Contains(e.Note, "the work panicked: boom")
	}
	if !failed {
		t.Fatalf("history of the panicking job: %+v; want a failed attempt noting the panic", f.history("panics"))
	}
	for _, e := range f.history("long-panic-peer") {
		if e.State == store.Running {
			t.Fatalf("the other job's attempt was left running: %+v", e)
		}
	}
}

// A Work function that calls runtime.Goexit (t.FailNow inside it) fails its own attempt, noting
// it, and the job goes on being launched: the Goexit ended the launch's goroutine, which left the
// attempt running and the launch active for ever, so the job never ran again on that node.
func TestWorkGoexitFailsOnlyItsAttempt(t *testing.T) {
	f := newFleet(t, 1)
	var calls atomic.Int32
	j := workJob("goexits", "* * * * * *", func(context.Context, *once.Run) error {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		return nil
	})
	n := f.start(0, scheduler.Config{Drain: 5 * time.Second, Jobs: []scheduler.Job{j}})
	ran := func(h []store.Entry) (failed, succeeded bool) {
		for _, e := range h {
			failed = failed || e.State == store.Failed && e.Note == once.GoexitNote
			succeeded = succeeded || e.State == store.Succeeded
		}
		return failed, succeeded
	}
	f.awaitHistory("goexits", 20*time.Second, func(h []store.Entry) bool {
		failed, succeeded := ran(h)
		return failed && succeeded
	})
	n.stop()
	h := f.history("goexits")
	if failed, succeeded := ran(h); !failed || !succeeded {
		t.Fatalf("history %+v: want a failed attempt noting %q, then a later slot run and succeeded", h, once.GoexitNote)
	}
	for _, e := range h {
		if e.State == store.Running {
			t.Fatalf("an attempt was left running: %+v", e)
		}
	}
}

// The grace a drain gives a Work launch is that of the definition it runs: a job reloaded under
// its name as a command job while its Work ran was no longer seen as a Work job, and Run waited
// for the Work that ignores its context for ever.
func TestDrainWorkOfAReloadedJob(t *testing.T) {
	f := newFleet(t, 1)
	started := make(chan struct{}, 1)
	block := make(chan struct{})
	defer close(block)
	stubborn := scheduler.Job{Job: jobfile.Job{Name: "flips", Schedule: "* * * * * *", TZ: "UTC"},
		Work: func(context.Context, *once.Run) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-block // not ctx.Done()
			return nil
		}}
	sch, err := scheduler.New(scheduler.Config{Store: f.stores[0], Drain: 200 * time.Millisecond, Grace: 300 * time.Millisecond,
		Jobs: []scheduler.Job{stubborn}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if err := sch.Reload([]scheduler.Job{{Job: jobfile.Job{Name: "flips", Schedule: "@daily", TZ: "UTC", Command: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "flips") {
			t.Fatalf("Run = %v, want an error naming the job whose Work ignores its context", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context ended (drain 200ms, grace 300ms)")
	}
}
