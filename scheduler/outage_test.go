package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/jobfile"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// A store outage as slots fire: once the store is back, the slots that could not run are caught
// up (or recorded as missed), never dropped without a record. They were: the next slot to run
// became the job's newest, and nothing looked at the gap behind it.
func TestOutageSlotsAreAccounted(t *testing.T) {
	t.Parallel()
	t.Run("after history", func(t *testing.T) { t.Parallel(); outageAccounted(t, true) })
	// A new job whose first fires meet the outage: no history to account from but the failed slot.
	t.Run("new job", func(t *testing.T) { t.Parallel(); outageAccounted(t, false) })
}

func outageAccounted(t *testing.T, seeded bool) {
	f := newFleet(t, 1)
	ctx := context.Background()
	sp, _ := jobfile.Job{Schedule: "@every 1s", TZ: "UTC"}.Spec()
	seed := sp.Prev(time.Now())
	if seeded {
		if _, err := once.Do(ctx, once.Options{Store: f.stores[0], Task: "flaky", Slot: seed.Value, TTL: time.Second}, func(context.Context, *once.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	out := &outage{keyedStore: f.stores[0].(keyedStore)}
	out.down.Store(true)
	f.stores[0] = out
	w := &witness{}
	j := workJob("flaky", "@every 1s", w.work(10*time.Millisecond))
	j.CatchUp, j.CatchUpMax = time.Minute, 100
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 10*time.Second, "three launches failed in the outage", func() bool { return out.refused.Load() >= 3 })
	out.down.Store(false)
	back := time.Now()
	if !seeded { // from the first slot that fired in the outage
		seed = sp.Prev(sp.Prev(out.firstRefusal()).Start.Add(-time.Nanosecond))
	}
	// holes are the slots from the seed to the newest recorded one that have no record. Polled
	// until two slots after the outage ran and none is left: under load the account's catch-up of
	// the outage's slots is queued behind the next fire, and a node stopped then drops it (the
	// next start's account finds such a catch-up behind the newest slot: holes_test.go).
	var upTo time.Time // when set, holes looks no further than this slot (the newest at the stop)
	holes := func() []string {
		recorded := map[string]bool{}
		newest := seed
		for _, e := range f.history("flaky") {
			recorded[e.Slot] = true
			if at, err := sp.Parse(e.Slot); err == nil && at.After(newest.Start) && (upTo.IsZero() || !at.After(upTo)) {
				newest = sp.Prev(at)
			}
		}
		var out []string
		for sl := sp.Next(seed.Start); !sl.Start.After(newest.Start); sl = sp.Next(sl.Start) {
			if !recorded[sl.Value] {
				out = append(out, sl.Value)
			}
		}
		return out
	}
	eventually(t, 20*time.Second, "two slots after the outage ran, and every slot before has a record", func() bool {
		runs, _ := w.snapshot()
		after := 0
		for _, r := range runs {
			if at, err := sp.Parse(r.Slot); err == nil && at.After(back) {
				after++
			}
		}
		return after >= 2 && len(holes()) == 0
	})
	n.stop()
	if h := holes(); len(h) > 0 {
		for _, e := range f.history("flaky") { // the newest slot at the stop: newer ones are the next start's
			if at, err := sp.Parse(e.Slot); err == nil && at.After(upTo) {
				upTo = at
			}
		}
		// A slot that fired as the check passed, newer than the newest recorded then, waited in
		// the node's queue (a follow-up, a catch-up) and the stop dropped it, while the drain
		// recorded a newer one skipped: the next start finds it behind the newest slot (marked
		// queued) and runs it (a loaded run: slot 21 of a catch-up that ended early, followed up).
		n = f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
		eventually(t, 20*time.Second, "the next start caught up what the stop left", func() bool { return len(holes()) == 0 })
		n.stop()
	}
	if h := holes(); len(h) > 0 {
		t.Fatalf("slots %v fired in the outage and have no record (history %+v)", h, f.history("flaky"))
	}
}

// outage is a store whose Acquire fails as unreachable while down is set.
type outage struct {
	keyedStore
	down    atomic.Bool
	refused atomic.Int64
	first   atomic.Int64 // unix nanos of the first refusal
}

func (o *outage) firstRefusal() time.Time { return time.Unix(0, o.first.Load()) }

func (o *outage) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if o.down.Load() {
		o.first.CompareAndSwap(0, time.Now().UnixNano())
		o.refused.Add(1)
		return store.Lease{}, fmt.Errorf("%w: the test's outage", store.ErrUnavailable)
	}
	return o.keyedStore.Acquire(ctx, req)
}

// A slot that fires while another node holds the job (overlap = skip), and that node dies
// without recording the skip: the node that found it busy records it once the job is free.
// It was followed up and dropped without a record.
func TestSkipRecordedWhenTheHolderDied(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	sp, _ := jobfile.Job{Schedule: "@every 1s", TZ: "UTC"}.Spec()
	if _, err := f.stores[0].Acquire(ctx, store.AcquireRequest{Task: "held", Holder: "dead", RunID: "r-dead", TTL: 4 * time.Second}); err != nil {
		t.Fatal(err)
	}
	heldUntil := time.Now().Add(4 * time.Second)
	w := &witness{}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{workJob("held", "@every 1s", w.work(10*time.Millisecond))}})
	// The slots that fired well before the dead node's lease lapsed: a loaded machine may take
	// a while to try one, and one tried after the lapse rightly runs. From 1 s after the start:
	// a slot that fell before Run began was never the node's (it owes only the slots after it).
	var fired []string
	for sl := sp.Next(time.Now().Add(time.Second)); sl.Start.Before(heldUntil.Add(-1500 * time.Millisecond)); sl = sp.Next(sl.Start) {
		fired = append(fired, sl.Value)
	}
	if len(fired) == 0 {
		t.Fatal("no slot fires while the lease is held")
	}
	eventually(t, 20*time.Second, "the slots fired under the dead holder recorded", func() bool {
		return count(f.history("held"), store.Skipped, "held elsewhere") >= len(fired)
	})
	n.stop()
	runs, _ := w.snapshot()
	ran := map[string]bool{}
	for _, r := range runs {
		ran[r.Slot] = true
	}
	skipped := map[string]int{}
	for _, e := range f.history("held") {
		if e.State == store.Skipped {
			skipped[e.Slot]++
		}
	}
	for _, sl := range fired {
		if skipped[sl] != 1 || ran[sl] {
			t.Fatalf("slot %s: skipped %d times, ran %v (history %+v)", sl, skipped[sl], ran[sl], f.history("held"))
		}
	}
	for sl, k := range skipped { // any slot, the ones near the lapse too: skipped once or run, never both
		if k > 1 || ran[sl] {
			t.Fatalf("slot %s: skipped %d times, ran %v (history %+v)", sl, k, ran[sl], f.history("held"))
		}
	}
}

// A FIFO where a job's log file goes: the job runs, its output kept as the tail in the store only.
// Opening the FIFO for writing blocked until someone read it, and every launch of the job with it.
func TestLogFileFIFO(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(scheduler.LogFile(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := scheduler.Job{Job: jobfile.Job{Name: "fifo", Schedule: "@every 1s", TZ: "UTC", Command: []string{"echo", "hi"}}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, LogDir: dir, TailSize: 64})
	eventually(t, 8*time.Second, "the job ran despite the FIFO", func() bool { return count(f.history("fifo"), store.Succeeded, "") > 0 })
	n.stop()
}

// A symbolic link where a job's log file goes is not written through, even when it points to
// another file inside the log directory (which os.Root alone allows): another job's log here, or
// anything in a shared --log-dir. The job runs, its output kept as the tail in the store only; the
// target and the link stay as they were.
func TestLogFileLinkRefused(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.log")
	if err := os.WriteFile(other, []byte("another job's log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := scheduler.LogFile(dir, "linked")
	if err := os.Symlink("other.log", link); err != nil {
		t.Fatal(err)
	}
	j := scheduler.Job{Job: jobfile.Job{Name: "linked", Schedule: "@every 1s", TZ: "UTC", Command: []string{"echo", "0123456789"}}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, LogDir: dir, TailSize: 64})
	eventually(t, 8*time.Second, "two runs despite the link", func() bool { return count(f.history("linked"), store.Succeeded, "") >= 2 })
	n.stop()
	if b, err := os.ReadFile(other); err != nil || string(b) != "another job's log\n" {
		t.Fatalf("the file the link points to: %q, %v; want it untouched", b, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link: %v, %v; want it left as it is", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("log directory %v: want the link and its target only", ents)
	}
}

// The log directory is opened once: a swap of it for a link to elsewhere (by whoever may rename
// entries of a directory above it) does not move the daemon's writes there; rotation goes through
// the same handle.
func TestLogDirPinnedAndRotated(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	base := t.TempDir()
	dir, elsewhere := filepath.Join(base, "logs"), filepath.Join(base, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	j := scheduler.Job{Job: jobfile.Job{Name: "pin", Schedule: "@every 1s", TZ: "UTC", Command: []string{"echo", "0123456789"}}}
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, LogDir: dir, LogSize: 16})
	eventually(t, 8*time.Second, "a first run", func() bool { return count(f.history("pin"), store.Succeeded, "") > 0 })
	moved := filepath.Join(base, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	before := count(f.history("pin"), store.Succeeded, "")
	eventually(t, 8*time.Second, "two more runs", func() bool { return count(f.history("pin"), store.Succeeded, "") >= before+2 })
	n.stop()
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("the daemon wrote through the swapped-in link: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(moved, "pin.log.1")); err != nil {
		t.Fatalf("no rotated log in the directory the daemon opened: %v", err)
	}
}

// A slot of an overlap = skip job that fires while the node runs the job and the node then
// drains has a record, whoever stops with it:
//   - "decided": the skip was decided (the previous slot runs) and its record, written off the
//     dispatcher with Run's context, failed as the drain cancelled it ("could not record a
//     skipped slot … context canceled", found with 150 jobs on two daemons stopped together);
//   - "queued": the previous slot's launch had not begun its attempt (a loaded store), so the
//     slot was queued behind it, and the drain dropped it without a record; the next start's
//     account walks the slots after the newest recorded one and never saw it.
//
// A store whose Slot answers late stands in for a loaded one.
func TestSkipAsTheNodeDrainsIsRecorded(t *testing.T) {
	t.Parallel()
	t.Run("decided", func(t *testing.T) { t.Parallel(); skipAsTheNodeDrains(t, false) })
	t.Run("queued", func(t *testing.T) { t.Parallel(); skipAsTheNodeDrains(t, true) })
}

func skipAsTheNodeDrains(t *testing.T, queued bool) {
	f := newFleet(t, 1)
	late := &lateSlot{keyedStore: f.stores[0].(keyedStore), delay: time.Second}
	late.on.Store(queued) // queued: the first launch's own read is late, its attempt begins after the next fire
	f.stores[0] = late
	w := &witness{}
	j := workJob("late", "@every 1s", w.work(2500*time.Millisecond))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 10*time.Second, "the first run started", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	late.on.Store(true)
	runs, _ := w.snapshot()
	sp, _ := j.Spec()
	first, _ := sp.Parse(runs[0].Slot)
	skipped := sp.Next(first)
	time.Sleep(time.Until(skipped.Start.Add(300 * time.Millisecond))) // it fired: skipped, or queued
	n.stop()
	for _, e := range f.history("late") {
		if e.Slot == skipped.Value {
			return
		}
	}
	t.Fatalf("slot %s, skipped as the node drained, has no record: %+v", skipped.Value, f.history("late"))
}

// lateSlot is a store whose Slot reads answer after delay while on is set (a loaded store).
type lateSlot struct {
	keyedStore
	delay time.Duration
	on    atomic.Bool
}

func (l *lateSlot) Slot(ctx context.Context, task, sl string) (store.SlotState, error) {
	if l.on.Load() {
		time.Sleep(l.delay)
	}
	return l.keyedStore.Slot(ctx, task, sl)
}

// A buffer-one job longer than its period: slots that fired while a node that died held the job
// are followed up here, but this node, once it has the job, runs it back to back and its lease is
// never free at a poll. They waited for ever, neither run nor recorded (a kill -9 of the node with
// a slot in its queue, on real processes). Now they are queued here or recorded skipped.
func TestBufferOneSlotsOfADeadHolderAreNotLost(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1)
	ctx := context.Background()
	sp, _ := jobfile.Job{Schedule: "@every 1s", TZ: "UTC"}.Spec()
	w := &witness{}
	j := workJob("bufdead", "@every 1s", w.work(2500*time.Millisecond))
	j.Overlap = "buffer-one"
	// The dead node's grant, taken just after a slot's fire: the next slots fire while it is held.
	time.Sleep(time.Until(sp.Next(time.Now()).Start.Add(100 * time.Millisecond)))
	if _, err := f.stores[0].Acquire(ctx, store.AcquireRequest{Task: "bufdead", Holder: "dead", RunID: "r-dead", TTL: 3500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// A poll slower than the period: the lease's lapse is taken by the next fire, not a follow-up.
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}, Drain: 10 * time.Second, Poll: 3 * time.Second})
	time.Sleep(12 * time.Second)
	n.stop()
	// The slots that fired while the dead node held the job (from 1 s after the start: a slot
	// that fell before Run began was never this node's), each with an attempt or a skip.
	var lost []string
	for sl := sp.Next(start.Add(time.Second)); sl.Start.Before(start.Add(3500 * time.Millisecond)); sl = sp.Next(sl.Start) {
		h, err := f.stores[0].History(ctx, store.HistoryQuery{Task: "bufdead", Slot: sl.Value})
		if err != nil {
			t.Fatal(err)
		}
		if len(h) == 0 {
			lost = append(lost, sl.Value)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("slots %v fired while the dead node held the job and have no record: %+v", lost, f.history("bufdead"))
	}
	if _, overlap := w.snapshot(); overlap > 0 {
		t.Fatalf("two runs at once: %d", overlap)
	}
}
