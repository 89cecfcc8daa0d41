package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/store"
)

// TestBehindIsBounded: the slots of a catch-up window behind the task's newest entries whose
// queued marks a start looks up are as many as one catch-up queues and behindMargin more, at most
// maxBehind, newest first and none named in the entries; none when the window ends before them,
// or when the entries are the task's whole history.
func TestBehindIsBounded(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 30, 0, 0, time.UTC)
	jb := Job{Job: jobfile.Job{Name: "every-minute", Schedule: "* * * * *", TZ: "UTC", Overlap: "skip"}}
	spec, err := jb.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var h []store.Entry // the newest 20 entries: the last 20 minutes' fires, on time
	for i := range newestEntries {
		sl := spec.Prev(now.Add(-time.Duration(i) * time.Minute))
		h = append(h, store.Entry{Attempt: store.Attempt{Task: jb.Name, Slot: sl.Value, StartedAt: sl.Start.Add(time.Second)}})
	}
	last, _ := spec.Parse(h[0].Slot)
	for _, c := range []struct {
		window   time.Duration
		most     int
		whole    bool
		want     int
		wantNote string
	}{
		{24 * time.Hour, 1, false, 1 + behindMargin, "the default catch-up-max"},
		{24 * time.Hour, 500, false, 500 + behindMargin, "a long catch-up"},
		{24 * time.Hour, 10_000, false, maxBehind, "at most maxBehind"},
		{10 * time.Minute, 100, false, 0, "a window that ends before the entries"},
		{30 * time.Minute, 100, false, 10, "the slots of the window behind the entries"},
		{24 * time.Hour, 100, true, 0, "the whole history"},
	} {
		t.Run(c.wantNote, func(t *testing.T) {
			j := jb
			j.CatchUp, j.CatchUpMax = c.window, c.most
			_, behind := findHoles(j, spec, h, c.whole, last, now, 2*time.Second, time.Second)
			if len(behind) != c.want {
				t.Fatalf("%d slots behind; want %d", len(behind), c.want)
			}
			named := map[string]bool{}
			for _, e := range h {
				named[e.Slot] = true
			}
			for i, sl := range behind {
				if named[sl.Value] || i > 0 && !sl.Start.Before(behind[i-1].Start) || !sl.Start.After(now.Add(-c.window)) {
					t.Fatalf("slot %d of behind, %s: named in the entries, out of order or outside the window: %v", i, sl.Value, fmt.Sprint(behind[:i+1]))
				}
			}
		})
	}
}
