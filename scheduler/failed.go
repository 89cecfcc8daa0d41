package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// A launch that fails without a record of its slot (the store did not answer: failedLaunch) has
// the job accounted before its next fire, which walks the slots after the newest slot of the
// job's history. That look-back ends at the newest slot on purpose: a slot before it with no
// record is not known to have been due (a finer new schedule's slot between two old entries, a
// slot of a job that was removed or paused, an old task of the same name), and only a slot a
// node is shown to have queued counts behind it (holes.go). But a job that fires every few
// seconds runs later slots before that account (the fires queued behind the failing launch start
// as it ends, and the new connections answer): the failed slot was then behind the newest one,
// and no account saw it again. The failed launch is itself the proof that its slot was due, so
// the node keeps the slots (jobState.failed), not only the oldest (failedFrom, which stands for a
// job with no history yet), and the account reads each one that lies behind the newest slot by
// then (failedBehind): one with no entry is a hole, caught up in the job's catch-up window or
// recorded missed (recordHoles, failedNote), once for the fleet.

// maxFailed bounds the slots a job keeps for its account (jobState.failed): the newest. An
// outage puts every fire of the job into an account while one is due (takeAccount), so a job
// adds a few slots per failed account, not one per fire.
const maxFailed = 1000

// failedNote is the note of a slot recorded missed because its launch failed without a record
// and a later slot ran before the account that looks for it.
const failedNote = "missed: its launch failed without a record (the store did not answer) and no node of the fleet ran it; outside its catch-up window"

// addFailedLocked adds slots to the job's failed slots, each once, the newest maxFailed kept.
func (js *jobState) addFailedLocked(slots []string) {
	for _, sl := range slots {
		if !slices.Contains(js.failed, sl) {
			js.failed = append(js.failed, sl)
		}
	}
	if n := len(js.failed) - maxFailed; n > 0 {
		at := func(sl string) time.Time { t, _ := js.spec.Parse(sl); return t }
		slices.SortFunc(js.failed, func(a, b string) int { return at(a).Compare(at(b)) })
		js.s.log.Warn("too many slots left without a record by failed launches to keep: the oldest are no longer looked for (check them with once history)",
			"task", js.job.Name, "dropped", n, "first", js.failed[0], "last", js.failed[n-1])
		js.failed = slices.Clone(js.failed[n:])
	}
}

// pending is what an account takes of a job's failed launches (failedFrom, failed) as it begins;
// putBackLocked returns it when the account could not finish.
type pending struct {
	from  time.Time
	slots []string
	gen   int
}

// takeFailedLocked takes them for an account at now: the failed slots due by then (a slot a
// later account stands in for, standIn, is left to it: this one's gap ends at now).
func (js *jobState) takeFailedLocked(now time.Time) pending {
	p := pending{from: js.failedFrom, gen: js.gen}
	var left []string
	for _, sl := range js.failed {
		if t, err := js.spec.Parse(sl); err == nil && t.After(now) {
			left = append(left, sl)
		} else {
			p.slots = append(p.slots, sl)
		}
	}
	js.failedFrom, js.failed = time.Time{}, left
	return p
}

// putBackLocked returns p for the next account: the oldest failedFrom wins, and nothing of it
// survives a schedule change (a slot of the old schedule is not the new one's).
func (js *jobState) putBackLocked(p pending) {
	if js.gen != p.gen {
		return
	}
	if !p.from.IsZero() && (js.failedFrom.IsZero() || p.from.Before(js.failedFrom)) {
		js.failedFrom = p.from
	}
	js.addFailedLocked(p.slots)
}

// failedBehind returns, newest first, the slots of failed (a job's failed launches, by name)
// that lie behind last, the newest slot of the job's history, and have no entry (one read of the
// slot's history each: the slots are this node's own, named as its launches named them). A slot
// at or after last is in the account's gap already.
func (s *Scheduler) failedBehind(ctx context.Context, task string, spec slot.Spec, failed []string, last time.Time) ([]slot.Slot, error) {
	var out []slot.Slot
	for _, name := range failed {
		t, err := spec.Parse(name)
		if err != nil || !t.Before(last) {
			continue
		}
		h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: task, Slot: name, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(h) == 0 {
			out = append(out, slot.Slot{Value: name, Start: t})
		}
	}
	slices.SortFunc(out, func(a, b slot.Slot) int { return b.Start.Compare(a.Start) })
	return out, nil
}

// allHoles returns the holes behind last, the newest slot of the job's history, newest first:
// those the task's entries and marks show (knownHoles), and the slots of failed that have no
// entry (failedBehind), which it returns as lost too.
func (s *Scheduler) allHoles(ctx context.Context, task string, spec slot.Spec, k known, failed []string, last time.Time) (holes, lost []slot.Slot, err error) {
	holes, err = s.knownHoles(ctx, task, spec, k)
	if err != nil {
		return nil, nil, err
	}
	lost, err = s.failedBehind(ctx, task, spec, failed, last)
	return withFailed(holes, lost), lost, err
}

// withFailed merges holes and lost (both newest first) into one list, newest first, each slot
// once.
func withFailed(holes, lost []slot.Slot) []slot.Slot {
	out := slices.Clone(holes)
	for _, sl := range lost {
		if !slices.ContainsFunc(out, func(h slot.Slot) bool { return h.Start.Equal(sl.Start) }) {
			out = append(out, sl)
		}
	}
	slices.SortStableFunc(out, func(a, b slot.Slot) int { return b.Start.Compare(a.Start) })
	return out
}

// recordAllHoles records holes missed (recordHoles): those of lost (failedBehind) with
// failedNote, the others with holeNote.
func (s *Scheduler) recordAllHoles(ctx context.Context, js *jobState, jb Job, holes, lost []slot.Slot, newest time.Time) {
	isLost := func(h slot.Slot) bool {
		return slices.ContainsFunc(lost, func(l slot.Slot) bool { return l.Start.Equal(h.Start) })
	}
	var failed, other []slot.Slot
	for _, h := range holes {
		if isLost(h) {
			failed = append(failed, h)
		} else {
			other = append(other, h)
		}
	}
	s.recordHoles(ctx, js, jb, other, newest, holeNote)
	s.recordHoles(ctx, js, jb, failed, newest, failedNote)
}

// missedLeft keeps, for the next account, the missed slots of a gap (of generation gen) that an
// account could not record: once a later slot runs, that account's gap starts after it.
func (js *jobState) missedLeft(gen int, missed []slot.Slot) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.gen != gen {
		return
	}
	names := make([]string, len(missed))
	for i, sl := range missed {
		names[i] = sl.Value
	}
	js.addFailedLocked(names)
}

// standIn adds to the job's failed slots those an account now stands in for: the slots from nx,
// the one the dispatcher was to fire, that are due at now (one, unless the node was suspended
// or stopped firing; the newest maxFailed). They run or are recorded through that account's gap;
// but when it fails (the store silent) the fires after it run meanwhile, and the next account's
// gap starts after them: without this, the slot it stood in for had no record (a fire at the
// moment a failed launch's account read a silent store, TestDaemonStoreFreeze on Redis).
func (js *jobState) standIn(nx slot.Slot, now time.Time) {
	js.mu.Lock()
	defer js.mu.Unlock()
	var due []string
	for sl := js.spec.Prev(now); sl.Value != "" && !sl.Start.Before(nx.Start) && len(due) < maxFailed; sl = js.spec.Prev(sl.Start.Add(-time.Nanosecond)) {
		if !fireTime(js.job.Name, sl, js.job.Jitter).After(now) {
			due = append(due, sl.Value)
		}
	}
	js.addFailedLocked(due)
}

// recordOwed makes, as the node drains (its launches ended), the records it owes and had not
// made yet (watch.owed): a skip whose record failed, a failed launch's slot behind the newest.
// They waited for a follow-up once the job's lease was free, which no drained node makes; and no
// other node knows of them (the next start's account does not either: failed slots are kept in
// this node's memory). Each is made as its follow-up would make it (the slot read first: one
// that has an attempt needs none), within offDispatchTimeout; one that fails again is left, and
// said so.
func (s *Scheduler) recordOwed(jobs []*jobState) {
	s.settled.Store(true)
	for _, js := range jobs {
		js.mu.Lock()
		jb := js.job
		var owed []*watch
		for _, w := range js.watches {
			if w.owed && w.skipNote != "" {
				owed = append(owed, w)
				delete(js.watches, w.slot)
			}
		}
		js.mu.Unlock()
		for _, w := range owed {
			if w.missed {
				s.holeMissed(context.Background(), jb, w.slot, w.skipNote)
			} else {
				s.overlapSkip(context.Background(), jb, w.slot, nil, w.skipNote)
			}
		}
	}
}
