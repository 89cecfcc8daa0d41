package scheduler_test

import (
	"context"

	"github.com/once-run/once"
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
)

// A job added by a reload with no history runs from its next slot: the first slot due after the
// reload is run, not swallowed by the account its first fire makes (a daily job added at 02:59
// for 03:00 would otherwise first run the next day, its first slot without a record).
func TestReloadAddedJobRunsItsFirstSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	tick := workJob("tick", "@every 1s", func(ctx context.Context, _ *once.Run) error { return nil })
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{tick}})
	j := workJob("fresh", "@every 2s", w.work(0))
	sp, _ := j.Spec()
	// Reload just after a slot starts, so that the next slot is more than a second away.
	time.Sleep(time.Until(sp.Next(time.Now()).Start.Add(100 * time.Millisecond)))
	added := time.Now()
	if err := n.s.Reload([]scheduler.Job{tick, j}); err != nil {
		t.Fatal(err)
	}
	first := sp.Next(added)
	eventually(t, 15*time.Second, "the added job runs", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	runs, _ := w.snapshot()
	if runs[0].Slot != first.Value {
		t.Fatalf("the added job's first run is slot %s; want its first slot after the reload, %s (history %+v)", runs[0].Slot, first.Value, f.history("fresh"))
	}
}
