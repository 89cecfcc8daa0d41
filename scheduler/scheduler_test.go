package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// Three nodes on one store: every slot runs exactly once, never two at a time, with strictly
// increasing tokens, and the losers record nothing.
func TestFleetRunsEachSlotOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3)
	w := &witness{}
	j := workJob("tick", "@every 1s", w.work(200*time.Millisecond))
	j.TTL = 3 * time.Second // a 1 s lease lapsed once under a loaded CI run, and the next node rightly took over
	jobs := []scheduler.Job{j}
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, f.start(i, scheduler.Config{Jobs: jobs}))
	}
	time.Sleep(5500 * time.Millisecond)
	for _, n := range nodes {
		n.stop()
	}
	runs, overlap := w.snapshot()
	if overlap > 0 {
		t.Fatalf("%d runs overlapped", overlap)
	}
	if len(runs) < 4 {
		t.Fatalf("%d runs in 5.5 s of a 1 s schedule", len(runs))
	}
	seen := map[string]bool{}
	for i, r := range runs {
		if seen[r.Slot] {
			t.Fatalf("slot %s ran twice", r.Slot)
		}
		seen[r.Slot] = true
		if i > 0 && r.Token <= runs[i-1].Token {
			t.Fatalf("token %d after %d", r.Token, runs[i-1].Token)
		}
	}
	// The history is the runs, all succeeded. A loaded machine can make a launch outlast the
	// period (or a node see it so while it returns): the next slot is then skipped, with an event,
	// by the node that ran the job, and may still be run by another node (docs/daemon.md#overlap).
	h := f.history("tick")
	var attempts int
	for _, e := range h {
		switch {
		case e.State == store.Skipped:
			t.Logf("slot %s skipped: %s", e.Slot, e.Note)
		case e.State != store.Succeeded:
			t.Fatalf("history %+v: an attempt %s", h, e.State)
		default:
			attempts++
		}
	}
	if attempts != len(runs) {
		t.Fatalf("history %+v: %d attempts, want the %d runs", h, attempts, len(runs))
	}
}

// overlap = skip: a slot due while the previous runs is skipped, recorded once, by the node that
// runs the job.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2)
	w := &witness{}
	jobs := []scheduler.Job{workJob("slow", "@every 1s", w.work(2300*time.Millisecond))}
	a, b := f.start(0, scheduler.Config{Jobs: jobs}), f.start(1, scheduler.Config{Jobs: jobs})
	time.Sleep(5 * time.Second)
	f.awaitHistory("slow", 15*time.Second, func(h []store.Entry) bool { return count(h, store.Skipped, "overlap = skip") >= 2 })
	a.stop()
	b.stop()
	runs, overlap := w.snapshot()
	h := f.history("slow")
	skips := count(h, store.Skipped, "overlap = skip")
	if overlap > 0 || len(runs) < 1 || skips < 2 {
		t.Fatalf("runs %d, overlaps %d, skips %d: %+v", len(runs), overlap, skips, h)
	}
	// One entry per slot, but for the race docs/daemon.md#overlap describes (logged): never two
	// attempts of a slot.
	slots, attempts := map[string]int{}, map[string]int{}
	for _, e := range h {
		slots[e.Slot]++
		if slices.Contains(store.AttemptStates, e.State) { // an attempt, not an event (skipped, review, …)
			attempts[e.Slot]++
		}
	}
	for sl, n := range slots {
		switch {
		case attempts[sl] > 1:
			t.Fatalf("slot %s has %d attempts: %+v", sl, attempts[sl], h)
		case n > 1:
			t.Logf("slot %s: skipped by one node, run by another", sl)
		}
	}
}

// overlap = buffer-one: a slot due while the previous runs starts right after it; a second one
// due meanwhile is skipped.
func TestOverlapBufferOne(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	j := workJob("buf", "@every 1s", w.work(2500*time.Millisecond))
	j.Overlap = "buffer-one"
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	time.Sleep(5800 * time.Millisecond)
	n.stop()
	runs, overlap := w.snapshot()
	h := f.history("buf")
	if overlap > 0 || len(runs) < 2 || count(h, store.Skipped, "overlap = buffer-one") < 1 {
		t.Fatalf("runs %d, overlap %d: %+v", len(runs), overlap, h)
	}
}

// overlap = replace: the running attempt is stopped through its stop path (recorded failed, with
// why), and the new slot runs.
func TestOverlapReplace(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	j := workJob("rep", "@every 1s", w.work(time.Hour))
	j.Overlap = "replace"
	// A lease that outlives a loaded machine's stalled renewals: with 1 s, a fresh-clone run's
	// SQLite left renewals unanswered for 666 ms, and the runs ended unknown (lease lost), not
	// failed by the stop path under test.
	j.TTL = 10 * time.Second
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 100 * time.Millisecond})
	time.Sleep(3500 * time.Millisecond)
	n.stop()
	runs, overlap := w.snapshot()
	h := f.history("rep")
	if overlap > 0 || len(runs) < 2 || count(h, store.Failed, "replaced by slot") < 1 {
		t.Fatalf("runs %d, overlap %d: %+v", len(runs), overlap, h)
	}
}

// Every node down for a while: on start the slots in the catch-up window run oldest first, once;
// older ones are recorded missed, once, however many nodes start together.
func TestCatchUpAndMissed(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2)
	ctx := context.Background()
	now := time.Now()
	sp, _ := jobfile.Job{Schedule: "@every 2s", TZ: "UTC"}.Spec()
	old := sp.Prev(now.Add(-30 * time.Second))
	if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "gap", Slot: old.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	w := &witness{}
	j := workJob("gap", "@every 2s", w.work(10*time.Millisecond))
	j.CatchUp, j.CatchUpMax = 7*time.Second, 10
	started := time.Now()
	a, b := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}}), f.start(1, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 8*time.Second, "catch-up ran", func() bool { runs, _ := w.snapshot(); return len(runs) >= 3 })
	a.stop()
	b.stop()
	runs, _ := w.snapshot()
	// The slots due before the nodes started run oldest first (a node that found another catching
	// up follows them up in that order). A slot that fires on schedule meanwhile is not one of them:
	// under load one node may fire it between two of another's.
	var caught []string
	for _, r := range runs {
		if at, err := sp.Parse(r.Slot); err == nil && at.Before(started) {
			caught = append(caught, r.Slot)
		}
	}
	for i := 1; i < len(caught); i++ {
		if caught[i] <= caught[i-1] {
			t.Fatalf("not oldest first: %s after %s (runs %+v)", caught[i], caught[i-1], runs)
		}
	}
	h := f.history("gap")
	missed := map[string]int{}
	for _, e := range h {
		if e.State == store.Missed {
			missed[e.Slot]++
		}
	}
	ran := map[string]bool{}
	for _, r := range runs {
		if ran[r.Slot] {
			t.Fatalf("slot %s ran twice", r.Slot)
		}
		ran[r.Slot] = true
	}
	for sl, n := range missed {
		if n != 1 || ran[sl] {
			t.Fatalf("slot %s: missed %d times, ran %v", sl, n, ran[sl])
		}
	}
	// 30 s of a 2 s schedule since the old slot: the newest 3–4 are in the 7 s window (or fired
	// late), the other ~11 are missed.
	if len(missed) < 9 || len(missed) > 13 {
		t.Fatalf("%d missed slots, %d ran: %+v", len(missed), len(runs), h)
	}
}

// A catch-up that finds its task held elsewhere follows each of its slots up, and runs them oldest
// first once the task is free (they were launched in a map's order). Hourly slots: nothing fires
// while the test runs.
func TestCatchUpHeldElsewhereRunsOldestFirst(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	hourly := scheduler.QuietSchedule(time.Hour)
	sp, _ := jobfile.Job{Schedule: hourly, TZ: "UTC"}.Spec()
	old := sp.Prev(time.Now().Add(-10 * time.Hour))
	if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "held", Slot: old.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l, err := f.stores[0].Acquire(ctx, store.AcquireRequest{Task: "held", Holder: "elsewhere", RunID: "run-elsewhere", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan struct{})
	var seen sync.Once
	w := &witness{}
	j := workJob("held", hourly, w.work(10*time.Millisecond))
	j.CatchUp, j.CatchUpMax = 5*time.Hour, 4
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Logger: slog.New(&onMessage{msg: "busy", do: func() { seen.Do(func() { close(busy) }) }})})
	select {
	case <-busy:
	case <-time.After(20 * time.Second):
		t.Fatal("the catch-up did not find the task held within 20s")
	}
	if err := f.stores[0].Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the catch-up's 4 slots ran", func() bool { runs, _ := w.snapshot(); return len(runs) >= 4 })
	runs, _ := w.snapshot()
	for i := 1; i < len(runs); i++ {
		if runs[i].Slot <= runs[i-1].Slot {
			t.Fatalf("not oldest first: %s after %s", runs[i].Slot, runs[i-1].Slot)
		}
	}
}

// A node that starts after its job's newest slot ran finds where the job stands from that slot's
// history, not from the task's newest entries (a page; without the history index, every slot the task ever had, on the key-value
// stores). Daily slots: none turns while the test runs. A job whose slots can wait in a queue
// (buffer-one, a catch-up window) reads the newest entries too, for the slots a stopped node left
// without a record behind the newest one (holes_test.go): not this one.
func TestAccountReadsTheNewestSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	daily := scheduler.QuietSchedule(24 * time.Hour)
	sp, _ := jobfile.Job{Schedule: daily, TZ: "UTC"}.Spec()
	newest := sp.Prev(time.Now())
	if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "quick", Slot: newest.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	reads := &historyReads{keyedStore: f.stores[0].(keyedStore)}
	f.stores[0] = reads
	w := &witness{}
	j := workJob("quick", daily, w.work(10*time.Millisecond))
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 20*time.Second, "the node read the newest slot's history", func() bool { slot, _ := reads.counts(); return slot > 0 })
	time.Sleep(200 * time.Millisecond)
	if slot, task := reads.counts(); slot != 1 || task != 0 {
		t.Fatalf("%d reads of a slot's history, %d of the task's; want 1 and 0", slot, task)
	}
	if runs, _ := w.snapshot(); len(runs) != 0 {
		t.Fatalf("ran after a restart with nothing missed: %+v", runs)
	}
}

// historyReads counts the History calls for task "quick": of one slot, and of the whole task.
type historyReads struct {
	keyedStore
	mu         sync.Mutex
	slot, task int
}

func (h *historyReads) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	if q.Task == "quick" {
		h.mu.Lock()
		if q.Slot != "" {
			h.slot++
		} else {
			h.task++
		}
		h.mu.Unlock()
	}
	return h.keyedStore.History(ctx, q)
}

func (h *historyReads) counts() (slot, task int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.slot, h.task
}

// Pause holds for the whole fleet (each paused slot is recorded once as skipped); a trigger runs a
// manual slot once; resume fires again.
func TestPauseTriggerResume(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2)
	ctx := context.Background()
	w := &witness{}
	jobs := []scheduler.Job{workJob("ctl", "@every 1s", w.work(10*time.Millisecond))}
	if ok, _, err := scheduler.Pause(ctx, f.stores[0], "ctl", "test", "maintenance"); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if ok, _, _ := scheduler.Pause(ctx, f.stores[0], "ctl", "test", "again"); ok {
		t.Fatal("a second pause reported as new")
	}
	f.start(0, scheduler.Config{Jobs: jobs})
	f.start(1, scheduler.Config{Jobs: jobs})
	// Two paused slots recorded (up to 8 s: a loaded machine starts the nodes late), none run.
	eventually(t, 20*time.Second, "two paused slots recorded", func() bool { return count(f.history("ctl"), store.Skipped, "paused") >= 2 })
	if runs, _ := w.snapshot(); len(runs) != 0 {
		t.Fatalf("a paused job ran: %+v", runs)
	}
	h := f.history("ctl")
	if count(h, store.Skipped, "paused") < 2 {
		t.Fatalf("paused slots not recorded: %+v", h)
	}
	perSlot := map[string]int{}
	for _, e := range h {
		perSlot[e.Slot]++
	}
	for sl, n := range perSlot {
		if n > 1 {
			t.Fatalf("paused slot %s recorded %d times", sl, n)
		}
	}
	ok, manual, err := scheduler.Trigger(ctx, f.stores[0], "ctl", time.Now())
	if err != nil || !ok || !strings.HasPrefix(manual, scheduler.ManualSlotPrefix) {
		t.Fatalf("trigger: %v %q %v", ok, manual, err)
	}
	eventually(t, 20*time.Second, "the trigger ran", func() bool { runs, _ := w.snapshot(); return len(runs) == 1 })
	if runs, _ := w.snapshot(); runs[0].Slot != manual {
		t.Fatalf("trigger ran slot %s, want %s", runs[0].Slot, manual)
	}
	eventually(t, 20*time.Second, "the trigger request removed", func() bool {
		m, err := scheduler.Triggered(ctx, f.stores[0], []string{"ctl"})
		return err == nil && len(m) == 0
	})
	if ok, err := scheduler.Resume(ctx, f.stores[0], "ctl"); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	eventually(t, 20*time.Second, "fires after resume", func() bool { runs, _ := w.snapshot(); return len(runs) >= 3 })
	runs, _ := w.snapshot()
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.Slot] {
			t.Fatalf("slot %s ran twice", r.Slot)
		}
		seen[r.Slot] = true
	}
}

// A slot that fired before the pause and waits for the run before it (overlap = buffer-one) is not
// run once the pause is known when its turn comes: it is recorded as a paused slot, once, and the
// other node, which found the lease busy and watches the slot, does not run it either.
//
// No fixed sleeps (it failed under load, on c7872d0 too: a run began late, or a node saw the pause
// late): the first run holds until the next slot waits for it and both nodes have seen the pause.
func TestPauseStopsAWaitingSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2)
	ctx := context.Background()
	release := make(chan struct{})
	var mu sync.Mutex
	var runs []once.Run
	j := workJob("buf", "@every 1s", func(ctx context.Context, r *once.Run) error {
		mu.Lock()
		runs = append(runs, *r)
		first := len(runs) == 1
		mu.Unlock()
		if first {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	j.Overlap = "buffer-one"
	j.TTL = 30 * time.Second // a loaded machine must not lose the first run's lease
	var waiting, pausedA, pausedB sync.Once
	queued, seenA, seenB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	logger := func(seen chan struct{}, o *sync.Once) *slog.Logger {
		return slog.New(&onMessages{do: map[string]func(){
			"job paused": func() { o.Do(func() { close(seen) }) },
			"overlap: slot waits for the previous one to end (buffer-one)": func() { waiting.Do(func() { close(queued) }) },
		}})
	}
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Logger: logger(seenA, &pausedA)})
	f.start(1, scheduler.Config{Jobs: []scheduler.Job{j}, Logger: logger(seenB, &pausedB)})
	select {
	case <-queued:
	case <-time.After(60 * time.Second): // a fresh-clone run, loaded by other runs too, missed 30 s
		t.Fatal("no slot waits for the first run")
	}
	if ok, _, err := scheduler.Pause(ctx, f.stores[0], "buf", "test", "maintenance"); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	for _, c := range []chan struct{}{seenA, seenB} {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal("a node did not see the pause")
		}
	}
	mu.Lock()
	first := runs[0].Slot
	mu.Unlock()
	close(release)
	f.awaitHistory("buf", 20*time.Second, func(h []store.Entry) bool {
		for _, e := range h {
			if e.State == store.Skipped && strings.Contains(e.Note, "paused") && e.Slot > first {
				return true
			}
		}
		return false
	})
	time.Sleep(2 * time.Second) // a run that should not happen has its time to start
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 {
		t.Fatalf("%d runs; want the first only, the waiting slot not run after the pause: %+v", len(runs), runs)
	}
	if count(f.history("buf"), store.Skipped, "paused") == 0 {
		t.Fatalf("no paused slot recorded after slot %s: %+v", first, f.history("buf"))
	}
}

// onMessages calls do[msg] for each record whose message is msg.
type onMessages struct{ do map[string]func() }

func (h *onMessages) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessages) Handle(_ context.Context, r slog.Record) error {
	if f := h.do[r.Message]; f != nil {
		f()
	}
	return nil
}
func (h *onMessages) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessages) WithGroup(string) slog.Handler      { return h }

// A pause the node sees after its launch checked for one and before the slot's attempt is
// recorded (here: while the launch waits for the lease) still keeps the slot from running, and
// the slot is recorded as paused.
func TestPauseSeenAsTheRunBegins(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	seen := make(chan struct{})
	var once sync.Once
	logger := slog.New(&onMessage{msg: "job paused", do: func() { once.Do(func() { close(seen) }) }})
	slow := &pauseOnAcquire{keyedStore: f.stores[0].(keyedStore), seen: seen}
	f.stores[0] = slow
	w := &witness{}
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{workJob("late", "@every 1s", w.work(10*time.Millisecond))}, Logger: logger})
	// The delayed launch's slot is the first; the two after it are dropped at the launch's check.
	eventually(t, 10*time.Second, "three paused slots recorded", func() bool { return count(f.history("late"), store.Skipped, "paused") >= 3 })
	if runs, _ := w.snapshot(); len(runs) != 0 {
		t.Fatalf("a slot ran after the pause was seen, before its run began: %+v", runs)
	}
	for _, e := range f.history("late") {
		if e.State != store.Skipped || !strings.Contains(e.Note, "paused") {
			t.Fatalf("want only paused slots in the history: %+v", e)
		}
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if !slow.acquired {
		t.Fatal("the delayed launch never took the lease: the test did not test the run's own check")
	}
}

type keyedStore interface {
	store.Store
	store.Keys
}

// pauseOnAcquire pauses the job as its first launch asks for the lease, and lets the launch go
// on only once the node has seen the pause.
type pauseOnAcquire struct {
	keyedStore
	seen     chan struct{}
	mu       sync.Mutex
	asked    bool
	acquired bool // the first launch got the lease
}

func (p *pauseOnAcquire) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	p.mu.Lock()
	first := !p.asked
	p.asked = true
	p.mu.Unlock()
	if !first {
		return p.keyedStore.Acquire(ctx, req)
	}
	if ok, _, err := scheduler.Pause(ctx, p.keyedStore, req.Task, "test", "maintenance"); err != nil || !ok {
		return store.Lease{}, fmt.Errorf("pause: %v %w", ok, err)
	}
	select {
	case <-p.seen:
	case <-time.After(10 * time.Second):
		return store.Lease{}, errors.New("the node did not see the pause within 10s")
	}
	l, err := p.keyedStore.Acquire(ctx, req)
	p.mu.Lock()
	p.acquired = err == nil
	p.mu.Unlock()
	return l, err
}

// onMessage is a slog handler that calls do for each record whose message is msg.
type onMessage struct {
	msg string
	do  func()
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.do()
	}
	return nil
}
func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessage) WithGroup(string) slog.Handler      { return h }

// A node whose clock is off from the store's by more than the limit refuses to fire.
func TestClockOffRefuses(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{workJob("skew", "@every 1s", w.work(0))},
		Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	time.Sleep(2500 * time.Millisecond)
	st := n.s.Stats()
	n.stop()
	if runs, _ := w.snapshot(); len(runs) != 0 || st.Refused < 1 || st.ClockOK {
		t.Fatalf("runs %+v, stats %+v", runs, st)
	}
}

// A holder that vanished mid-run: the node that found the slot busy takes it over once its lease
// expires; the guard marks the attempt unknown and the policy decides (review, or rerun).
func TestVanishedHolder(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"review", "rerun"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 2)
			ctx := context.Background()
			sp, _ := jobfile.Job{Schedule: "@every 3s", TZ: "UTC"}.Spec()
			// The "dead node" takes the next slot's lease just before it fires and begins an attempt
			// that nobody renews.
			next := sp.Next(time.Now().Add(500 * time.Millisecond))
			time.Sleep(time.Until(next.Start.Add(-200 * time.Millisecond)))
			l, err := f.stores[1].Acquire(ctx, store.AcquireRequest{Task: "v", Holder: "dead", RunID: "r-dead", TTL: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.stores[1].Begin(ctx, store.Attempt{Task: "v", Slot: next.Value, RunID: "r-dead", Number: 1, Holder: "dead", Token: l.Token, State: store.Running}); err != nil {
				t.Fatal(err)
			}
			w := &witness{}
			j := workJob("v", "@every 3s", w.work(10*time.Millisecond))
			j.OnUnknown = policy
			n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
			eventually(t, 6*time.Second, "the dead holder's attempt marked unknown", func() bool {
				st, err := f.stores[0].Slot(ctx, "v", next.Value)
				return err == nil && st.Last != nil && (st.Last.State == store.Unknown && policy == "review" || st.Last.Number == 2 && st.Last.State == store.Succeeded)
			})
			n.stop()
			st, _ := f.stores[0].Slot(ctx, "v", next.Value)
			if policy == "review" && !st.Waiting {
				t.Fatalf("slot %+v does not wait for review", st)
			}
		})
	}
}

// A command job: its output's tail is kept in the store with the attempt, and all of it in the
// job's log file (0600, in a 0700 directory).
func TestCommandOutput(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	dir := filepath.Join(t.TempDir(), "logs")
	j := scheduler.Job{Job: jobfile.Job{Name: "out/put", Schedule: "@every 1s", TZ: "UTC",
		Command: []string{"sh", "-c", "echo hello; echo $ONCE_SLOT >&2"}, Env: []string{"X=1"}}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, LogDir: dir, TailSize: 8})
	ctx := context.Background()
	att := f.succeeded(t, "out/put")
	n.stop()
	tail, ok, err := scheduler.Tail(ctx, f.stores[0], att.RunID)
	if err != nil || !ok {
		t.Fatalf("tail: %v %v", ok, err)
	}
	if want := att.Slot[len(att.Slot)-7:] + "\n"; string(tail) != want {
		t.Fatalf("tail %q, want the last 8 bytes %q", tail, want)
	}
	path := scheduler.LogFile(dir, "out/put")
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "hello\n"+att.Slot+"\n") {
		t.Fatalf("log file: %v %q", err, b)
	}
	fi, _ := os.Stat(path)
	di, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes %v %v", fi.Mode(), di.Mode())
	}
}

// Drain: a running job gets the drain time, then is stopped through its stop path, and its
// outcome is recorded.
func TestDrainStopsAfterItsTime(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	j := workJob("long", "@every 1s", w.work(time.Hour))
	j.TTL = 5 * time.Second // renewals every 1.7 s: a loaded machine's slow store must not lose the lease first
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 300 * time.Millisecond})
	eventually(t, 8*time.Second, "the job runs", func() bool { runs, _ := w.snapshot(); return len(runs) == 1 })
	start := time.Now()
	n.stop()
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("drain took %s", d)
	}
	h := f.history("long")
	if count(h, store.Failed, "drains") != 1 {
		t.Fatalf("history %+v: want the attempt failed, stopped by the drain", h)
	}
}

// A reload: an added job fires, a removed one stops firing, a bad list is refused whole.
func TestReload(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	wa, wb := &witness{}, &witness{}
	a := workJob("a", "@every 1s", wa.work(0))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{a}})
	eventually(t, 6*time.Second, "a fires", func() bool { r, _ := wa.snapshot(); return len(r) > 0 })
	bad := workJob("b", "not a schedule", wb.work(0))
	if err := n.s.Reload([]scheduler.Job{a, bad}); err == nil {
		t.Fatal("a bad schedule was accepted")
	}
	if err := n.s.Reload([]scheduler.Job{workJob("b", "@every 1s", wb.work(0))}); err != nil {
		t.Fatal(err)
	}
	ra, _ := wa.snapshot()
	// 6 s: a loaded fresh-clone run under -race did not see b fire twice within 3 s.
	eventually(t, 6*time.Second, "b fires", func() bool { r, _ := wb.snapshot(); return len(r) > 1 })
	if r, _ := wa.snapshot(); len(r) > len(ra)+1 {
		t.Fatalf("removed job a fired %d more times", len(r)-len(ra))
	}
}

// A --tail-size over what a store keeps with a key (store.MaxKeyResult) keeps the last
// MaxKeyResult bytes: the store refused the whole tail, and once logs had nothing for the attempt.
// The ring is no larger either: math.MaxInt (--tail-size 99999999999 ran the daemon out of memory
// at its first launch) would panic in make.
func TestCommandOutputTailOverStoreLimit(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	j := scheduler.Job{Job: jobfile.Job{Name: "big-tail", Schedule: "@every 1s", TZ: "UTC",
		Command: []string{"sh", "-c", "head -c 600000 /dev/zero | tr '\\0' x; echo END"}}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, LogDir: filepath.Join(t.TempDir(), "logs"), TailSize: math.MaxInt})
	att := f.succeeded(t, "big-tail")
	n.stop()
	tail, ok, err := scheduler.Tail(context.Background(), f.stores[0], att.RunID)
	if err != nil || !ok || len(tail) != store.MaxKeyResult || !strings.HasSuffix(string(tail), "xEND\n") {
		t.Fatalf("tail: %v %v, %d bytes; want the last %d bytes", ok, err, len(tail), store.MaxKeyResult)
	}
}

// A job removed by a reload and put back by the next (a jobs file seen mid-write: truncated, a
// drop-in renamed away by an editor) is accounted when it comes back, as on start: the slots that
// fired while it was gone are caught up or recorded missed. It started from its next slot, and
// the slots of the gap had no record at all.
func TestReloadPutBackAccountsTheGap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	w := &witness{}
	j := workJob("back", "@every 1s", w.work(0))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 8*time.Second, "the job fires", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	if err := n.s.Reload(nil); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	time.Sleep(3500 * time.Millisecond) // three slots or more fire while the job is gone
	if err := n.s.Reload([]scheduler.Job{j}); err != nil {
		t.Fatal(err)
	}
	sp, _ := j.Spec()
	runs, _ := w.snapshot()
	first, _ := sp.Parse(runs[0].Slot)
	upto := sp.Next(gone.Add(4 * time.Second)).Start
	// Every slot up to one well after the job came back has its record. Polled, not read once the
	// job fires again: under load the account's catch-up of the slot due as the job came back
	// can start after the next slot's fire (queued behind it), and a node stopped then drops it.
	var holes []string
	eventually(t, 20*time.Second, "a record for each slot", func() bool {
		seen := map[string]bool{}
		for _, e := range f.history("back") {
			if at, err := sp.Parse(e.Slot); err == nil {
				seen[at.UTC().Format(time.RFC3339Nano)] = true
			}
		}
		holes = holes[:0]
		for sl := sp.Next(first); !sl.Start.After(upto); sl = sp.Next(sl.Start) {
			if !seen[sl.Start.UTC().Format(time.RFC3339Nano)] {
				holes = append(holes, sl.Value)
			}
		}
		return len(holes) == 0
	})
	n.stop()
}

// Every node down over some slots, and the job paused meanwhile (the operator paused it before
// bringing the fleet back): on start the slots due before the pause began are recorded missed,
// and none runs (not even within the catch-up window). A paused job was not accounted at all, and
// after the resume it fired from its next slot: the slots of the gap had no record.
func TestPausedAtStartRecordsTheGap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	sp, _ := jobfile.Job{Schedule: "@every 1s", TZ: "UTC"}.Spec()
	old := sp.Prev(time.Now().Add(-8 * time.Second))
	if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "held", Slot: old.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := scheduler.Pause(ctx, f.stores[0], "held", "ops", "maintenance"); err != nil || !ok {
		t.Fatalf("pause: %v %v", ok, err)
	}
	w := &witness{}
	j := workJob("held", "@every 1s", w.work(0))
	j.CatchUp = 3 * time.Second
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 20*time.Second, "a paused slot recorded", func() bool { return count(f.history("held"), store.Skipped, "paused") >= 1 })
	if runs, _ := w.snapshot(); len(runs) != 0 {
		t.Fatalf("a paused job ran: %+v", runs)
	}
	if ok, err := scheduler.Resume(ctx, f.stores[0], "held"); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	eventually(t, 20*time.Second, "the job runs after the resume", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	runs, _ := w.snapshot()
	upto, _ := sp.Parse(runs[0].Slot)
	seen := map[time.Time]int{}
	for _, e := range f.history("held") {
		if at, err := sp.Parse(e.Slot); err == nil {
			seen[at.UTC()]++
		}
	}
	for sl := sp.Next(old.Start); sl.Start.Before(upto); sl = sp.Next(sl.Start) {
		if seen[sl.Start.UTC()] == 0 {
			t.Errorf("slot %s has no record (neither run, missed nor skipped)", sl.Value)
		}
	}
	if t.Failed() {
		t.Logf("history: %+v", f.history("held"))
	}
}

// A command that cannot start on a node (not found, its dir missing) leaves its slots to the
// fleet, as a store error does (another node may run them), but the missed records say why, not
// only that no node of the fleet ran the job; and a missing dir is named, not the shim.
func TestCommandCannotStart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	nodir := scheduler.Job{Job: jobfile.Job{Name: "nodir", Schedule: "@every 1s", TZ: "UTC",
		Dir: filepath.Join(t.TempDir(), "gone"), Command: []string{"true"}}}
	noprog := scheduler.Job{Job: jobfile.Job{Name: "noprog", Schedule: "@every 1s", TZ: "UTC",
		Command: []string{"/no/such/program"}}}
	f.start(0, scheduler.Config{Jobs: []scheduler.Job{nodir, noprog}})
	for task, why := range map[string]string{"nodir": "working directory " + nodir.Dir + ": no such file", "noprog": "/no/such/program"} {
		f.awaitHistory(task, 30*time.Second, func(h []store.Entry) bool { return count(h, store.Missed, "") >= 2 })
		h := f.history(task)
		if n := count(h, store.Missed, "nodeA could not start its command: "); n < 2 || n != count(h, store.Missed, why) || n != len(h) {
			t.Errorf("%s: want only missed events naming %q, got %+v", task, why, h)
		}
	}
}
