package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// A hole is a slot behind the newest slot of a job's history that has no record at all: a launch
// that waited in a node's queue (a buffer-one slot behind a running one, a catch-up behind the
// next fire) and that the node dropped as it stopped (a drain, or kill -9), while a later slot
// (the run before it, a skip) was recorded. The nodes that follow such a slot run it; with none
// left (the whole fleet stopped, a one-node fleet), the next account, which walks only the slots
// after the newest recorded one, never saw it. So account looks behind the newest slot too, for
// the jobs whose slots can wait in a queue (queues), in the task's newest entries, for slots
// without a record that a node is shown to have queued (hole: not a finer new schedule's slots
// between two old entries, which were never due): a hole in
// the catch-up window is caught up (through the guard: a slot another node ran is already tried),
// an older one is recorded missed (recordHoles).

// queues is whether a slot of jb can wait in a node's queue behind another one and be dropped
// there without a record: overlap = buffer-one, or a catch-up window (its catch-up waits behind
// the next fire). An overlap = skip slot queued at a drain is recorded skipped (drain).
func queues(jb Job) bool { return jb.Overlap == "buffer-one" || jb.CatchUp > 0 }

// holeHorizon bounds how far behind the newest entry's time holes are looked for (beyond the
// job's catch-up window): a slot dropped from a queue fired shortly before the slots recorded
// after it; older holes are more likely events removed by once prune (it keeps each slot's last
// attempt, not its skipped or missed events) than slots lost.
const holeHorizon = recordedRetention

// A hole is a candidate (findHoles) that a node is shown to have queued: a slot of a finer new
// schedule between two entries of the old one, a slot of a job removed for a while or paused, or
// one of an old task of the same name was never due, and has no record either.
type hole struct {
	slot.Slot
	// waited: the entries show it waited behind a running attempt (waitedBehind). Else it counts
	// only when the account that queued it as a catch-up marked it (markQueued, unclaimed).
	waited bool
}

// findHoles returns the slots of spec before last (newest first, at most maxMissedEvents, each
// due by now) that no entry of h names and that a node may have queued: for a buffer-one job, those
// that waited behind a running attempt (waitedBehind, told by h alone); for a job with a catch-up
// window, any other (the caller keeps those its account marked queued). h is the task's newest
// entries, newest first by the time they were recorded (HistoryQuery); whole says it is the task's
// whole history. Only the slots whose every entry must be in h are looked at: a slot's entries are
// recorded once it fires (by the store's clock, which a node's differs from by up to margin), so a
// slot that starts after the oldest entry of h plus margin has none older; with the whole history,
// every slot after the oldest slot of h. And none more than holeHorizon (or the catch-up window)
// before the newest entry of h. offset bounds the difference of a node's clock and the store's.
//
// behind is, for a job with a catch-up window, the window's due slots that h cannot show to have
// no entry (at or before that bound, newest first, at most behindSlots, none named in h): where the
// rest of a catch-up that ended early is, once the catch-up's own runs, and the fires after
// them, have filled the task's newest entries. Only those an account marked queued count, and
// only once a read of their own shows no entry (queuedBehind).
func findHoles(jb Job, spec slot.Spec, h []store.Entry, whole bool, last, now time.Time, margin, offset time.Duration) (holes []hole, behind []slot.Slot) {
	if len(h) == 0 || last.IsZero() {
		return nil, nil
	}
	bySlot := make(map[int64][]store.Entry, len(h))
	var oldestSlot, oldestAt time.Time
	for i, e := range h {
		if t, err := spec.Parse(e.Slot); err == nil {
			bySlot[t.UnixNano()] = append(bySlot[t.UnixNano()], e)
			if oldestSlot.IsZero() || t.Before(oldestSlot) {
				oldestSlot = t
			}
		}
		if i == 0 || e.StartedAt.Before(oldestAt) {
			oldestAt = e.StartedAt
		}
	}
	if oldestSlot.IsZero() {
		return nil, nil
	}
	from := oldestAt.Add(margin)
	if whole {
		from = oldestSlot
	}
	if h0 := h[0].StartedAt.Add(-max(holeHorizon, jb.CatchUp)); from.Before(h0) {
		from = h0
	}
	if jb.CatchUp <= 0 {
		return skippedAfter(jb, spec, h, bySlot, from, last, now, offset), nil
	}
	sl := spec.Prev(last.Add(-time.Nanosecond))
	for ; sl.Value != "" && sl.Start.After(from) && len(holes) < maxMissedEvents; sl = spec.Prev(sl.Start.Add(-time.Nanosecond)) {
		at := fireTime(jb.Name, sl, jb.Jitter)
		if bySlot[sl.Start.UnixNano()] != nil || at.After(now) {
			continue
		}
		switch {
		case jb.Overlap == "buffer-one" && waitedBehind(spec, h, bySlot[spec.Next(sl.Start).Start.UnixNano()], sl, at, offset):
			holes = append(holes, hole{Slot: sl, waited: true})
		case jb.CatchUp > 0:
			holes = append(holes, hole{Slot: sl})
		}
	}
	if whole || len(holes) >= maxMissedEvents {
		return holes, nil // with the whole history, a slot before its oldest one was never queued
	}
	window := now.Add(-jb.CatchUp)
	most := behindSlots(jb)
	for ; sl.Value != "" && sl.Start.After(window) && len(behind) < most; sl = spec.Prev(sl.Start.Add(-time.Nanosecond)) {
		if bySlot[sl.Start.UnixNano()] == nil && !fireTime(jb.Name, sl, jb.Jitter).After(now) {
			behind = append(behind, sl)
		}
	}
	return holes, behind
}

// knownHoles returns the holes of k that count, newest first: those the task's newest entries show
// (unclaimed), then those behind them (queuedBehind).
func (s *Scheduler) knownHoles(ctx context.Context, task string, spec slot.Spec, k known) ([]slot.Slot, error) {
	holes, err := s.unclaimed(ctx, task, k.holes)
	if err != nil {
		return nil, err
	}
	more, err := s.queuedBehind(ctx, task, spec, k)
	return append(holes, more...), err
}

// behindSlots bounds the slots of jb's catch-up window behind what the task's newest entries show
// (findHoles) whose queued marks an account looks up: as many as one catch-up queues
// (catch-up-max) and behindMargin more (the fires between that catch-up's rest and those entries),
// at most maxBehind: one look-up of up to 500 keys per job at a start for the default catch-up-max
// of 1, two at most. A rest further back is not found (its drain said which slots it left).
func behindSlots(jb Job) int { return min(max(jb.CatchUpMax, 1)+behindMargin, maxBehind) }

const (
	behindMargin = 100
	maxBehind    = 1000
)

// queuedBehind returns of k.behind (findHoles, newest first) those an account marked queued
// (markQueued) that the fleet has not claimed (unclaimed) and that have no entry: the rest of a
// catch-up a node left as it stopped (it drained, its lease was lost, kill -9), which a later
// fire's entries hid from findHoles. A slot a catch-up ran has an entry; one of the window that
// fired on time was not marked. The marked slots (at most behindSlots) have their entries read
// from the task's history behind its newest entries (withoutEntries), besides the look-ups of the
// marks.
func (s *Scheduler) queuedBehind(ctx context.Context, task string, spec slot.Spec, k known) ([]slot.Slot, error) {
	if len(k.behind) == 0 || s.keys == nil {
		return nil, nil
	}
	names := make([]string, len(k.behind))
	for i, sl := range k.behind {
		names[i] = sl.Value
	}
	got, err := s.lookupClaims(ctx, task, names, []string{queuedKind})
	if err != nil {
		return nil, err
	}
	// Every marked slot, not the first maxMissedEvents: those were counted before the ones that
	// ran were set aside, so a rest of more than that had its oldest left at every start.
	var marked []hole
	for _, sl := range k.behind {
		if _, ok := got[[2]string{queuedKind, sl.Value}]; ok {
			marked = append(marked, hole{Slot: sl})
		}
	}
	left, err := s.unclaimed(ctx, task, marked)
	if err != nil || len(left) == 0 {
		return nil, err
	}
	return s.withoutEntries(ctx, task, spec, left, k.cursor)
}

// behindPages bounds the pages of the task's history (of behindPage entries) that withoutEntries
// reads behind its newest entries; a slot not settled by them is read by its name.
const (
	behindPages = 10
	behindPage  = 100
)

// withoutEntries returns of slots (newest first) those that have no entry. The task's history is
// read on from cursor (the oldest of its newest entries) and each entry's slot parsed, as findHoles
// reads those: a slot recorded under another spelling of its instant (a backfill in another zone,
// the drain's advice) has an entry too, which a read by its name does not find. A slot's entries
// are recorded once it fires (the store's clock within MaxClockOffset of a node's), so the pages
// stop at an entry older than the oldest slot left; past behindPages, the rest are read by name.
func (s *Scheduler) withoutEntries(ctx context.Context, task string, spec slot.Spec, slots []slot.Slot, cursor string) ([]slot.Slot, error) {
	left := make(map[int64]bool, len(slots))
	for _, sl := range slots {
		left[sl.Start.UnixNano()] = true
	}
	oldest := slots[len(slots)-1].Start.Add(-(s.c.MaxClockOffset + late))
	for page := 0; cursor != "" && page < behindPages; page++ {
		h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: task, Before: cursor, Limit: behindPage})
		if err != nil {
			return nil, err
		}
		cursor = ""
		for _, e := range h {
			if t, err := spec.Parse(e.Slot); err == nil {
				delete(left, t.UnixNano())
			}
		}
		if len(h) == behindPage && len(left) > 0 && !h[len(h)-1].StartedAt.Before(oldest) {
			cursor = h[len(h)-1].Cursor
		} else {
			slots = slices.DeleteFunc(slots, func(sl slot.Slot) bool { return !left[sl.Start.UnixNano()] })
			return slots, nil
		}
	}
	var out []slot.Slot
	for _, sl := range slots {
		if !left[sl.Start.UnixNano()] {
			continue
		}
		h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: task, Slot: sl.Value, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(h) == 0 {
			out = append(out, sl)
		}
	}
	return out, nil
}

// skippedAfter is findHoles for a buffer-one job without a catch-up window: its holes are the
// slots before a skip that waitedBehind proves, found from h's skips (a few) rather than by walking
// every slot since the oldest entry (an every-second schedule: up to holeHorizon of them).
func skippedAfter(jb Job, spec slot.Spec, h []store.Entry, bySlot map[int64][]store.Entry, from, last, now time.Time, offset time.Duration) []hole {
	var out []hole
	seen := map[int64]bool{}
	for _, x := range h {
		t, err := spec.Parse(x.Slot)
		if x.State != store.Skipped || err != nil {
			continue
		}
		w := spec.Prev(t.Add(-time.Nanosecond))
		k := w.Start.UnixNano()
		if w.Value == "" || seen[k] || bySlot[k] != nil || !w.Start.After(from) || !w.Start.Before(last) {
			continue
		}
		seen[k] = true
		if at := fireTime(jb.Name, w, jb.Jitter); !at.After(now) && waitedBehind(spec, h, bySlot[t.UnixNano()], w, at, offset) {
			out = append(out, hole{Slot: w, waited: true})
		}
	}
	slices.SortFunc(out, func(a, b hole) int { return b.Start.Compare(a.Start) }) // newest first
	return out
}

// waitedBehind is whether the entries show that buffer-one slot w, firing at at (by a node's
// clock, within offset of the store's), waited in a queue: an attempt of the task (of an earlier
// slot, or a trigger's) had begun before w fired and had not ended when it did (why it waited),
// and the slot after w was recorded skipped (its buffer was full) before that attempt ended
// (while w still waited: a drain drops it at once, and no slot fires during a drain), or within
// late of it. A slot of a finer new schedule between two old entries has no such pair: the
// attempt before it had ended, or the slot after it was not skipped (it has no entry, or ran).
func waitedBehind(spec slot.Spec, h, next []store.Entry, w slot.Slot, at time.Time, offset time.Duration) bool {
	for _, a := range h {
		if isEvent(a.State) || a.StartedAt.After(at.Add(offset)) || a.EndedAt != nil && !a.EndedAt.After(at.Add(-offset)) {
			continue
		}
		if t, err := spec.Parse(a.Slot); err == nil && !t.Before(w.Start) {
			continue // w's own attempt, or a later slot's: w did not wait behind it
		}
		for _, x := range next {
			// Both by the store's clock; late covers the moments between the attempt's end and
			// its launch's (a loaded node), while the slot still waited.
			if x.State == store.Skipped && (a.EndedAt == nil || !x.StartedAt.After(a.EndedAt.Add(late))) {
				return true
			}
		}
	}
	return false
}

// isEvent is whether an entry in state st is an event (store.EventKinds), not an attempt.
func isEvent(st store.State) bool { return slices.Contains(store.EventKinds, st) }

// queuedKind is the kind of the claim an account makes for each slot it queues as a catch-up
// (markQueued): what tells a catch-up a stopped node dropped from a slot that was never due.
const queuedKind = "queued"

// markQueued claims, for the fleet, that slots of task were queued as a catch-up: a slot the
// launch never reaches (its node stopped) is then known for a hole (unclaimed). Best effort: a
// catch-up not marked is, if dropped, left without a record, as before.
func (s *Scheduler) markQueued(ctx context.Context, task string, slots []string) {
	if s.keys == nil || len(slots) == 0 {
		return
	}
	keys := make([]string, len(slots))
	for i, sl := range slots {
		keys[i] = queuedKind + " " + task + " " + sl
	}
	if _, err := s.keys.Claim(ctx, store.ClaimRequest{Scope: recordedScope, Keys: keys,
		Claimant: store.Claimant{RunID: store.Clip(recorderPrefix+s.c.Node, store.MaxRunIDLen)}}); err != nil && !stopping(ctx) {
		s.log.Warn("cannot mark a catch-up's slots queued: if this node stops before running them, they are left without a record",
			"task", task, "slots", len(slots), "err", err)
	}
}

// claimKinds are the kinds of the fleet's claims (recordOnce) that say a slot is not to run: an
// overlap policy skipped it, a pause did, or it was recorded missed. A run that may begin late
// claims them all (claimLaunch): then they say a node runs it.
var claimKinds = []string{overlapKind, "paused", "missed"}

// claimed returns which of slots of task the fleet claimed as not to run here (claimKinds):
// recorded skipped by an overlap policy or a pause, or recorded missed, or claimed by a live run
// of another node (claimLaunch); for each, the claim that stands (a recorder's before a run's). A
// store without keys claims none.
func (s *Scheduler) claimed(ctx context.Context, task string, slots []string) (map[string]store.Key, error) {
	got, err := s.lookupClaims(ctx, task, slots, claimKinds)
	out := map[string]store.Key{}
	for k, key := range got {
		if old, ok := out[k[1]]; !ok || isLaunchClaim(old) {
			out[k[1]] = key
		}
	}
	return out, err
}

// lookupClaims returns the claims of kinds the fleet holds for slots of task, by {kind, slot}.
// A run's claim whose lease is gone (goneLaunch) is not one: the run either began (its slot has an
// attempt, which the callers read) or died before it did (the slot is a hole, taken over by the
// node that records or runs it).
func (s *Scheduler) lookupClaims(ctx context.Context, task string, slots, kinds []string) (map[[2]string]store.Key, error) {
	out := map[[2]string]store.Key{}
	if s.keys == nil || len(slots) == 0 {
		return out, nil
	}
	keys := make([]string, 0, len(slots)*len(kinds))
	of := make(map[string][2]string, cap(keys))
	for _, sl := range slots {
		for _, k := range kinds {
			key := k + " " + task + " " + sl
			keys = append(keys, key)
			of[key] = [2]string{k, sl}
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		got, err := s.keys.Lookup(ctx, recordedScope, keys[:n])
		if err != nil {
			return nil, err
		}
		for _, k := range got {
			if !goneLaunch(k) {
				out[of[k.Key]] = k
			}
		}
		keys = keys[n:]
	}
	return out, nil
}

// unclaimed returns of holes those that count (a catch-up candidate only when its account marked
// it queued: markQueued) and that the fleet has not claimed (claimed: a skip or a missed record
// whose event a prune removed since; the claims outlive it by recordedRetention). One look-up.
func (s *Scheduler) unclaimed(ctx context.Context, task string, holes []hole) ([]slot.Slot, error) {
	if len(holes) == 0 {
		return nil, nil
	}
	names := make([]string, len(holes))
	for i, sl := range holes {
		names[i] = sl.Value
	}
	got, err := s.lookupClaims(ctx, task, names, append(slices.Clone(claimKinds), queuedKind))
	if err != nil {
		return nil, err
	}
	var out []slot.Slot
	has := func(k, sl string) bool { _, ok := got[[2]string{k, sl}]; return ok }
	for _, h := range holes {
		if !h.waited && !has(queuedKind, h.Value) {
			continue
		}
		if !slices.ContainsFunc(claimKinds, func(k string) bool { return has(k, h.Value) }) {
			out = append(out, h.Slot)
		}
	}
	return out, nil
}

// holeNote is the note of a hole recorded missed.
const holeNote = "missed: it waited on a node behind another slot of the job, and that node stopped before running it " +
	"(no node of the fleet ran it); outside its catch-up window"

// recordHoles records holes (in any order) missed with note (holeNote, failedNote), once for the fleet. The newest watchedHoles of
// them are followed up first (watch.missed): recorded once the job's lease is free and the slot
// still untried at two follow-ups, the last at least holeHoldOff after this: a live node may still
// run one, the node that queued it (between the end of the slot before and its own launch) or one
// that follows it (it runs it at its next poll once the lease is free: a node restarted at once
// after its drain, which ended with that slot's lease, must not record it missed first). The older
// ones are recorded at once when no node holds the job's lease (by a read of the leases begun at
// most a poll ago and after newest, the newest entry of the task the account read, shared by the
// accounts of a start: recentLeases) and each is still untried (one
// Slot read each, after it); else they are followed up too. The node that runs a queued or
// followed-up slot claims it just before its attempt (claimLaunch), as the record does
// (recordOnce): whichever claim the store took first decides, so a slot is recorded missed or run,
// not both; the hold-off only makes a live follower's run the likelier outcome
// (docs/daemon.md#a-late-run-or-a-missed-record-not-both).
func (s *Scheduler) recordHoles(ctx context.Context, js *jobState, jb Job, holes []slot.Slot, newest time.Time, note string) {
	if len(holes) == 0 {
		return
	}
	// Sorted here, oldest first, not left to the callers: a paused job's account hands them newest
	// first (allHoles, as findGap takes them), and then recorded the newest missed at once and
	// followed up the oldest (TestHoleOrderPausedOrNot).
	holes = slices.SortedStableFunc(slices.Values(holes), func(a, b slot.Slot) int { return a.Start.Compare(b.Start) })
	cut := max(0, len(holes)-watchedHoles)
	older, watched := holes[:cut], slices.Clone(holes[cut:])
	if len(older) > 0 {
		leases, err := s.recentLeases(ctx, newest)
		_, held := liveGrants(leases)[jb.Name]
		var g gap
		for _, sl := range older {
			if err == nil && !held {
				st, rerr := s.c.Store.Slot(ctx, jb.Name, sl.Value)
				if rerr == nil && st.Last != nil {
					continue // run by now
				}
				if rerr == nil {
					g.missed = append(g.missed, sl)
					continue
				}
			}
			watched = append(watched, sl)
		}
		if len(g.missed) > 0 && !s.recordMissed(ctx, jb, g, note) {
			watched = append(watched, g.missed...)
		}
	}
	if len(watched) == 0 {
		return
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, sl := range watched {
		if w := js.watchLocked(ctx, sl.Value, false); w != nil && w.skipNote == "" {
			w.skipNote, w.missed, w.owed = note, true, note == failedNote
		}
	}
	s.log.Info("slots left without a record (a node that stopped, a launch that failed): recorded missed unless a node runs them", "task", jb.Name,
		"slots", len(watched), "first", watched[0].Value, "last", watched[len(watched)-1].Value)
}

// watchedHoles is how many of a job's holes, the newest, are followed up before they are
// recorded missed (recordHoles); a job follows up at most maxWatches slots.
const watchedHoles = maxWatches / 2

// holeHoldOff is how long after its watch began a hole is recorded missed at the earliest: three
// polls, so that a live node that follows the slot, and polls as often, has most likely run it by
// then. A preference, not the safety: a follower later than that finds the slot claimed missed
// and does not run it (claimLaunch).
func (s *Scheduler) holeHoldOff() time.Duration { return 3 * s.c.Poll }

// holeMissed records one followed-up hole missed, once for the fleet (watch.missed).
func (s *Scheduler) holeMissed(ctx context.Context, jb Job, sl, note string) {
	s.offDispatch(ctx, func(ctx context.Context) {
		// A failed read or record follows the slot up again (rewatch): it is tried anew after the
		// hold-off, not left without a record until the job's next accounting (a restart).
		again := store.Event{Task: jb.Name, Slot: sl, Note: note}
		st, err := s.c.Store.Slot(ctx, jb.Name, sl)
		if err != nil {
			s.log.Warn("cannot read a slot left without a record; it is followed up", "task", jb.Name, "slot", sl, "err", err)
			s.rewatch(ctx, again, "missed", note == failedNote)
			return
		}
		if st.Last != nil {
			return
		}
		if !s.recordMissed(ctx, jb, gap{missed: []slot.Slot{{Value: sl}}}, note) {
			s.log.Warn("could not record a slot left without a record as missed; it is followed up", "task", jb.Name, "slot", sl)
			s.rewatch(ctx, again, "missed", note == failedNote)
		}
	})
}
