package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// watch is a slot this node follows up because someone else held it, or because its attempt may
// be tried again: the node reads it once the task's lease is no longer held.
type watch struct {
	slot         string
	runIfUntried bool      // run it when nobody has tried it (it waited behind another slot)
	retryUntil   time.Time // a failed attempt is tried again only before this (the next slot's fire)
	since        time.Time
	// skipNote, when set, records the slot skipped (overlap = skip) if it is still untried once a
	// seat is free, at two follow-ups in a row (a node that took a seat for it may not have begun
	// its attempt at the first): it fired while every seat of the job was taken, on several nodes,
	// or while another node held the job (which may have died or be draining, and fires nothing).
	skipNote string
	skipSeen bool // the first of those two follow-ups was made
	// missed records skipNote as a missed event instead (recordHoles: a slot a node that stopped
	// left without a record, found behind the job's newest slot), and not before holeHoldOff.
	missed bool
	// rest: a slot a catch-up that ended early did not reach (topUpLocked); dropped for room, it
	// waits in jobState.rest again.
	rest bool
	// owed: this node owes the slot its record (skipNote): its record failed here, or its launch
	// did (failedNote). A drain tries it once more (recordOwed): no other node knows of it.
	owed bool
}

// maxWatch bounds how long a slot is followed up (a holder that keeps renewing for days).
const maxWatch = 7 * 24 * time.Hour

// maxWatches bounds the slots followed up per job: the oldest go first.
const maxWatches = 16

// watchLocked follows slot sl up; it returns the watch, nil when the job is gone.
func (js *jobState) watchLocked(ctx context.Context, sl string, runIfUntried bool) *watch {
	if sl == "" || js.removed {
		return nil
	}
	now := js.s.clock.now()
	w := js.watches[sl]
	if w == nil {
		if len(js.watches) >= maxWatches {
			js.dropOldestLocked(ctx)
		}
		w = &watch{slot: sl, since: now}
		js.watches[sl] = w
	}
	w.runIfUntried = w.runIfUntried || runIfUntried
	w.retryUntil = now.Add(js.job.RetryBackoff)
	if t, err := js.spec.Parse(sl); err == nil {
		if nx := js.spec.Next(t); nx.Value != "" {
			w.retryUntil = fireTime(js.job.Name, nx, js.job.Jitter)
		}
	}
	return w
}

// dropOldestLocked stops following the oldest watched slot. One that fired while the job was
// held elsewhere (overlap = skip) is recorded as skipped now, unless it has an attempt: a holder
// that runs for hours over a frequent schedule must not make the slots it covered vanish. One to
// a catch-up did not reach (followRest) waits in js.rest for room again.
func (js *jobState) dropOldestLocked(ctx context.Context) {
	var old *watch
	for _, w := range js.watches {
		if old == nil || w.since.Before(old.since) {
			old = w
		}
	}
	if old != nil {
		delete(js.watches, old.slot)
		switch {
		case old.skipNote != "" && old.missed:
			js.s.holeMissed(context.WithoutCancel(ctx), js.job, old.slot, old.skipNote)
		case old.skipNote != "":
			// Not the launch's ctx: it ends as the launch that found the job busy returns, before
			// this write (off the dispatcher) is made.
			js.s.overlapSkip(context.WithoutCancel(ctx), js.job, old.slot, nil, old.skipNote)
		case old.rest && !slices.Contains(js.rest, old.slot):
			// Waits for room again (topUpLocked), not forgotten: a catch-up's slot that nobody
			// tried would be left without a record (its account does not look that far back).
			js.rest = append([]string{old.slot}, js.rest...)
		}
	}
}

// followUp reads, for each watched slot whose task's lease is no longer held (for a job with a
// limit: a seat is free), the slot's state and acts on it (see followAction). One Leases call per
// poll, and a Slot read per slot that was let go.
func (s *Scheduler) followUp(ctx context.Context) {
	var jobs []*jobState
	for _, js := range s.snapshot() {
		js.mu.Lock()
		if !s.isDraining() {
			js.topUpLocked(ctx) // a watch let go at the last poll made room (followRest)
		}
		if len(js.watches) > 0 {
			jobs = append(jobs, js)
		}
		js.mu.Unlock()
	}
	if len(jobs) == 0 {
		return
	}
	leases, err := s.readLeases(ctx)
	if err != nil {
		if !stopping(ctx) {
			s.log.Warn("cannot read the leases to follow up slots", "err", err)
		}
		return
	}
	live := liveGrants(leases)
	now := s.clock.now()
	for _, js := range jobs {
		js.mu.Lock()
		name, limit, full := js.job.Name, js.limitLocked(), js.fullLocked()
		if full && js.job.Overlap == "buffer-one" {
			js.queueWaitingLocked(ctx)
		}
		ws := make([]*watch, 0, len(js.watches))
		for _, w := range js.watches {
			ws = append(ws, w)
		}
		olderFirst(ws, js.spec)
		js.mu.Unlock()
		g := live[name]
		if full || g.exclusive || len(g.seats) >= limit {
			continue
		}
		for _, w := range ws {
			s.followSlot(ctx, js, w, now, g.seats)
		}
	}
}

// queueWaitingLocked takes the slots a buffer-one job's watches wait to run once untried (a slot
// that waited on a node behind another slot) into this node's own queue, while this node runs the
// job: a job longer than its period runs back to back here, its lease is never free at a poll, and
// a slot that waited on a node that died waited for ever, neither run nor recorded (a drain then
// dropped the watch, and a start's account finds no skip after it). Queued behind the running
// launch, it runs next, once, if still untried; when a launch already waits in the queue, it is
// recorded skipped instead, as buffer-one skips a further slot; once queued, it holds that place
// (bufferedLocked): a fire behind it is skipped, as behind a queued fire.
func (js *jobState) queueWaitingLocked(ctx context.Context) {
	var waiting []*watch
	for _, w := range js.watches {
		if w.runIfUntried && w.skipNote == "" && !w.missed && !w.rest {
			waiting = append(waiting, w)
		}
	}
	olderFirst(waiting, js.spec)
	for _, w := range waiting {
		delete(js.watches, w.slot)
		q, full := js.bufferedLocked()
		if !full {
			js.s.log.Info("a slot that waited on another node runs here next (buffer-one): that node no longer holds the job", "task", js.job.Name, "slot", w.slot)
			js.enqueueLocked(launch{slots: []string{w.slot}, untried: true, why: whyFollow, takenOver: true})
			continue
		}
		var running *once.Run
		if len(js.actives) > 0 {
			running = js.actives[0].run
		}
		js.s.overlapSkip(ctx, js.job, w.slot, running, fmt.Sprintf("overlap = buffer-one: slot %s already waits on %s (slot %s waited on a node that no longer holds the job)",
			q.slots[0], js.s.c.Node, w.slot))
	}
}

// olderFirst sorts watches oldest slot first (a slot the job's schedule cannot read, a trigger's,
// by when it was first watched), so that the slots a launch left when it found the task held
// elsewhere (a catch-up's, oldest first) run in that order once the task is free.
func olderFirst(ws []*watch, spec slot.Spec) {
	start := func(w *watch) time.Time {
		if t, err := spec.Parse(w.slot); err == nil {
			return t
		}
		return w.since
	}
	slices.SortFunc(ws, func(a, b *watch) int {
		return cmp.Or(start(a).Compare(start(b)), strings.Compare(a.slot, b.slot))
	})
}

// leaseView is the fleet's leases as the newest read showed them, and when (this node's
// monotonic clock): the accounts of a start share one read (recentLeases) rather than one each.
type leaseView struct {
	mu     sync.Mutex // held across a read: accounts that ask at once wait for it and share it
	at     time.Time
	fleet  time.Time // at by the fleet's clock (clock.now): what recentLeases compares entries with
	leases []store.Lease
}

// readLeases reads the fleet's leases (one Leases call) and keeps them for recentLeases.
func (s *Scheduler) readLeases(ctx context.Context) ([]store.Lease, error) {
	v := &s.leases
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.readLocked(ctx, s)
}

func (v *leaseView) readLocked(ctx context.Context, s *Scheduler) ([]store.Lease, error) {
	start, fleet := time.Now(), s.clock.now()
	ls, err := s.c.Store.Leases(ctx)
	if err == nil {
		v.at, v.fleet, v.leases = start, fleet, ls
	}
	return ls, err
}

// recentLeases is the fleet's leases as a read begun at most a poll ago, and more than
// MaxClockOffset after newest (the store's time of the newest entry of the task the caller read),
// showed them (followUp acts on a poll's read too), else read now: a start that accounts 1,000
// jobs with holes reads them once per poll, not once per job (each read lists every lease of the
// fleet). A node that took the task's lease after an older read recorded an entry as it did (an
// attempt begun, a skip): that read would not show the lease, and a hole the node queued behind
// it would be recorded missed rather than run.
func (s *Scheduler) recentLeases(ctx context.Context, newest time.Time) ([]store.Lease, error) {
	v := &s.leases
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.at.IsZero() && time.Since(v.at) < s.c.Poll && v.fleet.After(newest.Add(s.c.MaxClockOffset)) {
		return v.leases, nil
	}
	return v.readLocked(ctx, s)
}

// grants are a task's live grants: its exclusive lease, or its seats by token.
type grants struct {
	exclusive bool
	seats     map[int64]bool
}

func liveGrants(leases []store.Lease) map[string]grants {
	out := make(map[string]grants, len(leases))
	for _, l := range leases {
		g := out[l.Task]
		if l.Limit < 2 {
			g.exclusive = true
		} else {
			if g.seats == nil {
				g.seats = map[int64]bool{}
			}
			g.seats[l.Token] = true
		}
		out[l.Task] = g
	}
	return out
}

// followSlot reads one watched slot and acts: drop the watch, keep it, or launch the slot. seats
// are the task's live seats: a slot one of them runs is kept.
func (s *Scheduler) followSlot(ctx context.Context, js *jobState, w *watch, now time.Time, seats map[int64]bool) {
	js.mu.Lock()
	jb := js.job
	js.mu.Unlock()
	st, err := s.c.Store.Slot(ctx, jb.Name, w.slot)
	if err != nil {
		if !stopping(ctx) {
			s.log.Warn("cannot read a watched slot", "task", jb.Name, "slot", w.slot, "err", err)
		}
		return
	}
	act, untried := followAction(st, w, jb, now)
	if l := st.Last; l != nil && l.State == store.Running && seats[l.Token] {
		act = keep // another seat runs it
	}
	if act == run && untried { // it waited behind another slot, unless that node skipped it
		switch k, skipped, err := s.wasSkipped(ctx, jb.Name, w.slot); {
		case err != nil:
			act = keep
		case skipped && isLaunchClaim(k):
			act = keep // a live run of another node claimed it: its attempt is about to be recorded
		case skipped:
			act = drop
		}
	}
	if act == drop && st.Last == nil {
		js.mu.Lock()
		note, seen, missed := w.skipNote, w.skipSeen, w.missed
		early := missed && now.Sub(w.since) < s.holeHoldOff() // a live follower runs it first
		w.skipSeen = true
		js.mu.Unlock()
		if note != "" && (!seen || early) {
			return // look once more at the next follow-up
		}
		js.unwatch(w) // first: a record that loses to a run's claim follows the slot up anew (rewatch)
		switch {
		case note != "" && missed:
			s.holeMissed(ctx, jb, w.slot, note)
		case note != "":
			s.overlapSkip(ctx, jb, w.slot, nil, note)
		}
	}
	if act == keep {
		if now.Sub(w.since) < maxWatch {
			return
		}
		act = drop
	}
	js.unwatch(w)
	if act == run {
		js.submit(ctx, launch{slots: []string{w.slot}, untried: untried, why: whyFollow})
	}
}

// unwatch stops following w up, unless another watch of its slot took its place.
func (js *jobState) unwatch(w *watch) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.watches[w.slot] == w {
		delete(js.watches, w.slot)
	}
}

// wasSkipped is whether slot sl was claimed as not to run here (claimed): skipped by an overlap
// policy (overlapSkip's claim) or for a pause (a slot that waited there and met the pause, call),
// recorded missed (a hole: recordHoles), or claimed by a live run of another node (claimLaunch);
// k is the claim.
func (s *Scheduler) wasSkipped(ctx context.Context, task, sl string) (k store.Key, skipped bool, err error) {
	got, err := s.claimed(ctx, task, []string{sl})
	if err != nil {
		if !stopping(ctx) {
			s.log.Warn("cannot read whether a watched slot was skipped", "task", task, "slot", sl, "err", err)
		}
		return k, false, err
	}
	k, skipped = got[sl]
	return k, skipped, nil
}

type action int

const (
	drop action = iota // nothing more to do for the slot here
	keep               // look again at the next poll
	run                // launch the slot
)

// followAction is what a node does with a watched slot in state st, once nobody holds the task's
// lease. untried is whether the launch must find the slot untried.
//
//   - never tried: run it if it waited behind another slot (w.runIfUntried), else it was skipped;
//   - done (succeeded, or resolved as succeeded): drop;
//   - running with no lease held: its holder vanished: launch, so the guard marks it unknown and
//     the job's on-unknown policy decides (review, or rerun on this node);
//   - unknown: rerun when the policy says so, else it waits for a person: drop;
//   - failed: tried again after retry-backoff while the slot is the current one; when its attempts
//     are used up that launch is the guard's review (the slot then waits); else drop.
func followAction(st store.SlotState, w *watch, jb Job, now time.Time) (act action, untried bool) {
	last := st.Last
	switch {
	case last == nil:
		if w.runIfUntried {
			return run, true
		}
		return drop, false
	case once.Done(st):
		return drop, false
	case last.Resolution != nil: // resolved as failed: a person let it run again
		return run, false
	case last.State == store.Running:
		return run, false
	case last.State == store.Unknown:
		if jb.OnUnknown == string(once.PolicyRerun) {
			return run, false
		}
		return drop, false
	case last.State == store.Failed:
		if jb.RetryBackoff <= 0 || st.Waiting { // attempts used up: the guard's next call records the review
			return drop, false
		}
		if last.EndedAt != nil && now.Before(last.EndedAt.Add(jb.RetryBackoff)) {
			if now.After(w.retryUntil) {
				return drop, false
			}
			return keep, false
		}
		if now.After(w.retryUntil) {
			return drop, false
		}
		return run, false
	}
	return drop, false
}
