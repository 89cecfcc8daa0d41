package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// controlReads counts what a node reads of the fleet's control requests (pauses, triggers): the
// keys it looks up by name and the pages of a scope it walks.
type controlReads struct {
	keyedStore
	mu            sync.Mutex
	looked, pages int
}

func (c *controlReads) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if scope == scheduler.PauseScope || scope == scheduler.TriggerScope {
		c.mu.Lock()
		c.looked += len(keys)
		c.mu.Unlock()
	}
	return c.keyedStore.Lookup(ctx, scope, keys)
}

func (c *controlReads) ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]store.Key, string, error) {
	c.mu.Lock()
	c.pages++
	c.mu.Unlock()
	return c.keyedStore.(store.ScopeLister).ScopeKeys(ctx, scope, cursor, limit)
}

func (c *controlReads) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	return c.keyedStore.(store.ScopeLister).Scopes(ctx, cursor, limit)
}

func (c *controlReads) counts() (looked, pages int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.looked, c.pages
}

// A node with many jobs reads the fleet's pauses and triggers every poll from the two scopes,
// which hold the requests in force (none here), not by looking up each of its jobs' names in each:
// 1,000 jobs probed 2,000 keys a poll. Daily slots: nothing fires.
func TestIdlePollReadsNoKeyPerJob(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	const jobs = 120
	var js []scheduler.Job
	for i := range jobs {
		js = append(js, workJob(fmt.Sprintf("daily-%03d", i), "17 3 * * *", (&witness{}).work(time.Millisecond)))
	}
	reads := &controlReads{keyedStore: f.stores[0].(keyedStore)}
	f.stores[0] = reads
	f.start(0, scheduler.Config{Jobs: js, Poll: 50 * time.Millisecond})
	eventually(t, 30*time.Second, "five polls", func() bool { looked, pages := reads.counts(); return looked > 0 || pages >= 10 })
	if looked, pages := reads.counts(); looked != 0 {
		t.Fatalf("%d control keys looked up by name in %d scope pages' time, want none (%d jobs)", looked, pages, jobs)
	}
}

// Paused and Triggered, for as many names as a walk of the scope serves, return the requests in
// force among the names (not another job's), with their claimants: who paused, which slot.
func TestControlRequestsOfManyJobs(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	var names []string
	for i := range 80 {
		names = append(names, fmt.Sprintf("job-%02d", i))
	}
	for _, n := range []string{"job-03", "job-41", "elsewhere"} {
		if ok, _, err := scheduler.Pause(ctx, f.stores[0], n, "ops", "why "+n); err != nil || !ok {
			t.Fatalf("pause %s: %v %v", n, ok, err)
		}
	}
	if ok, _, err := scheduler.Trigger(ctx, f.stores[0], "job-77", time.Now()); err != nil || !ok {
		t.Fatalf("trigger: %v %v", ok, err)
	}
	for _, n := range []int{len(names), 3} { // a walk of the scope, and the look-up by name
		p, err := scheduler.Paused(ctx, f.stores[0], names[:n])
		if err != nil {
			t.Fatal(err)
		}
		want := map[int][]string{80: {"job-03", "job-41"}, 3: {}}[n]
		if len(p) != len(want) {
			t.Fatalf("%d names: paused %v, want %v", n, p, want)
		}
		for _, w := range want {
			if !strings.Contains(p[w].RunID, "why "+w) {
				t.Fatalf("%d names: %s paused as %+v", n, w, p[w])
			}
		}
	}
	tr, err := scheduler.Triggered(ctx, f.stores[0], names)
	if err != nil || len(tr) != 1 || !strings.Contains(tr["job-77"].RunID, scheduler.ManualSlotPrefix) {
		t.Fatalf("triggered: %+v, %v", tr, err)
	}
}
