package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// freshDSN is a new store of the kind named: an SQLite file, or PostgreSQL (ONCE_TEST_POSTGRES)
// under a prefix of its own. The rules tested with it are the scheduler's, the same on every store.
func freshDSN(t *testing.T, kind string) string {
	if kind == "sqlite" {
		return "sqlite://" + filepath.Join(t.TempDir(), "once.db")
	}
	pg := os.Getenv("ONCE_TEST_POSTGRES")
	if pg == "" {
		t.Skip("postgres: ONCE_TEST_POSTGRES not set")
	}
	sep := "?"
	if strings.Contains(pg, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%sprefix=sch%d_%d", pg, sep, os.Getpid(), prefixes.Add(1))
}

var prefixes atomic.Int64

// newFleetOn is newFleet on the store of dsn.
func newFleetOn(t *testing.T, dsn string, n int) *fleet {
	t.Helper()
	f := &fleet{t: t, dsn: dsn}
	for range n {
		s, err := store.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f.stores = append(f.stores, s)
	}
	return f
}

// A buffer-one slot that waits in a node's queue behind a running one, while the slot after it is
// recorded skipped (the buffer is full), and then every node stops (a one-node daemon, or a whole
// fleet stopped together): the drain drops it. On the next start it is caught up (in the catch-up
// window) or recorded missed (outside it), never left without a record: the account walked only
// the slots after the newest recorded one, the skip, and never saw it.
func TestQueuedSlotAtAStopIsAccounted(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		for _, nodes := range []int{1, 2} {
			for _, catchUp := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%d-nodes/catch-up=%v", kind, nodes, catchUp), func(t *testing.T) {
					t.Parallel()
					queuedAtStop(t, newFleetOn(t, freshDSN(t, kind), nodes), catchUp)
				})
			}
		}
	}
}

func queuedAtStop(t *testing.T, f *fleet, catchUp bool) {
	var long atomic.Bool
	long.Store(true)
	var mu sync.Mutex
	ran := map[string]int{}
	first := make(chan string, 1)
	work := func(ctx context.Context, run *once.Run) error {
		mu.Lock()
		ran[run.Slot]++
		mu.Unlock()
		if long.Swap(false) { // the first run outlasts the next two slots: one waits, one is skipped
			first <- run.Slot
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return nil
	}
	name := "buffered"
	if !catchUp {
		name = "buffered-nocatch"
	}
	j := workJob(name, "@every 1s", work)
	j.Overlap = "buffer-one"
	j.TTL = 3 * time.Second
	if catchUp {
		j.CatchUp, j.CatchUpMax = time.Hour, 100
	}
	sp, _ := j.Spec()
	start := func() []*node {
		var ns []*node
		for i := range f.stores {
			ns = append(ns, f.start(i, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 20 * time.Second}))
		}
		return ns
	}
	stopAll := func(ns []*node) {
		var wg sync.WaitGroup
		for _, n := range ns {
			wg.Add(1)
			go func() { defer wg.Done(); n.stop() }()
		}
		wg.Wait()
	}
	ns := start()
	var v string
	select {
	case v = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("no first run")
	}
	vt, _ := sp.Parse(v)
	w := sp.Next(vt) // waits behind v
	// x fired and was recorded skipped (buffer-one's buffer was full): w now has no record and x is
	// newer. Under load the fires can come late: wait for the skip (or give up on this run's shape).
	f.awaitHistory(name, 10*time.Second, func(h []store.Entry) bool {
		return count(h, store.Skipped, "already waits") > 0
	})
	stopAll(ns)
	var hw []store.Entry
	for _, e := range f.history(name) {
		if e.Slot == w.Value {
			hw = append(hw, e)
		}
	}
	mu.Lock()
	wRan := ran[w.Value]
	mu.Unlock()
	if len(hw) > 0 || wRan > 0 {
		t.Skipf("slot %s has a record before the restart (%+v, ran %d): the node did not queue it (a loaded machine)", w.Value, hw, wRan)
	}
	if !catchUp { // a slot due less than 5 s ago is fired late, as on a quick restart: let it pass
		time.Sleep(time.Until(w.Start.Add(6 * time.Second)))
	}
	ns = start()
	f.awaitHistory(name, 20*time.Second, func(h []store.Entry) bool {
		for _, e := range h {
			if e.Slot == w.Value {
				return true
			}
		}
		return false
	})
	stopAll(ns)
	hw = hw[:0]
	for _, e := range f.history(name) {
		if e.Slot == w.Value {
			hw = append(hw, e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for sl, n := range ran {
		if n > 1 {
			t.Errorf("slot %s ran %d times", sl, n)
		}
	}
	switch {
	case len(hw) == 0:
		t.Fatalf("slot %s, queued behind %s when every node stopped, has no record after the restart: %s", w.Value, v, brief(f.history(name)))
	case catchUp && (ran[w.Value] != 1 || len(hw) != 1 || hw[0].State != store.Succeeded):
		t.Fatalf("slot %s in the catch-up window: ran %d, history %+v; want it run once on the restart", w.Value, ran[w.Value], hw)
	case !catchUp && (ran[w.Value] != 0 || len(hw) != 1 || hw[0].State != store.Missed || !strings.Contains(hw[0].Note, "stopped before running it")):
		t.Fatalf("slot %s outside the catch-up window: ran %d, history %+v; want it recorded missed", w.Value, ran[w.Value], hw)
	}
}

// brief is a history as "slot state" lines, for failures.
func brief(h []store.Entry) string {
	var b strings.Builder
	for _, e := range h {
		fmt.Fprintf(&b, "\n  %s %s %s", e.Slot, e.State, e.Note)
	}
	return b.String()
}

// A slot of an overlap = skip job queued behind a launch that never begins its attempt during the
// whole drain (its store read outlasts it): the drain's skip of the queued slot is recorded only
// once the launches ended and the slot it waited behind has a record. Recorded at once, the skip
// was the job's newest slot while the slot before it had none, and the next start's account,
// which walks the slots after the newest recorded one, never saw that slot. Both are now in that
// account's gap.
func TestQueuedSkipWaitsForTheSlotBefore(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	late := &lateSlot{keyedStore: f.stores[0].(keyedStore), delay: 3 * time.Second}
	f.stores[0] = late
	w := &witness{}
	j := workJob("stuck", "@every 1s", w.work(10*time.Millisecond))
	sp, _ := j.Spec()
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 200 * time.Millisecond})
	seed := f.succeeded(t, "stuck") // the job has a history: the next start accounts from it
	late.on.Store(true)             // from now on, each launch's read of its slot outlasts the drain
	ts, _ := sp.Parse(seed.Slot)
	// The launch of a slot after the seed is stuck; the slot after it fires and is queued behind it.
	var v slot.Slot
	for v = sp.Next(ts); time.Until(v.Start) < 200*time.Millisecond; v = sp.Next(v.Start) {
	}
	// v fires after lateness is on (each earlier slot's launch may have read its slot before)
	x := sp.Next(v.Start)
	time.Sleep(time.Until(x.Start.Add(300 * time.Millisecond)))
	n.stop()
	hv, hx := slotHistory(f, "stuck", v.Value), slotHistory(f, "stuck", x.Value)
	if len(hv) == 0 && count(hx, store.Skipped, "") > 0 {
		t.Fatalf("slot %s has no record and slot %s after it is recorded skipped: the next start would never see %s:%s",
			v.Value, x.Value, v.Value, brief(f.history("stuck")))
	}
	late.on.Store(false)
	n = f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	f.awaitHistory("stuck", 15*time.Second, func([]store.Entry) bool {
		return len(slotHistory(f, "stuck", v.Value)) > 0 && len(slotHistory(f, "stuck", x.Value)) > 0
	})
	n.stop()
	for _, sl := range []string{v.Value, x.Value} {
		if len(slotHistory(f, "stuck", sl)) == 0 {
			t.Fatalf("slot %s has no record after the restart:%s", sl, brief(f.history("stuck")))
		}
	}
}

func slotHistory(f *fleet, task, sl string) []store.Entry {
	var out []store.Entry
	for _, e := range f.history(task) {
		if e.Slot == sl {
			out = append(out, e)
		}
	}
	return out
}

// A catch-up (a sequence of slots under one lease) stopped by the drain between two slots begins
// no further slot: the stop's signal follows the stopped attempt's note, a store write, and the
// next slot's attempt began while that write was under way (then was stopped in turn, recorded
// failed). A store whose Report answers late stands in for a loaded one.
func TestStoppedCatchUpBeginsNoFurtherSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	sp, _ := workJob("seq", "@every 1s", nil).Spec()
	seed := sp.Prev(time.Now().Add(-6 * time.Second))
	if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "seq", Slot: seed.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	slow := &lateReport{keyedStore: f.stores[0].(keyedStore), delay: 3 * time.Second}
	f.stores[0] = slow
	w := &witness{}
	j := workJob("seq", "@every 1h", w.work(time.Second)) // the catch-up's slots are the seed's schedule's
	j.Schedule = "@every 1s"
	j.CatchUp, j.CatchUpMax = time.Minute, 4
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 300 * time.Millisecond})
	eventually(t, 10*time.Second, "the catch-up began", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	n.stop()
	runs, _ := w.snapshot()
	if len(runs) != 1 {
		var slots []string
		for _, r := range runs {
			slots = append(slots, r.Slot)
		}
		t.Fatalf("the catch-up ran slots %v after the drain stopped it in its first; want the first only:%s", slots, brief(f.history("seq")))
	}
	// The rest of the catch-up, queued by the account (marked so) and left without a record, is a
	// hole behind the newest slot: the next start catches it up.
	first := runs[0].Slot
	ft, _ := sp.Parse(first)
	var rest []string
	for sl := sp.Next(ft); len(rest) < 3; sl = sp.Next(sl.Start) {
		rest = append(rest, sl.Value)
	}
	// The next fire, which the catch-up waited behind, ran: the rest lies behind the newest slot.
	next := sp.Prev(time.Now())
	if _, err := once.Do(ctx, once.Options{Store: slow.keyedStore, Task: "seq", Slot: next.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.stores[0] = slow.keyedStore
	n = f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	f.awaitHistory("seq", 30*time.Second, func([]store.Entry) bool {
		for _, sl := range rest {
			if len(slotHistory(f, "seq", sl)) == 0 {
				return false
			}
		}
		return true
	})
	n.stop()
	for _, sl := range rest {
		if len(slotHistory(f, "seq", sl)) == 0 {
			t.Errorf("slot %s of the stopped catch-up has no record after the restart:%s", sl, brief(f.history("seq")))
		}
	}
}

// lateReport is a store whose Report (an attempt's note) answers after delay.
type lateReport struct {
	keyedStore
	delay time.Duration
}

func (l *lateReport) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	time.Sleep(l.delay)
	return l.keyedStore.Report(ctx, runID, token, r)
}

// A rolling restart of a buffer-one job without a catch-up window: the node that runs slot V, with
// W waiting behind it, drains (V ends, W is dropped) and starts again at once, while the other node
// follows W up and runs it once V's lease is given back. The restarted node finds W without a
// record behind the newest slot (the skip after it) and must not record it missed before the
// follower ran it (it waits three polls), nor may W run twice: W ends with one record.
func TestRollingRestartLeavesTheFollowerItsSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2)
	var long atomic.Bool
	long.Store(true)
	var mu sync.Mutex
	ran := map[string]int{}
	first := make(chan once.Run, 1)
	work := func(ctx context.Context, run *once.Run) error {
		mu.Lock()
		ran[run.Slot]++
		mu.Unlock()
		if long.Swap(false) {
			first <- *run
			select {
			case <-time.After(2500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return nil
	}
	j := workJob("rolling", "@every 1s", work)
	j.Overlap = "buffer-one"
	j.TTL = 3 * time.Second
	sp, _ := j.Spec()
	// The fleet's usual 100 ms polls: the restarted node holds a hole for three polls before it
	// records it missed, and under load the follower can run it later than that. It then loses
	// to the missed record's claim, or the record loses to its run's (claimLaunch): one record
	// either way. (Polls of 400 ms hid it before the claims: a fresh-clone run's load delayed
	// the follower past 300 ms, and the slot was recorded missed and run.)
	c := scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 20 * time.Second}
	ns := []*node{f.start(0, c), f.start(1, c)}
	var v once.Run
	select {
	case v = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("no first run")
	}
	vt, _ := sp.Parse(v.Slot)
	w := sp.Next(vt)
	f.awaitHistory("rolling", 10*time.Second, func(h []store.Entry) bool { return count(h, store.Skipped, "already waits") > 0 })
	i := 0
	if v.Holder == "nodeB" {
		i = 1
	}
	ns[i].stop() // drains: V ends, W is dropped; the other node follows W
	ns[i] = f.start(i, c)
	f.awaitHistory("rolling", 20*time.Second, func([]store.Entry) bool { return len(slotHistory(f, "rolling", w.Value)) > 0 })
	time.Sleep(time.Second) // a second record, if any, is written meanwhile
	ns[0].stop()
	ns[1].stop()
	hw := slotHistory(f, "rolling", w.Value)
	mu.Lock()
	defer mu.Unlock()
	for sl, n := range ran {
		if n > 1 {
			t.Errorf("slot %s ran %d times", sl, n)
		}
	}
	if len(hw) != 1 {
		t.Fatalf("slot %s: %d records, want one (run by the follower, or recorded missed):%s", w.Value, len(hw), brief(f.history("rolling")))
	}
	t.Logf("slot %s: %s by %s", w.Value, hw[0].State, hw[0].Holder)
}
