package scheduler

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// recordHoles follows up the newest watchedHoles of a job's holes (a live node that queued or
// follows one may still run it) and records the older ones missed at once when no node holds the
// job's lease. The account of a paused job handed it its holes newest first (allHoles), as they
// come for findGap, where it wants them oldest first: the newest were recorded missed at once and
// the oldest followed up. The running account (findGap's g.holes, oldest first) did it right.
// Twelve marked catch-up slots behind the newest run, none run: the oldest four are recorded
// missed by the account, the newest eight are followed up, on both paths.
func TestHoleOrderPausedOrNot(t *testing.T) {
	t.Parallel()
	for _, paused := range []bool{false, true} {
		name := map[bool]string{false: "running", true: "paused"}[paused]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holeOrder(t, paused)
		})
	}
}

func holeOrder(t *testing.T, paused bool) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := newClaimRig(t, &gate{keyed: st.(keyed)})
	// The slot 13 hours ago and the newest ran; the 12 between were queued (marked) and lost.
	holes := make([]string, 12) // oldest first
	for i := range holes {
		holes[i] = r.slot(12 - i)
	}
	r.s.markQueued(ctx, r.jb.Name, holes)
	for _, sl := range []string{r.slot(13), r.slot(0)} {
		if err := r.follow(sl); err != nil {
			t.Fatal(err)
		}
	}
	jb := r.jb
	jb.CatchUp, jb.CatchUpMax = 30*time.Minute, 1 // the holes are all outside the window
	now := time.Now()
	s2, err := New(Config{Store: st, Jobs: []Job{jb}, Node: "nodeB", Poll: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if paused {
		if ok, _, err := Pause(ctx, st, jb.Name, "ops", "holes"); err != nil || !ok {
			t.Fatalf("Pause: %v %v", ok, err)
		}
		s2.pollControl(ctx)
		if _, ok := s2.isPaused(jb.Name); !ok {
			t.Fatal("the node does not see the pause")
		}
	}
	js := s2.jobs[jb.Name]
	s2.account(ctx, js, now)
	s2.runs.Wait()
	s2.writes.Wait()
	if n := r.ran.Load(); n != 2 {
		t.Fatalf("the work ran %d times; want 2 (the holes are outside the catch-up window)", n)
	}
	cut := len(holes) - watchedHoles
	for i, sl := range holes {
		a, m := r.entries(sl)
		js.mu.Lock()
		w := js.watches[sl]
		js.mu.Unlock()
		followed := w != nil && w.missed && w.skipNote == holeNote
		switch {
		case i < cut && (a != 0 || m != 1 || followed):
			t.Errorf("hole %d of %d (oldest first) %s: %d attempts, %d missed, followed up %v; want recorded missed at once",
				i+1, len(holes), sl, a, m, followed)
		case i >= cut && (a != 0 || m != 0 || !followed):
			t.Errorf("hole %d of %d (oldest first) %s: %d attempts, %d missed, followed up %v; want followed up (one of the newest %d), not recorded yet",
				i+1, len(holes), sl, a, m, followed, watchedHoles)
		}
	}
}
