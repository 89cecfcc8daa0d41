package metrics

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"strconv"
	"time"

	"github.com/once-run/once/store"
)

const (
	// taskScan is how many of a task's newest entries its first read takes.
	taskScan = 100
	// loadBudget bounds the time one scrape spends on first reads of tasks (at least minLoads are
	// made); the others are read by the next scrapes.
	loadBudget = 500 * time.Millisecond
	minLoads   = 10
	// relistEvery paces the listing of a TaskLister's tasks; maxListPages bounds one listing.
	relistEvery  = 5 * time.Minute
	maxListPages = 1000
	// maxLeftOut bounds the names remembered (as hashes) to count the tasks left out.
	maxLeftOut = 1 << 20
)

// durationBuckets are once_attempt_duration_seconds' upper bounds: a second to a day.
var durationBuckets = []float64{1, 10, 60, 300, 900, 3600, 10800, 43200, 86400}

// The label values of the counters, in their order in task.
var (
	endedStates = []store.State{store.Succeeded, store.Failed, store.Unknown}
	eventKinds  = store.EventKinds
)

// last is a task's latest attempt.
type last struct {
	id      string
	slot    string
	number  int
	state   store.State
	started time.Time
	// resolved is a person's decision on it (once resolve: Succeeded or Failed), "" when none;
	// checked is when its slot was last read for one (zero: not yet).
	resolved store.State
	checked  time.Time
}

// shown is the state exported: a person's decision counts as the attempt's outcome, as on the
// dashboard (an unknown attempt resolved as succeeded is done, not unknown).
func (l *last) shown() store.State {
	if l.resolved != "" {
		return l.resolved
	}
	return l.state
}

// task is what the collector knows of one task.
type task struct {
	last     *last
	success  time.Time    // when its latest succeeded attempt ended
	attempts [3]uint64    // ended attempts counted, by endedStates
	events   [4]uint64    // events counted, by eventKinds
	buckets  []uint64     // cumulative counts of durations, by durationBuckets
	sum      float64      // seconds
	n        uint64       // durations counted
	waiting  int          // slots waiting for review
	gone     int          // attempts still running whose holder's grant is gone (store.ReadRunning)
	lease    *store.Lease // nil when not held; of seats (--limit), the one that expires last
	// newest is the newest attempt seen under each token, of the task's live grants (setLeases
	// drops the others): an attempt running under a live grant that is its newest is still going
	// (checkRunning), for every seat of a task of --limit N.
	newest map[int64]newestAttempt
	// holders hold the task's live grants: the lease's holder, or each seat's (several at once
	// under --limit), distinct, sorted, at most maxLeaseHolders.
	holders []string
	// successUnknown: the first read found no success among the task's newest store.SuccessScan
	// attempts and did not read the older ones (once_task_last_success_unknown, while success is zero).
	successUnknown bool
}

// newestAttempt is an attempt's identity (attemptID) and start.
type newestAttempt struct {
	id      string
	started time.Time
}

// see takes what an attempt says about the task's latest attempt, its grant's newest attempt and
// the task's latest success. An attempt read again is never taken back from ended to running.
func (tk *task) see(id string, a store.Attempt) {
	if n, ok := tk.newest[a.Token]; !ok || a.StartedAt.After(n.started) {
		if tk.newest == nil {
			tk.newest = map[int64]newestAttempt{}
		}
		tk.newest[a.Token] = newestAttempt{id: id, started: a.StartedAt}
	}
	switch l := tk.last; {
	case l == nil || a.StartedAt.After(l.started):
		tk.last = &last{id: id, slot: a.Slot, number: a.Number, state: a.State, started: a.StartedAt}
	case l.id == id && !(l.state != store.Running && a.State == store.Running):
		l.state = a.State
	}
	if l := tk.last; l.id == id && a.Resolution != nil {
		l.resolved = a.Resolution.As
	}
	tk.succeeded(a)
}

// succeeded takes a succeeded attempt's end as the task's latest success when it is later.
func (tk *task) succeeded(a store.Attempt) {
	if at := endOf(a); a.State == store.Succeeded && at.After(tk.success) {
		tk.success = at
	}
}

func endOf(a store.Attempt) time.Time {
	if a.EndedAt != nil {
		return *a.EndedAt
	}
	return a.StartedAt
}

// count counts an ended attempt and its duration.
func (tk *task) count(a store.Attempt) {
	for i, st := range endedStates {
		if a.State == st {
			tk.attempts[i]++
		}
	}
	if a.EndedAt == nil {
		return
	}
	d := a.EndedAt.Sub(a.StartedAt).Seconds()
	if d < 0 {
		d = 0
	}
	if tk.buckets == nil {
		tk.buckets = make([]uint64, len(durationBuckets))
	}
	for i, ub := range durationBuckets {
		if d <= ub {
			tk.buckets[i]++
		}
	}
	tk.sum += d
	tk.n++
}

func (tk *task) event(kind store.State) {
	for i, k := range eventKinds {
		if kind == k {
			tk.events[i]++
		}
	}
}

// tracker is the collector's in-process state: the tasks it exports and the tail of history.
type tracker struct {
	st      store.Store
	max     int
	overlap time.Duration
	tasks   map[string]*task
	toLoad  []string // tasks not read yet, in the order found
	leftOut map[uint64]struct{}
	seed    maphash.Seed
	live    map[string]map[int64]bool // the tokens of each task's live grants (every seat), from the last Leases
	// The tail.
	started  bool
	mark     *store.Cursor        // the newest entry seen
	bootFrom string               // the cursor an interrupted bootstrap goes on from ("" at first)
	booted   int                  // the entries the bootstrap has read so far
	resume   string               // where the last tail stopped at its budget ("" when it did not)
	seen     map[string]time.Time // entries counted (and those before the start), by identity
	running  map[string]*run      // running attempts, by attemptID
	listedAt time.Time
}

func newTracker(st store.Store, max int) *tracker {
	return &tracker{st: st, max: max, overlap: defaultOverlap, tasks: map[string]*task{}, leftOut: map[uint64]struct{}{},
		seed: maphash.MakeSeed(), seen: map[string]time.Time{}, running: map[string]*run{}}
}

// task returns the task's state, adding it when there is room; nil for a task left out.
func (t *tracker) task(name string) *task {
	if tk, ok := t.tasks[name]; ok {
		return tk
	}
	if len(t.tasks) >= t.max {
		if len(t.leftOut) < maxLeftOut {
			t.leftOut[maphash.String(t.seed, name)] = struct{}{}
		}
		return nil
	}
	tk := &task{}
	t.tasks[name] = tk
	t.toLoad = append(t.toLoad, name)
	return tk
}

// refresh reads what changed in the store since the last scrape. Each read that fails is in
// the error; the others are still made.
func (t *tracker) refresh(ctx context.Context, now time.Time) error {
	var errs []error
	if !t.started {
		errs = append(errs, t.bootstrap(ctx, now))
	} else {
		errs = append(errs, t.tail(ctx, now))
	}
	// The attempts running and the leases, read together (store.ReadRunning, once status's read):
	// when the list cannot be read, the leases alone.
	rr, leases, rerr := store.ReadRunning(ctx, t.st, store.MaxRunningList)
	lerr := rerr
	if rerr != nil && ctx.Err() == nil {
		leases, lerr = t.st.Leases(ctx)
	}
	if lerr == nil {
		t.setLeases(leases)
	}
	if rerr == nil {
		t.setGone(rr)
	}
	waiting, werr := t.st.Waiting(ctx)
	if werr == nil {
		t.setWaiting(waiting)
	}
	errs = append(errs, rerr, werr, t.list(ctx, now), t.load(ctx))
	if lerr == nil && t.started {
		errs = append(errs, t.checkRunning(ctx, now))
	}
	if t.started {
		errs = append(errs, t.checkResolved(ctx, now))
	}
	t.prune(now)
	return errors.Join(errs...)
}

// maxLeaseHolders bounds the holder series of one task: a task of --limit 1000 may have as many
// seat holders.
const maxLeaseHolders = 10

// setLeases keeps each task's live grants: every seat of a task of --limit N is listed (Leases).
// A task's newest attempt by token is kept for its live grants only.
func (t *tracker) setLeases(ls []store.Lease) {
	t.live = store.LiveTokens(ls)
	for name, tk := range t.tasks {
		tk.lease, tk.holders = nil, nil
		for token := range tk.newest {
			if !t.live[name][token] {
				delete(tk.newest, token)
			}
		}
	}
	for _, l := range ls {
		tk := t.task(l.Task)
		if tk == nil {
			continue
		}
		if tk.lease == nil || l.Expires.After(tk.lease.Expires) {
			tk.lease = &l
		}
		if i, found := slices.BinarySearch(tk.holders, l.Holder); !found && i < maxLeaseHolders {
			tk.holders = slices.Insert(tk.holders, i, l.Holder)
			tk.holders = tk.holders[:min(len(tk.holders), maxLeaseHolders)]
		}
	}
}

// setGone counts each task's attempts still running whose holder's grant is gone. It counts the
// attempts ReadRunning lists: at most store.MaxRunningList of the store's index, none of a task
// it cannot list (RunningRead.Unlisted), none on a store that cannot list them.
func (t *tracker) setGone(rr store.RunningRead) {
	for _, tk := range t.tasks {
		tk.gone = 0
	}
	for _, r := range rr.Attempts {
		if r.Lease != store.LeaseGone {
			continue
		}
		if tk := t.task(r.Task); tk != nil {
			tk.gone++
		}
	}
}

func (t *tracker) setWaiting(ws []store.SlotState) {
	for _, tk := range t.tasks {
		tk.waiting = 0
	}
	for _, w := range ws {
		if tk := t.task(w.Task); tk != nil {
			tk.waiting++
		}
	}
}

// list adds the tasks a TaskLister knows (every relistEvery).
func (t *tracker) list(ctx context.Context, now time.Time) error {
	tl, ok := t.st.(store.TaskLister)
	if !ok || (!t.listedAt.IsZero() && now.Sub(t.listedAt) < relistEvery) {
		return nil
	}
	after := ""
	for range maxListPages {
		names, err := tl.Tasks(ctx, after, store.MaxTasksPage)
		if err != nil {
			return err
		}
		for _, n := range names {
			t.task(n)
		}
		if len(names) < store.MaxTasksPage {
			break
		}
		after = names[len(names)-1]
	}
	t.listedAt = now
	return nil
}

// load makes the first reads of the tasks found since the last scrape, within loadBudget.
func (t *tracker) load(ctx context.Context) error {
	start := time.Now()
	for n := 0; len(t.toLoad) > 0; n++ {
		if n >= minLoads && time.Since(start) > loadBudget {
			return nil
		}
		name := t.toLoad[0]
		if err := t.loadTask(ctx, name, t.tasks[name]); err != nil {
			return err
		}
		t.toLoad = t.toLoad[1:]
	}
	t.toLoad = nil
	return nil
}

// loadTask is a task's first read: its newest taskScan entries give its latest attempt and the
// attempts running (counted when they end, as in bootstrap); its latest success, when not among
// them, is one more read, of its newest store.SuccessScan attempts (store.ReadLastSuccess). When
// none of those succeeded and the task has older ones, the latest success is not known: its
// series stays absent and once_task_last_success_unknown is 1 until the tail sees a success, so
// that OnceNoRecentSuccess still fires for a task failing that long.
func (t *tracker) loadTask(ctx context.Context, name string, tk *task) error {
	err := store.EachHistory(ctx, t.st, store.HistoryQuery{Task: name, Limit: taskScan}, func(e store.Entry) error {
		if !e.State.IsAttempt() {
			return nil
		}
		id := attemptID(e.Attempt)
		tk.see(id, e.Attempt)
		if _, counted := t.seen[id]; e.State == store.Running && !counted {
			t.track(id, e.Attempt)
		}
		return nil
	})
	if err != nil || !tk.success.IsZero() {
		return err
	}
	ls, err := store.ReadLastSuccess(ctx, t.st, name)
	if err != nil {
		return err
	}
	if ls.Attempt != nil {
		tk.succeeded(*ls.Attempt) // not the latest attempt: only the latest success
	}
	tk.successUnknown = ls.Unknown
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
