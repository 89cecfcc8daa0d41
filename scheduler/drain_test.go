package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
)

// A Work function that ignores its context cannot be stopped: Run returns its grace after the
// drain stopped it, with an error naming the job, instead of waiting for it for ever.
func TestDrainWorkIgnoringItsContext(t *testing.T) {
	f := newFleet(t, 1)
	started := make(chan struct{}, 1)
	block := make(chan struct{})
	defer close(block)
	sch, err := scheduler.New(scheduler.Config{Store: f.stores[0], Drain: 200 * time.Millisecond, Grace: 300 * time.Millisecond,
		Jobs: []scheduler.Job{{Job: jobfile.Job{Name: "stubborn", Schedule: "* * * * * *", TZ: "UTC"},
			Work: func(context.Context, *once.Run) error {
				select {
				case started <- struct{}{}:
				default:
				}
				<-block // not ctx.Done()
				return nil
			}}}})
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
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stubborn") || !strings.Contains(err.Error(), "context") {
			t.Fatalf("Run = %v, want an error naming the job whose Work ignores its context", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context ended (drain 200ms, grace 300ms)")
	}
}

// A program's own job is held to the bounds of a jobs file's (jobfile.Job.Check): a misspelt
// on-unknown failed every launch of the job (each slot then recorded missed), a misspelt overlap
// ran as skip, and a TTL the guard refuses failed every launch too. Zero values are the defaults.
func TestNewRefusesJobsOutOfBounds(t *testing.T) {
	f := newFleet(t, 1)
	bad := map[string]func(*scheduler.Job){
		"OnUnknown": func(j *scheduler.Job) { j.OnUnknown = "Rerun" },
		"Overlap":   func(j *scheduler.Job) { j.Overlap = "replce" },
		"TTL":       func(j *scheduler.Job) { j.TTL = 100 * time.Millisecond },
		"Jitter":    func(j *scheduler.Job) { j.Jitter = -time.Second },
		"Grace":     func(j *scheduler.Job) { j.Grace = -time.Second },
		"Timeout":   func(j *scheduler.Job) { j.Timeout = -time.Second },
		"CatchUp":   func(j *scheduler.Job) { j.CatchUp = -time.Hour },
		"MaxAttempts": func(j *scheduler.Job) {
			j.MaxAttempts = -1
		},
		"CatchUpMax": func(j *scheduler.Job) { j.CatchUpMax = -1 },
		"Name":       func(j *scheduler.Job) { j.Name = "" }, // it said "set Options.Task"
	}
	for field, set := range bad {
		j := workJob("a", "@daily", (&witness{}).work(0))
		set(&j)
		_, err := scheduler.New(scheduler.Config{Store: f.stores[0], Jobs: []scheduler.Job{j}})
		if !errors.Is(err, once.ErrInvalid) || !strings.Contains(err.Error(), "Job."+field) {
			t.Errorf("%s: New = %v, want ErrInvalid naming Job.%s", field, err, field)
		}
	}
	j := scheduler.Job{Job: jobfile.Job{Name: "zero", Schedule: "@daily"}, Work: (&witness{}).work(0)}
	if _, err := scheduler.New(scheduler.Config{Store: f.stores[0], Jobs: []scheduler.Job{j}}); err != nil {
		t.Fatalf("a job with every option at its zero value: %v", err)
	}
}

// A Scheduler runs once: a second Run fired nothing for as long as it ran and returned nil, so a
// program that ran its scheduler again (a restart loop) silently ran no job.
func TestRunTwiceRefused(t *testing.T) {
	f := newFleet(t, 1)
	sch, err := scheduler.New(scheduler.Config{Store: f.stores[0], Jobs: []scheduler.Job{workJob("a", "@daily", (&witness{}).work(0))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sch.Run(ctx); err != nil {
		t.Fatalf("first Run: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := sch.Run(ctx2); !errors.Is(err, once.ErrInvalid) || ctx2.Err() != nil {
		t.Fatalf("second Run = %v (context %v), want ErrInvalid at once", err, ctx2.Err())
	}
}
