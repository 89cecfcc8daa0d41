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
		catchUp, long bool
	}{{"buffer-one", "buffer-one", false, false}, {"buffer-one+catch-up", "buffer-one", true, false}, {"catch-up", "", true, false},
		{"buffer-one/long-runs", "buffer-one", false, true}, {"buffer-one+catch-up/long-runs", "buffer-one", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 1)
			var s0 slot.Slot
			if c.long {
				s0 = ranOldSchedule(t, f)
			} else {
				s0 = seedOldSchedule(t, f)
			}
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
				if ts, err := time.Parse(time.RFC3339, e.Slot); err == nil && ts.Before(s0.Start) && e.State == store.Missed {
					t.Errorf("slot %s recorded missed (%s): never due", e.Slot, e.Note)
				}
			}
		})
	}
}

// seedOldSchedule records 20 slots of an every-10-seconds schedule, the newest of them due at
// once, waits for it, and returns it.
func seedOldSchedule(t *testing.T, f *fleet) slot.Slot {
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
	return s0
}

// ranOldSchedule runs the job every 10 s, each run 2.5 s long (it still runs as the next seconds
// of a finer schedule fire), stops it after two runs and returns its newest slot.
func ranOldSchedule(t *testing.T, f *fleet) slot.Slot {
	j := workJob("finer", "@every 10s", (&witness{}).work(2500*time.Millisecond))
	j.Overlap = "buffer-one"
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	f.awaitHistory("finer", 60*time.Second, func(h []store.Entry) bool { return count(h, store.Succeeded, "") >= 2 })
	n.stop()
	sp, _ := j.Spec()
	var s0 slot.Slot
	for _, e := range f.history("finer") {
		if ts, err := sp.Parse(e.Slot); err == nil && ts.After(s0.Start) {
			s0 = slot.Slot{Value: e.Slot, Start: ts}
		}
	}
	if s0.Value == "" {
		t.Fatal("the old schedule ran nothing")
	}
	return s0
}
