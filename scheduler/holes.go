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
// the jobs whose slots can wait in a queue (queues), in the entries it reads anyway: a hole in
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

// findHoles returns the slots of spec before last (newest first, at most maxMissedEvents, each
// due by now) that no entry of h names. h is the task's newest entries, newest first by the time
// they were recorded (HistoryQuery); whole says it is the task's whole history. Only the slots
// whose every entry must be in h are looked at: a slot's entries are recorded once it fires (by
// the store's clock, which a node's differs from by up to margin), so a slot that starts after
// the oldest entry of h plus margin has none older; with the whole history, every slot after the
// oldest slot of h. And none more than holeHorizon (or the catch-up window) before the newest
// entry of h.
func findHoles(jb Job, spec slot.Spec, h []store.Entry, whole bool, last, now time.Time, margin time.Duration) []slot.Slot {
	if len(h) == 0 || last.IsZero() {
		return nil
	}
	recorded := make(map[int64]bool, len(h))
	var oldestSlot, oldestAt time.Time
	for i, e := range h {
		if t, err := spec.Parse(e.Slot); err == nil {
			recorded[t.UnixNano()] = true
			if oldestSlot.IsZero() || t.Before(oldestSlot) {
				oldestSlot = t
			}
		}
		if i == 0 || e.StartedAt.Before(oldestAt) {
			oldestAt = e.StartedAt
		}
	}
	if oldestSlot.IsZero() {
		return nil
	}
	from := oldestAt.Add(margin)
	if whole {
		from = oldestSlot
	}
	if h0 := h[0].StartedAt.Add(-max(holeHorizon, jb.CatchUp)); from.Before(h0) {
		from = h0
	}
	var out []slot.Slot
	for sl := spec.Prev(last.Add(-time.Nanosecond)); sl.Value != "" && sl.Start.After(from) && len(out) < maxMissedEvents; sl = spec.Prev(sl.Start.Add(-time.Nanosecond)) {
		if !recorded[sl.Start.UnixNano()] && !fireTime(jb.Name, sl, jb.Jitter).After(now) {
			out = append(out, sl)
		}
	}
	return out
}

// claimKinds are the kinds of the fleet's claims (recordOnce) that say a slot is not to run: an
// overlap policy skipped it, a pause did, or it was recorded missed.
var claimKinds = []string{overlapKind, "paused", "missed"}

// claimed returns which of slots of task the fleet claimed as not to run (claimKinds): recorded
// skipped by an overlap policy or a pause, or recorded missed. A store without keys claims none.
func (s *Scheduler) claimed(ctx context.Context, task string, slots []string) (map[string]bool, error) {
	out := map[string]bool{}
	if s.keys == nil || len(slots) == 0 {
		return out, nil
	}
	keys := make([]string, 0, len(slots)*len(claimKinds))
	of := make(map[string]string, cap(keys))
	for _, sl := range slots {
		for _, k := range claimKinds {
			key := k + " " + task + " " + sl
			keys = append(keys, key)
			of[key] = sl
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		got, err := s.keys.Lookup(ctx, recordedScope, keys[:n])
		if err != nil {
			return nil, err
		}
		for _, k := range got {
			out[of[k.Key]] = true
		}
		keys = keys[n:]
	}
	return out, nil
}

// unclaimed drops from holes those the fleet claimed (claimed): a skip or a missed record whose
// event a prune removed since (the claims outlive it by recordedRetention).
func (s *Scheduler) unclaimed(ctx context.Context, task string, holes []slot.Slot) ([]slot.Slot, error) {
	if len(holes) == 0 {
		return nil, nil
	}
	names := make([]string, len(holes))
	for i, sl := range holes {
		names[i] = sl.Value
	}
	got, err := s.claimed(ctx, task, names)
	if err != nil {
		return nil, err
	}
	out := holes[:0:0]
	for _, sl := range holes {
		if !got[sl.Value] {
			out = append(out, sl)
		}
	}
	return out, nil
}

// holeNote is the note of a hole recorded missed.
const holeNote = "missed: it waited on a node behind another slot of the job, and that node stopped before running it " +
	"(no node of the fleet ran it); outside its catch-up window"

// recordHoles records holes (oldest first) missed, once for the fleet. The newest watchedHoles of
// them are followed up first (watch.missed): recorded once the job's lease is free and the slot
// still untried at two follow-ups, the last at least holeHoldOff after this: a live node may still
// run one, the node that queued it (between the end of the slot before and its own launch) or one
// that follows it (it runs it at its next poll once the lease is free: a node restarted at once
// after its drain, which ended with that slot's lease, must not record it missed first). The older
// ones are recorded at once when no node holds the job's lease and each is still untried (one
// Slot read each); else they are followed up too. The node that runs a queued or followed-up slot
// reads the missed claim first (call, followSlot), so a slot is recorded missed or run, not both
// but for the instants around the lease's release (docs/daemon.md#overlap).
func (s *Scheduler) recordHoles(ctx context.Context, js *jobState, jb Job, holes []slot.Slot) {
	if len(holes) == 0 {
		return
	}
	cut := max(0, len(holes)-watchedHoles)
	older, watched := holes[:cut], slices.Clone(holes[cut:])
	if len(older) > 0 {
		leases, err := s.c.Store.Leases(ctx)
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
		if len(g.missed) > 0 && !s.recordMissed(ctx, jb, g, holeNote) {
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
			w.skipNote, w.missed = holeNote, true
		}
	}
	s.log.Info("slots left without a record by a node that stopped: recorded missed unless a node runs them", "task", jb.Name,
		"slots", len(watched), "first", watched[0].Value, "last", watched[len(watched)-1].Value)
}

// watchedHoles is how many of a job's holes, the newest, are followed up before they are
// recorded missed (recordHoles); a job follows up at most maxWatches slots.
const watchedHoles = maxWatches / 2

// holeHoldOff is how long after its watch began a hole is recorded missed at the earliest: three
// polls, so that a live node that follows the slot, and polls as often, has run it by then.
func (s *Scheduler) holeHoldOff() time.Duration { return 3 * s.c.Poll }

// holeMissed records one followed-up hole missed, once for the fleet (watch.missed).
func (s *Scheduler) holeMissed(ctx context.Context, jb Job, sl, note string) {
	s.offDispatch(ctx, func(ctx context.Context) {
		if st, err := s.c.Store.Slot(ctx, jb.Name, sl); err != nil || st.Last != nil {
			return
		}
		if !s.recordMissed(ctx, jb, gap{missed: []slot.Slot{{Value: sl}}}, note) {
			s.log.Warn("could not record a slot left without a record as missed", "task", jb.Name, "slot", sl)
		}
	})
}
