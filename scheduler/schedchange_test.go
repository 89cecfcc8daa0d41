package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// A job whose schedule was made finer (every 10 s, then every second: an hourly job made
// every-minute) restarts right after the old schedule's newest slot. The new schedule's slots
// between two entries of the old one were never due: no node queued them. They are not holes: none
// runs (a catch-up window) and none is recorded missed (without one), whatever the job's overlap.
// The same holds for a job removed for a while and added back, or one with the name of an old task.
func TestScheduleMadeFinerLeavesNoHoles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, overlap string
		catchUp       bool
	}{{"buffer-one", "buffer-one", false}, {"buffer-one+catch-up", "buffer-one", true}, {"catch-up", "", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 1)
			ctx := context.Background()
			old, _ := workJob("finer", "@every 10s", nil).Spec()
			s0 := old.Next(time.Now().Add(time.Second)) // the old schedule's newest slot: the restart follows it
			var seeded []slot.Slot
			for sl := s0; len(seeded) < 20; sl = old.Prev(sl.Start.Add(-time.Nanosecond)) {
				seeded = append(seeded, sl)
			}
			for i := len(seeded) - 1; i >= 0; i-- { // oldest first, as they ran
				if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "finer", Slot: seeded[i].Value, TTL: time.Second},
					func(context.Context, *once.Run) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Until(s0.Start))
			w := &witness{}
			j := workJob("finer", "@every 1s", w.work(10*time.Millisecond))
			j.Overlap = c.overlap
			if c.catchUp {
				j.CatchUp, j.CatchUpMax = time.Hour, 100
			}
			n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
			// By the new schedule's fourth run the start's account is long done (it precedes the
			// first fire), its catch-up would have run, and a followed-up hole (three polls) would
			// be recorded.
			eventually(t, 30*time.Second, "four runs of the new schedule", func() bool {
				r, _ := w.snapshot()
				n := 0
				for _, run := range r {
					if ts, err := time.Parse(time.RFC3339, run.Slot); err == nil && !ts.Before(s0.Start) {
						n++
					}
				}
				return n >= 4
			})
			n.stop()
			runs, _ := w.snapshot()
			for _, r := range runs {
				if ts, err := time.Parse(time.RFC3339, r.Slot); err == nil && ts.Before(s0.Start) {
					t.Errorf("slot %s ran: it lies between two slots of the old schedule, never due", r.Slot)
				}
			}
			for _, e := range f.history("finer") {
				if e.State == store.Missed {
					t.Errorf("slot %s recorded missed (%s): never due", e.Slot, e.Note)
				}
			}
		})
	}
}
