package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Why a launch is made, in log lines.
const (
	whyFire    = "fire"
	whyCatchUp = "catch-up"
	whyFollow  = "follow-up"
	whyTrigger = "trigger"
	whyRerun   = "rerun"
)

// launch is one guarded call of a job on this node: one slot, or a catch-up's slots oldest first.
type launch struct {
	slots   []string
	untried bool      // once.Options.Untried: run only slots nobody has tried
	why     string    // whyFire, …
	trigger string    // the trigger request's run id this launch answers, removed once it ran
	waited  bool      // it waited in the queue, where another node may have skipped its slot meanwhile
	fireAt  time.Time // a fire's: its slot's fire time (checkClaimedAtBegin)
	// takenOver: a buffer-one slot that waited on a node that no longer holds the job, queued
	// here (queueWaitingLocked); it holds the one place behind the running launch as a fire does.
	takenOver bool
}

// jobState is one job on this node: its definition, its next slot, and what this node runs of it.
type jobState struct {
	s *Scheduler

	mu      sync.Mutex
	job     Job
	spec    slot.Spec
	next    slot.Slot         // the next slot to fire (dispatcher)
	actives []*active         // the launches in progress on this node, oldest first; at most the job's limit
	queue   []launch          // launches waiting for a place among actives (buffer-one, replace, follow-ups)
	watches map[string]*watch // slots this node follows up, by slot
	// rest is the slots of sequences that ended early (followRest) waiting for room among watches,
	// oldest first: a running node does not account the job again until its next fire.
	rest        []string
	needAccount bool // a fire was refused: account before the next one
	// retryAccount, when set, has the account needAccount asks for tried at a poll from then on
	// (retryAccounts), not only before the job's next fire: a store error left slots to it, and
	// the next fire of a daily job is a day away. retryBackoff is the wait before it, doubled
	// by each account that fails again and cleared by one that does not.
	retryAccount time.Time
	retryBackoff time.Duration
	failedFrom   time.Time // the oldest slot a failed launch left without a record (or a job added by a reload: its first), until accounted
	// failed is the slots themselves that failed launches, and accounts that could not record
	// their missed slots, left without a record (of generation gen), until an account looked at
	// them: one that a later slot's record hides behind the job's newest slot is still found
	// (failedBehind); at most maxFailed, the newest.
	failed      []string
	gen         int           // bumped when a reload changes the schedule: failedFrom is of one generation
	removed     bool          // no longer in the jobs (a reload)
	lastFire    time.Time     // the fire time of the last slot fired, for Stats
	lastLag     time.Duration // how late after its fire time the dispatcher fired it
	cannotStart string        // why the job's command could not start here at its last launch (errCannotStart), "" once it did
}

// active is a launch in progress.
type active struct {
	l       launch
	cancel  context.CancelCauseFunc // ends a Work job's context (stop)
	runner  *job.Runner             // a command job's runner
	run     *once.Run               // the attempt running now, nil between attempts
	stopped string                  // why it was stopped (replace, timeout, drain), "" if not
	// signalled is closed once a stopped launch was signalled (after its note: stopLocked); nil
	// until it is stopped.
	signalled chan struct{}
	working   atomic.Bool // a Work job's function runs now (drain gives up on it after its grace)
	// workGrace is the grace of a Work launch (its job's definition when it started), 0 for a
	// command's; under jobState.mu.
	workGrace time.Duration
	// decided is how many of the launch's slots the guard decided (one result each, in order), and
	// busy whether the last one was Busy: a sequence that ends before its last slot leaves the
	// rest to followRest. Under jobState.mu.
	decided int
	busy    bool
}

// limit is how many launches of the job may run on this node at once: the job's limit (its seats
// in the fleet), at least 1.
func (js *jobState) limitLocked() int { return max(js.job.Limit, 1) }

// fullLocked is whether a new launch must wait (or meet the overlap policy).
func (js *jobState) fullLocked() bool { return len(js.actives) >= js.limitLocked() }

// activeLocked is whether a is still one of the launches in progress.
func (js *jobState) activeLocked(a *active) bool { return slices.Contains(js.actives, a) }

// accountLaterLocked has the job accounted before its next fire (needAccount) and, since a store
// error is why, at a poll after the wait it returns too (retryAccounts). The wait is the backoff
// plus up to a quarter more, at random: the jobs a store outage put off at one fire (a midnight's
// hundreds) are not all accounted again at the same poll.
func (js *jobState) accountLaterLocked(now time.Time) time.Duration {
	js.needAccount = true
	js.retryBackoff = min(max(2*js.retryBackoff, firstAccountRetry), maxAccountRetry)
	wait := js.retryBackoff + rand.N(js.retryBackoff/4)
	js.retryAccount = now.Add(wait)
	js.s.stats.accountsDeferred.Add(1)
	return wait
}

// firstAccountRetry and maxAccountRetry bound the wait before an account a store error put off
// is tried again at a poll (retryAccounts): the store back after a blip is used within a minute,
// and a long outage costs one account a job every maxAccountRetry.
const (
	firstAccountRetry = 30 * time.Second
	maxAccountRetry   = 15 * time.Minute
)

func (js *jobState) takeAccount() bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	a := js.needAccount
	js.needAccount, js.retryAccount = false, time.Time{}
	return a
}

// fire launches slot sl, applying the overlap policy when this node still runs the job.
func (s *Scheduler) fire(ctx context.Context, js *jobState, sl slot.Slot) {
	s.stats.fired.Add(1)
	js.mu.Lock()
	jb := js.job
	js.mu.Unlock()
	if _, paused := s.isPaused(jb.Name); paused {
		s.offDispatch(ctx, func(ctx context.Context) { s.pausedSlot(ctx, jb, sl.Value) })
		return
	}
	js.mu.Lock()
	l := launch{slots: []string{sl.Value}, untried: true, why: whyFire, fireAt: fireTime(jb.Name, sl, jb.Jitter)}
	if !js.fullLocked() {
		js.startLocked(ctx, l)
		js.mu.Unlock()
		return
	}
	defer js.mu.Unlock()
	js.overlapLocked(ctx, l)
}

// overlapLocked applies the job's overlap policy to launch l, due while this node runs as many
// launches of the job as its limit allows.
func (js *jobState) overlapLocked(ctx context.Context, l launch) {
	s, jb := js.s, js.job
	for _, x := range js.actives {
		// Between attempts, not started, or over (its lease given back, another node may already
		// run the new slot): not an overlap; the new slot starts when that launch has returned.
		if x.run == nil || x.run.Released() {
			js.enqueueLocked(l)
			return
		}
	}
	a := js.actives[0] // the oldest (replace: the only one, limit 1)
	running := a.run
	sl := l.slots[0]
	switch jb.Overlap {
	case "buffer-one":
		if q, ok := js.bufferedLocked(); ok {
			s.overlapSkip(ctx, jb, sl, running, fmt.Sprintf("overlap = buffer-one: slot %s already waits for slot %s to end", q.slots[0], running.Slot))
			return
		}
		s.log.Info("overlap: slot waits for the previous one to end (buffer-one)", "task", jb.Name, "slot", sl, "running_slot", running.Slot)
		js.enqueueLocked(l)
	case "replace":
		for i, q := range js.queue {
			if q.why == whyFire {
				s.overlapSkip(ctx, jb, q.slots[0], running, fmt.Sprintf("overlap = replace: slot %s came while it waited", sl))
				js.queue = slices.Delete(js.queue, i, i+1)
				break
			}
		}
		js.enqueueLocked(l)
		js.stopLocked(ctx, a, fmt.Sprintf("replaced by slot %s (overlap = replace)", sl))
	default: // skip
		note := fmt.Sprintf("overlap = skip: slot %s still runs on %s (attempt %d, run %s)",
			running.Slot, running.Holder, running.Attempt, running.RunID)
		if n := len(js.actives); n > 1 {
			note = fmt.Sprintf("overlap = skip: all %d seats are taken on %s (slots %s)", n, running.Holder, js.runningSlotsLocked())
		}
		s.overlapSkip(ctx, jb, sl, running, note)
	}
}

// bufferedLocked is the queued launch that holds a buffer-one job's one place behind its running
// launch: a fire, or a slot taken over from a node that no longer holds the job. Other queued
// launches (a trigger, a follow-up of a failed or vanished attempt) do not.
func (js *jobState) bufferedLocked() (launch, bool) {
	for _, q := range js.queue {
		if q.why == whyFire || q.takenOver {
			return q, true
		}
	}
	return launch{}, false
}

// runningSlotsLocked lists the slots the actives run (each has its attempt: overlapLocked), for notes.
func (js *jobState) runningSlotsLocked() string {
	out := make([]string, len(js.actives))
	for i, a := range js.actives {
		out[i] = a.run.Slot
	}
	return strings.Join(out, ", ")
}

// overlapSkip records that slot sl was not run because of an overlap, once for the fleet (the
// claim "overlap TASK SLOT" in recordedScope): the nodes that follow the slot up find the claim
// and do not run it.
func (s *Scheduler) overlapSkip(ctx context.Context, jb Job, sl string, running *once.Run, note string) {
	e := store.Event{Task: jb.Name, Slot: sl, Kind: store.Skipped, Holder: s.c.Node, Note: note}
	if running != nil {
		e.Token, e.RunID = running.Token, running.RunID
	}
	s.offDispatch(ctx, func(ctx context.Context) {
		// Decided at the fire; written now, perhaps seconds later on a loaded machine. A node that
		// fired the slot later, once the lease was given back, may be running it: then it is not
		// skipped (the window left is this read to the claim, docs/daemon.md#overlap).
		if st, err := s.c.Store.Slot(ctx, jb.Name, sl); err == nil && st.Last != nil {
			s.log.Info("not recorded as skipped: the slot has an attempt", "task", jb.Name, "slot", sl, "holder", st.Last.Holder)
			return
		}
		n, err := s.recordOnce(ctx, overlapKind, []store.Event{e})
		switch {
		case err != nil && s.settled.Load():
			s.log.Error("could not record a skipped slot as the node drains: it has no record (see once history; record it with once resolve or run it with once backfill)", "task", jb.Name, "slot", sl, "err", err)
		case err != nil:
			// Followed up, as a record that lost to a run's claim is (rewatch): once the job's
			// lease is free and the slot still untried at two follow-ups, the skip is recorded
			// again, until it is written; a drain tries once more (recordOwed). Dropped here, the
			// slot had no record at all (a store whose connections went silent for 10 s).
			s.log.Warn("could not record a skipped slot; it is followed up and recorded again", "task", jb.Name, "slot", sl, "err", err)
			s.rewatch(ctx, e, overlapKind+" "+jb.Name+" "+sl, true)
		case n == 1:
			s.log.Info("skipped", "task", jb.Name, "slot", sl, "reason", note)
		}
	})
}

// overlapKind is the kind of the claims of overlapSkip.
const overlapKind = "overlap"

// offDispatch runs a store write off the dispatcher (which must not wait for the store between
// fires) and the job's lock; Run waits for it before it returns. fn's context is ctx's values
// without its end, bounded by offDispatchTimeout: a write decided as the node begins to drain
// (Run's context ends) is still made; with ctx it failed ("context canceled") and its slot was
// left without a record.
func (s *Scheduler) offDispatch(ctx context.Context, fn func(context.Context)) {
	s.writes.Add(1)
	go func() {
		defer s.writes.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offDispatchTimeout)
		defer cancel()
		fn(ctx)
	}()
}

// offDispatchTimeout bounds a write made off the dispatcher, which Run waits for at shutdown.
const offDispatchTimeout = 10 * time.Second

// enqueueLocked queues l behind the active launch, once per slot set.
func (js *jobState) enqueueLocked(l launch) {
	for _, q := range js.queue {
		if slices.Equal(q.slots, l.slots) {
			return
		}
	}
	l.waited = true
	js.queue = append(js.queue, l)
}

// submit starts l now when the job is idle on this node, else queues it.
func (js *jobState) submit(ctx context.Context, l launch) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.removed {
		return
	}
	if !js.fullLocked() {
		js.startLocked(ctx, l)
		return
	}
	js.enqueueLocked(l)
}

// startLocked makes l an active launch and runs it in a goroutine; when it ends, the queued
// launches start while there is room (unless the scheduler drains).
func (js *jobState) startLocked(ctx context.Context, l launch) {
	s := js.s
	if s.isDraining() {
		return
	}
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	a := &active{l: l, cancel: cancel}
	js.actives = append(js.actives, a)
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer cancel(nil)
		js.call(lctx, a)
		if js.endLaunch(ctx, a) {
			s.forgetRetired(js)
		}
	}()
}

// endLaunch takes a, ended, from the launches in progress and starts the queued ones while there
// is room; true when the job was removed by a reload and none of its launches runs any more.
func (js *jobState) endLaunch(ctx context.Context, a *active) (retiredIdle bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.actives = slices.DeleteFunc(js.actives, func(x *active) bool { return x == a })
	for len(js.queue) > 0 && !js.removed && !js.fullLocked() && !js.s.isDraining() {
		next := js.queue[0]
		js.queue = js.queue[1:]
		js.startLocked(ctx, next)
	}
	return js.removed && len(js.actives) == 0
}

// forgetRetired drops js, a job a reload removed, from the jobs the drain waits for once none of
// its launches runs: a daemon reloaded for months would keep every job removed while it ran.
func (s *Scheduler) forgetRetired(js *jobState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js.mu.Lock()
	idle := len(js.actives) == 0
	js.mu.Unlock()
	if idle {
		s.retired = slices.DeleteFunc(s.retired, func(x *jobState) bool { return x == js })
	}
}

// stopLocked stops the launch a through its stop path: a command gets SIGTERM and is killed after
// its grace; a Work job's context is cancelled. Its outcome is still recorded.
//
// The attempt's note ("stopped: why") is written first, so that the outcome, recorded once the
// command ends, finds it; the signal follows. Both are made off the job's lock and off the caller
// (the dispatcher replacing a slot, a drain stopping every job): the note is a store write, up to
// stopNoteTimeout when the store does not answer, and made in line it held the dispatcher that
// long, and a drain's Nth job got its signal N times that late.
func (js *jobState) stopLocked(ctx context.Context, a *active, why string) {
	if a == nil || a.stopped != "" {
		return
	}
	a.stopped = why
	a.signalled = make(chan struct{})
	// A runner not made yet is stopped by callCommand as it starts, seeing a.stopped: exactly one
	// of the two signals it.
	r, runner := a.run, a.runner
	s := js.s
	s.log.Info("stopping the running attempt", "task", js.job.Name, "reason", why)
	s.offDispatch(ctx, func(ctx context.Context) {
		defer close(a.signalled)
		if r != nil {
			rctx, cancel := context.WithTimeout(ctx, stopNoteTimeout)
			if err := s.c.Store.Report(rctx, r.RunID, r.Token, store.Report{Note: "stopped: " + why}); err != nil {
				s.log.Debug("could not note why the attempt is stopped", "task", r.Task, "run_id", r.RunID, "err", err)
			}
			cancel()
		}
		if runner != nil {
			runner.Stop(syscall.SIGTERM)
		}
		a.cancel(fmt.Errorf("stopped: %s", why))
	})
}

// stopNoteTimeout bounds the write of a stopped attempt's note, which its signal waits for.
const stopNoteTimeout = 5 * time.Second
