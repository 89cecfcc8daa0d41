package scheduler

import (
	"context"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// watch is a slot this node follows up because someone else held it, or because its attempt may
// be tried again: the node reads it once the task's lease is no longer held.
type watch struct {
	slot         string
	runIfUntried bool      // run it when nobody has tried it (it waited behind another slot)
	retryUntil   time.Time // a failed attempt is tried again only before this (the next slot's fire)
	since        time.Time
}

// maxWatch bounds how long a slot is followed up (a holder that keeps renewing for days).
const maxWatch = 7 * 24 * time.Hour

// maxWatches bounds the slots followed up per job: the oldest go first.
const maxWatches = 16

func (js *jobState) watchLocked(sl string, runIfUntried bool) {
	if sl == "" || js.removed {
		return
	}
	now := js.s.clock.now()
	w := js.watches[sl]
	if w == nil {
		if len(js.watches) >= maxWatches {
			js.dropOldestLocked()
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
}

func (js *jobState) dropOldestLocked() {
	var old *watch
	for _, w := range js.watches {
		if old == nil || w.since.Before(old.since) {
			old = w
		}
	}
	if old != nil {
		delete(js.watches, old.slot)
	}
}

// followUp reads, for each watched slot whose task's lease is no longer held, the slot's state
// and acts on it (see decide). One Leases call per poll, and a Slot read per slot that was let go.
func (s *Scheduler) followUp(ctx context.Context) {
	var jobs []*jobState
	for _, js := range s.snapshot() {
		js.mu.Lock()
		if len(js.watches) > 0 {
			jobs = append(jobs, js)
		}
		js.mu.Unlock()
	}
	if len(jobs) == 0 {
		return
	}
	leases, err := s.c.Store.Leases(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot read the leases to follow up slots", "err", err)
		}
		return
	}
	held := make(map[string]bool, len(leases))
	for _, l := range leases {
		held[l.Task] = true
	}
	now := s.clock.now()
	for _, js := range jobs {
		js.mu.Lock()
		name, idle := js.job.Name, js.active == nil
		ws := make([]*watch, 0, len(js.watches))
		for _, w := range js.watches {
			ws = append(ws, w)
		}
		js.mu.Unlock()
		if held[name] || !idle {
			continue
		}
		for _, w := range ws {
			s.followSlot(ctx, js, w, now)
		}
	}
}

// followSlot reads one watched slot and acts: drop the watch, keep it, or launch the slot.
func (s *Scheduler) followSlot(ctx context.Context, js *jobState, w *watch, now time.Time) {
	js.mu.Lock()
	jb := js.job
	js.mu.Unlock()
	st, err := s.c.Store.Slot(ctx, jb.Name, w.slot)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot read a watched slot", "task", jb.Name, "slot", w.slot, "err", err)
		}
		return
	}
	act, untried := followAction(st, w, jb, now)
	if act == keep {
		if now.Sub(w.since) < maxWatch {
			return
		}
		act = drop
	}
	js.mu.Lock()
	if js.watches[w.slot] == w {
		delete(js.watches, w.slot)
	}
	js.mu.Unlock()
	if act == run {
		js.submit(ctx, launch{slots: []string{w.slot}, untried: untried, why: whyFollow})
	}
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
