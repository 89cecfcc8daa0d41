package scheduler_test

import (
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
)

// A job added by a reload with no history starts from its next slot: the first slot due after the
// reload has its record (it runs; on a node too loaded to fire it within late of its time, it is
// recorded missed), not swallowed by the account its first fire makes: a daily job added at 02:59
// for 03:00 first ran the next day, its first slot without a record.
func TestReloadAddedJobRunsItsFirstSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ticks := &witness{}
	tick := workJob("tick", "@every 1s", ticks.work(0))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{tick}})
	// Run runs (a reload before it is the jobs it starts with, accounted as on start).
	eventually(t, 20*time.Second, "the node fires", func() bool { r, _ := ticks.snapshot(); return len(r) > 0 })
	w := &witness{}
	j := workJob("fresh", "@every 2s", w.work(0))
	sp, _ := j.Spec()
	// Reload just after a slot starts, so that the next slot is more than a second away.
	time.Sleep(time.Until(sp.Next(time.Now()).Start.Add(100 * time.Millisecond)))
	first := sp.Next(time.Now())
	if err := n.s.Reload([]scheduler.Job{tick, j}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a record of the added job's first slot "+first.Value, func() bool {
		for _, e := range f.history("fresh") {
			if e.Slot == first.Value {
				return true
			}
		}
		return false
	})
	if runs, _ := w.snapshot(); len(runs) > 0 && runs[0].Slot != first.Value {
		t.Fatalf("the added job's first run is slot %s; want %s (history %+v)", runs[0].Slot, first.Value, f.history("fresh"))
	}
}
