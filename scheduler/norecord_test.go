package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// A store whose connections went silent (docs/daemon.md#a-store-that-stops-answering) left two
// kinds of slot without any record, both found with internal/chaos's proxy on Redis and etcd
// (TestDaemonStoreFreeze): a skip whose record failed, and, on a job that fires every second, a
// slot whose launch failed once later slots ran. The stores here fail the same calls on purpose.

// A skip (overlap = skip) whose record failed was logged ("could not record a skipped slot") and
// dropped: the slot had no record. Now it is followed up and recorded once the job is free.
// "claim landed": the claim reached the store and its answer did not (the node gave up waiting,
// and could not give it back either); the next try found the key claimed, by this node itself,
// and recorded nothing.
func TestSkipWhoseRecordFailedIsRecorded(t *testing.T) {
	t.Parallel()
	t.Run("record failed", func(t *testing.T) { t.Parallel(); skipRecordFails(t, false, false) })
	t.Run("claim landed", func(t *testing.T) { t.Parallel(); skipRecordFails(t, true, false) })
	// The node drains at once, while the slot before still runs: no follow-up records it.
	t.Run("at a drain", func(t *testing.T) { t.Parallel(); skipRecordFails(t, false, true) })
}

func skipRecordFails(t *testing.T, claimLanded, drain bool) {
	f := newFleet(t, 1)
	fs := &failingSkip{keyedStore: f.stores[0].(keyedStore), claimLanded: claimLanded}
	f.stores[0] = fs
	w := &witness{}
	j := workJob("skipfail", "@every 1s", w.work(2500*time.Millisecond))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 10*time.Second, "the first run started", func() bool { r, _ := w.snapshot(); return len(r) > 0 })
	fs.on.Store(true)
	eventually(t, 10*time.Second, "a skip's record failed", func() bool { return fs.failed.Load() > 0 })
	fs.on.Store(false)
	failed := fs.slot()
	if !drain {
		f.awaitHistory("skipfail", 15*time.Second, func(h []store.Entry) bool { return hasEntry(h, failed) })
	}
	n.stop()
	runs, _ := w.snapshot()
	first, _ := j.Spec()
	from, _ := first.Parse(runs[0].Slot)
	checkRecordedOnce(t, f, "skipfail", first, from, runs)
	if !hasEntry(f.history("skipfail"), failed) {
		t.Fatalf("slot %s, whose skip could not be recorded, has no record: %+v", failed, f.history("skipfail"))
	}
}

// failingSkip is a store whose Record of a skipped event fails once while on is set (the slot's
// claim given back, as recordOnce does); claimLanded: its claim is made and then reported failed,
// and the claim's release fails too, as on a store whose connection went silent.
type failingSkip struct {
	keyedStore
	claimLanded bool
	on          atomic.Bool
	failed      atomic.Int64
	failedSlot  atomic.Value
	releases    atomic.Bool // the release after the landed claim fails
}

func (f *failingSkip) slot() string { s, _ := f.failedSlot.Load().(string); return s }

func (f *failingSkip) take(sl string) bool {
	if !f.on.Load() || !f.failed.CompareAndSwap(0, 1) {
		return false
	}
	f.failedSlot.Store(sl)
	return true
}

func (f *failingSkip) Record(ctx context.Context, e store.Event) error {
	if e.Kind == store.Skipped && !f.claimLanded && f.take(e.Slot) {
		return fmt.Errorf("%w: the test's silent store", store.ErrUnavailable)
	}
	return f.keyedStore.Record(ctx, e)
}

func (f *failingSkip) Claim(ctx context.Context, req store.ClaimRequest) ([]bool, error) {
	won, err := f.keyedStore.Claim(ctx, req)
	if f.claimLanded && err == nil && len(req.Keys) == 1 && strings.HasPrefix(req.Keys[0], "overlap ") && won[0] {
		if f.take(strings.Fields(req.Keys[0])[2]) {
			f.releases.Store(true)
			return nil, fmt.Errorf("%w: the test's silent store (the claim landed)", store.ErrUnavailable)
		}
	}
	return won, err
}

func (f *failingSkip) ReleaseKeys(ctx context.Context, scope string, keys []string, runID string) error {
	if f.releases.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: the test's silent store", store.ErrUnavailable)
	}
	return f.keyedStore.ReleaseKeys(ctx, scope, keys, runID)
}

// A launch that failed without a record (the store did not answer within its bound) while the
// job's next fires waited behind it: they ran as it ended, and the account that the failure asked
// for walked only the slots after the newest, which they had become. The failed slot had no
// record. Now the account looks for it behind the newest slot and records it missed.
// "account failed": the launch fails at once, and the account that stands in for the next fire
// reads a silent store: the fires after it run meanwhile, and the slot it stood in for had no
// record either.
func TestFailedLaunchBehindLaterRunsIsRecorded(t *testing.T) {
	t.Parallel()
	t.Run("launch hangs", func(t *testing.T) { t.Parallel(); failedBehind(t, 3*time.Second, 0) })
	t.Run("account failed", func(t *testing.T) { t.Parallel(); failedBehind(t, 0, 3*time.Second) })
}

func failedBehind(t *testing.T, hang, historyHang time.Duration) {
	f := newFleet(t, 1)
	fa := &failingAcquire{keyedStore: f.stores[0].(keyedStore), hang: hang, historyHang: historyHang}
	f.stores[0] = fa
	w := &witness{}
	j := workJob("failbehind", "@every 1s", w.work(10*time.Millisecond))
	n := f.start(0, scheduler.Config{Jobs: []scheduler.Job{j}})
	eventually(t, 10*time.Second, "two runs", func() bool { r, _ := w.snapshot(); return len(r) >= 2 })
	fa.on.Store(true)
	eventually(t, 15*time.Second, "a launch failed", func() bool { return fa.failed.Load() > 0 })
	sp, _ := j.Spec()
	failed := sp.Prev(fa.at()) // the slot whose launch asked for the lease then
	laterRan := func() bool {
		r, _ := w.snapshot()
		t, _ := sp.Parse(r[len(r)-1].Slot)
		return t.After(failed.Start.Add(3 * time.Second))
	}
	eventually(t, 15*time.Second, "later slots ran", laterRan)
	f.awaitHistory("failbehind", 15*time.Second, func(h []store.Entry) bool {
		for sl := failed; sl.Start.Before(failed.Start.Add(3 * time.Second)); sl = sp.Next(sl.Start) {
			if !hasEntry(h, sl.Value) {
				return false
			}
		}
		return true
	})
	n.stop()
	runs, _ := w.snapshot()
	from, _ := sp.Parse(runs[0].Slot)
	checkRecordedOnce(t, f, "failbehind", sp, from, runs)
	if !hasEntry(f.history("failbehind"), failed.Value) {
		t.Fatalf("slot %s, whose launch failed, has no record: %+v", failed.Value, f.history("failbehind"))
	}
}

// failingAcquire is a store whose first Acquire after on is set waits hang (a silent
// connection), then fails as unreachable.
type failingAcquire struct {
	keyedStore
	hang   time.Duration
	on     atomic.Bool
	failed atomic.Int64
	asked  atomic.Int64 // unix nanos of that Acquire
	// historyHang: the first History read after that failure waits historyHang, then fails.
	historyHang time.Duration
	history     atomic.Bool
}

func (f *failingAcquire) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	if f.historyHang > 0 && f.failed.Load() > 0 && f.history.CompareAndSwap(false, true) {
		select {
		case <-time.After(f.historyHang):
		case <-ctx.Done():
		}
		return nil, fmt.Errorf("%w: the test's silent store", store.ErrUnavailable)
	}
	return f.keyedStore.History(ctx, q)
}

func (f *failingAcquire) at() time.Time { return time.Unix(0, f.asked.Load()) }

func (f *failingAcquire) Acquire(ctx context.Context, req store.AcquireRequest) (store.Lease, error) {
	if f.on.CompareAndSwap(true, false) {
		f.asked.Store(time.Now().UnixNano())
		select {
		case <-time.After(f.hang):
		case <-ctx.Done():
		}
		f.failed.Add(1)
		return store.Lease{}, fmt.Errorf("%w: the test's silent store", store.ErrUnavailable)
	}
	return f.keyedStore.Acquire(ctx, req)
}

func hasEntry(h []store.Entry, sl string) bool {
	for _, e := range h {
		if e.Slot == sl {
			return true
		}
	}
	return false
}

// checkRecordedOnce fails t unless every slot of task from from to the newest recorded one has a
// record, none is recorded skipped or missed twice, or both run and so recorded, and none ran twice.
func checkRecordedOnce(t *testing.T, f *fleet, task string, sp slot.Spec, from time.Time, runs []once.Run) {
	t.Helper()
	h := f.history(task)
	ran, events := map[string]int{}, map[string]int{}
	for _, r := range runs {
		ran[r.Slot]++
	}
	newest := from
	for _, e := range h {
		if e.State == store.Skipped || e.State == store.Missed {
			events[e.Slot]++
		}
		if at, err := sp.Parse(e.Slot); err == nil && at.After(newest) {
			newest = at
		}
	}
	for sl := sp.Prev(from); !sl.Start.After(newest); sl = sp.Next(sl.Start) {
		switch {
		case !hasEntry(h, sl.Value):
			t.Errorf("slot %s has no record", sl.Value)
		case ran[sl.Value] > 1 || events[sl.Value] > 1 || ran[sl.Value] > 0 && events[sl.Value] > 0:
			t.Errorf("slot %s: ran %d times, recorded skipped or missed %d times", sl.Value, ran[sl.Value], events[sl.Value])
		}
	}
	if t.Failed() {
		t.Logf("history: %+v", h)
	}
}
