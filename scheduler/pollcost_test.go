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
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/mysql"
	_ "github.com/once-run/once/store/redis"
	"github.com/once-run/once/store/storetest"
	_ "github.com/once-run/once/store/zk"
)

// controlReads counts what a node reads of the fleet's control requests (pauses, triggers): the
// keys it looks up by name and the pages of a scope it walks.
type controlReads struct {
	keyedStore
	mu            sync.Mutex
	looked, pages int
	pausePages    int // of pages, those of the pause scope
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
	if scope == scheduler.PauseScope {
		c.pausePages++
	}
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
		js = append(js, workJob(fmt.Sprintf("daily-%03d", i), scheduler.QuietSchedule(24*time.Hour), (&witness{}).work(time.Millisecond)))
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

// Paused reads the same pauses on every store whether it walks the scope or looks the names up: a
// scope that holds fewer keys than names (walked; on Redis a hash of 200 fields, past its compact
// encoding, scanned) and one that holds more (the look-up by name, after a page of the walk), among
// pauses of jobs that are not the node's, whose names extend the node's.
func TestPausedWalkOnEveryStore(t *testing.T) {
	t.Parallel()
	storetest.EachStore(t, func(t *testing.T, s store.Store) {
		pausedWalk(t, &controlReads{keyedStore: s.(keyedStore)})
	})
}

func pausedWalk(t *testing.T, s *controlReads) {
	ctx := context.Background()
	pause := func(names ...string) {
		for _, n := range names {
			if ok, _, err := scheduler.Pause(ctx, s, n, "ops", "why "+n); err != nil || !ok {
				t.Fatalf("pause %s: %v %v", n, ok, err)
			}
		}
	}
	var mine, others []string
	for i := range 300 {
		mine = append(mine, fmt.Sprintf("job-%03d", i))
		others = append(others, fmt.Sprintf("job-%03d-elsewhere", i)) // a name that extends one of mine
	}
	want := []string{"job-000", "job-007", "job-150", "job-299"}
	pause(want...)
	pause(others[:196]...) // 200 pauses in force: a Redis hash past its compact encoding
	for _, c := range []struct {
		names  int
		walked bool
	}{{300, true}, {60, false}} {
		l0, p0 := s.counts()
		got, err := scheduler.Paused(ctx, s, mine[:c.names])
		if err != nil {
			t.Fatal(err)
		}
		l1, p1 := s.counts()
		var w []string
		for _, n := range want {
			if n <= mine[c.names-1] {
				w = append(w, n)
			}
		}
		if len(got) != len(w) {
			t.Fatalf("%d names: paused %v, want %v", c.names, got, w)
		}
		for _, n := range w {
			if !strings.Contains(got[n].RunID, "why "+n) {
				t.Fatalf("%d names: %s paused as %+v", c.names, n, got[n])
			}
		}
		if walked := l1 == l0 && p1 > p0; walked != c.walked {
			t.Errorf("%d names: %d keys looked up, %d pages walked; want walked %v", c.names, l1-l0, p1-p0, c.walked)
		}
	}
}

// A node whose jobs are fewer than the pauses in force in the fleet (here 60 jobs, 120 other jobs
// paused) looks its jobs' names up, and does not read a page of the pause scope first every poll
// (a page as long as its jobs, then the look-up): after a walk found the scope crowded, it looks
// the names up alone for crowdedPolls polls.
func TestCrowdedPauseScopeIsNotWalkedEveryPoll(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	const jobs = 60
	var js []scheduler.Job
	for i := range jobs {
		js = append(js, workJob(fmt.Sprintf("daily-%03d", i), scheduler.QuietSchedule(24*time.Hour), (&witness{}).work(time.Millisecond)))
	}
	for i := range 2 * jobs {
		if ok, _, err := scheduler.Pause(ctx, f.stores[0], fmt.Sprintf("elsewhere-%03d", i), "ops", "maintenance"); err != nil || !ok {
			t.Fatalf("pause: %v %v", ok, err)
		}
	}
	reads := &controlReads{keyedStore: f.stores[0].(keyedStore)}
	f.stores[0] = reads
	f.start(0, scheduler.Config{Jobs: js, Poll: 50 * time.Millisecond})
	eventually(t, 30*time.Second, "twenty polls", func() bool { looked, _ := reads.counts(); return looked >= 20*jobs })
	reads.mu.Lock()
	looked, pages := reads.looked, reads.pausePages
	reads.mu.Unlock()
	if polls := looked / jobs; pages > 1+polls/30 { // the trigger scope, empty, is walked
		t.Fatalf("%d pages of the crowded pause scope read in about %d polls, want at most %d", pages, polls, 1+polls/30)
	}
}
