package scheduler

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/store"
)

// A buffer-one job holds at most one launch waiting behind its running one, whichever came first:
// a slot that waited on a node that died, queued here by a follow-up (queueWaitingLocked), or a
// fire. A fire after such a slot was queued as well (the buffer counted fires only): two waited,
// and a job longer than its period fell one slot further behind at each takeover.
func TestBufferOneQueuesOneAfterATakeover(t *testing.T) {
	for _, takeoverFirst := range []bool{true, false} {
		name := map[bool]string{true: "takeover then fire", false: "fire then takeover"}[takeoverFirst]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, js, st := bufferOneRunning(t)
			waited := "s0" // a slot that waited on the node that died
			js.watches[waited] = &watch{slot: waited, runIfUntried: true, since: time.Now()}
			fire := launch{slots: []string{"s2"}, untried: true, why: whyFire}
			if takeoverFirst {
				js.queueWaitingLocked(ctx)
				js.overlapLocked(ctx, fire)
			} else {
				js.overlapLocked(ctx, fire)
				js.queueWaitingLocked(ctx)
			}
			var queued [][]string
			for _, l := range js.queue {
				queued = append(queued, l.slots)
			}
			js.actives = nil
			js.mu.Unlock()
			s.writes.Wait()
			if len(queued) != 1 {
				t.Fatalf("queued %v behind the running slot; buffer-one holds one", queued)
			}
			skipped := "s2"
			if !takeoverFirst {
				skipped = waited
			}
			h, err := st.History(ctx, store.HistoryQuery{Task: "b", Slot: skipped})
			if err != nil || len(h) != 1 || h[0].State != store.Skipped {
				t.Fatalf("slot %s: history %+v, %v; want it recorded skipped", skipped, h, err)
			}
		})
	}
}

// A trigger waiting in the queue does not hold buffer-one's place: a slot that waited on a node
// that died is queued behind it, not recorded skipped (any queued launch made it skipped).
func TestBufferOneTakeoverBehindATrigger(t *testing.T) {
	ctx := context.Background()
	s, js, _ := bufferOneRunning(t)
	js.queue = []launch{{slots: []string{"t1"}, why: whyTrigger}}
	js.watches["s0"] = &watch{slot: "s0", runIfUntried: true, since: time.Now()}
	js.queueWaitingLocked(ctx)
	n := len(js.queue)
	js.actives = nil
	js.mu.Unlock()
	s.writes.Wait()
	if n != 2 {
		t.Fatalf("%d queued; want the trigger and the slot taken over", n)
	}
}

// bufferOneRunning returns a scheduler of one buffer-one job "b" on a new SQLite store, its job
// locked (js.mu held) with slot s1 running under it.
func bufferOneRunning(t *testing.T) (*Scheduler, *jobState, store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "once.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	work := func(context.Context, *once.Run) error { return nil }
	s, err := New(Config{Store: st, Node: "n", Jobs: []Job{{Job: jobfile.Job{Name: "b", Schedule: "@every 1m", Overlap: "buffer-one"}, Work: work}}})
	if err != nil {
		t.Fatal(err)
	}
	js := s.snapshot()[0]
	js.mu.Lock()
	js.actives = []*active{{run: &once.Run{Task: "b", Slot: "s1", Holder: "n", Token: 1}}}
	return s, js, st
}
