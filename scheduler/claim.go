package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// Launch claims: one decision in the store between a node that runs a slot late and one that
// records it not run.
//
// A slot can be recorded not run by a node that did not run it: missed (a hole behind the job's
// newest slot, recordHoles; a gap's slot, account), skipped (overlapSkip) or paused (pausedSlot).
// Each such record is claimed first, once per fleet: "KIND TASK SLOT" in recordedScope, by
// "record NODE" (recordOnce). A launch that may run its slot late (it waited in this node's queue,
// it follows a slot up, or its run begins more than lateClaim after its fire time: lateLaunch)
// claims the same keys, every kind of claimKinds, in one Claim, under the lease, just before its
// attempt is recorded, as "launch RUN_ID" with the run's task and token (claimLaunch). The store
// gives each key to one claimant: whichever claim came first decides. The recorder records only
// the keys it won; the launch runs only if it won them all, else it is not run, says why (the
// claim that stands and who holds it: errClaimed) and gives back the keys it won.
//
// A launch's claim is pending under its lease's token: while the lease is live it stands (the
// attempt is about to be, or is, recorded); once the lease is gone (released when the run ended,
// or expired after a crash) the store reports it KeyUnknown (store.Claimant). A launch claim that
// is gone and whose slot has no attempt is a launch that died between its claim and its attempt
// (kill -9, the store failing at Begin): it does not count as a claim (lookupClaims), so the slot
// is a hole to the nodes that account the job, and a recorder or a later launch takes the claim
// over (Reclaim) and records it missed, after reading the slot again, or runs it.

const (
	recorderPrefix = "record " // a recorder's claimant: "record NODE" (recordOnce, markQueued)
	launchPrefix   = "launch " // a launch's claimant: "launch RUN_ID" (claimLaunch)
)

// lateClaim is how long after its fire time (by the fleet's clock) a fire's run begins before it
// claims its slot (lateLaunch): a node that starts accounts a slot fired more than late ago as
// missed (findGap), so a run that begins later than that must claim first. Half of late leaves
// the other half for this node's read of the clock and the round trip to Begin.
const lateClaim = late / 2

// isLaunchClaim is whether a stored claim of recordedScope is a launch's (claimLaunch).
func isLaunchClaim(k store.Key) bool { return strings.HasPrefix(k.RunID, launchPrefix) }

// goneLaunch is whether a stored claim is a launch's whose lease is gone: it ran (its slot has an
// attempt), or it died before its attempt was recorded (it has none).
func goneLaunch(k store.Key) bool { return isLaunchClaim(k) && k.State == store.KeyUnknown }

// slotKeys are the claims of slot sl of task, one per kind.
func slotKeys(task, sl string, kinds []string) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k + " " + task + " " + sl
	}
	return out
}

// claimLaunch claims run's slot for run (every kind of claimKinds, one Claim) before its attempt
// is recorded. It returns nil when the run may begin: it won every key, or took over those that
// were a dead launch's. Otherwise (a node recorded the slot skipped, paused or missed, or a live
// launch of another node claimed it first) errClaimed saying which claim stands, or the store's
// error: fail closed, the keys it won given back. A store without keys (s.keys nil) claims
// nothing: the run begins, as before launch claims.
func (s *Scheduler) claimLaunch(ctx context.Context, run *once.Run) error {
	if s.keys == nil {
		return nil
	}
	keys := slotKeys(run.Task, run.Slot, claimKinds)
	c := store.Claimant{Task: run.Task, RunID: store.Clip(launchPrefix+run.RunID, store.MaxRunIDLen), Token: run.Token}
	won, err := s.keys.Claim(ctx, store.ClaimRequest{Scope: recordedScope, Keys: keys, Pending: true, Claimant: c})
	if err != nil {
		return fmt.Errorf("cannot claim the slot for this run, so it is not run (the job is accounted before its next fire): %w", err)
	}
	var lost, mine []string
	for i, w := range won {
		if w {
			mine = append(mine, keys[i])
		} else {
			lost = append(lost, keys[i])
		}
	}
	if len(lost) == 0 {
		return nil
	}
	standing, launched, err := s.takeOverGone(ctx, lost, &c)
	if err == nil && standing == "" {
		return nil
	}
	if len(mine) > 0 {
		if rerr := s.keys.ReleaseKeys(ctx, recordedScope, mine, c.RunID); rerr != nil {
			s.log.Warn("cannot give back the claims of a run that does not begin: the slot is a hole to the next account",
				"task", run.Task, "slot", run.Slot, "err", rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("cannot read who claimed the slot first, so it is not run: %w", err)
	}
	if launched {
		return fmt.Errorf("%w: %w: %s", errClaimed, errRunsElsewhere, standing)
	}
	return fmt.Errorf("%w: %s", errClaimed, standing)
}

// errRunsElsewhere is claimLaunch's error (with errClaimed) when the claim that stands is a live
// run's of another node: the fleet working, not a slot lost.
var errRunsElsewhere = errors.New("another node runs the slot")

// takeOverGone looks up keys, which another claimant holds, and hands to c those that a launch
// that is gone holds (goneLaunch). It returns, when any key stands (a recorder's, a live
// launch's, one taken by another node meanwhile), what the first of them is, else "";
// launched says it is a live launch's, or one given back or taken over by another node since (the
// launch follows the slot up: claimedFirst).
func (s *Scheduler) takeOverGone(ctx context.Context, keys []string, c *store.Claimant) (standing string, launched bool, err error) {
	got, err := s.keys.Lookup(ctx, recordedScope, keys)
	if err != nil {
		return "", false, err
	}
	found := make(map[string]store.Key, len(got))
	for _, k := range got {
		found[k.Key] = k
	}
	var gone []string
	for _, key := range keys {
		k, ok := found[key]
		switch {
		case !ok:
			// Its record failed, or its run did not begin: followed up (claimedFirst), so that
			// the slot is run or recorded, not left without either.
			return fmt.Sprintf("%q was claimed by another node, and given back since", key), true, nil
		case !goneLaunch(k):
			return standingClaim(k), isLaunchClaim(k), nil
		}
		gone = append(gone, key)
	}
	changed, err := s.keys.Reclaim(ctx, recordedScope, gone, c, false)
	if err != nil {
		return "", false, err
	}
	if len(changed) < len(gone) {
		// Taken by another node's run (a seat's) or record: followed up (claimedFirst), as the
		// run that took it may die before its attempt too.
		return fmt.Sprintf("another node took over the claims of a run that died (%d of %d keys) first", len(gone)-len(changed), len(gone)), true, nil
	}
	return "", false, nil
}

// standingClaim says what a claim of recordedScope that stands means, for log lines.
func standingClaim(k store.Key) string {
	kind, _, _ := strings.Cut(k.Key, " ")
	if isLaunchClaim(k) {
		return fmt.Sprintf("run %s of another node claimed the slot first (%q, %s) and runs it",
			strings.TrimPrefix(k.RunID, launchPrefix), k.Key, k.State)
	}
	what := map[string]string{"missed": "recorded missed", overlapKind: "recorded skipped (overlap)", "paused": "recorded skipped (paused)"}[kind]
	if what == "" {
		what = "claimed (" + kind + ")"
	}
	return fmt.Sprintf("%s %s first (claim %q at %s)", strings.TrimPrefix(k.RunID, recorderPrefix), what, k.Key, k.ClaimedAt.UTC().Format("2006-01-02T15:04:05.000Z"))
}

// takeOverForRecord is recordOnce's half of launch claims: of the keys it lost, those a launch
// that is gone holds are taken over for claimant and kept when their slot (of events, by key)
// still has no attempt (read again now that no launch can win it: the launch died before its
// attempt), else given back. It returns the indexes of events this node now records. A key whose
// holder it cannot tell (the store failing), or that another node took over first (a run that
// may die before its attempt too), is followed up as one a live run holds (rewatch): the slot is
// not left without a record because a read failed. A key this node's recorder holds already (an
// earlier try whose claim landed and whose record did not) is its own: ownForRecord.
func (s *Scheduler) takeOverForRecord(ctx context.Context, keys []string, won []bool, events []store.Event, claimant string) []int {
	var lost []string
	at := map[string]int{}
	for i, w := range won {
		if !w {
			lost = append(lost, keys[i])
			at[keys[i]] = i
		}
	}
	if len(lost) == 0 {
		return nil
	}
	rewatch := func(keys []string) {
		for _, key := range keys {
			s.rewatch(ctx, events[at[key]], key)
		}
	}
	got, err := s.keys.Lookup(ctx, recordedScope, lost)
	if err != nil {
		s.log.Warn("cannot read who claimed slots first; they are followed up", "task", events[0].Task, "keys", lost, "err", err)
		rewatch(lost)
		return nil
	}
	var gone, own []string
	given := slices.Clone(lost) // given back between the Claim and the Lookup: followed up
	for _, k := range got {
		given = slices.DeleteFunc(given, func(key string) bool { return key == k.Key })
		switch {
		case k.RunID == claimant: // this node's recorder: ownForRecord
			own = append(own, k.Key)
		case goneLaunch(k):
			gone = append(gone, k.Key)
		case isLaunchClaim(k):
			e := events[at[k.Key]]
			s.log.Info("not recorded: a run of the slot claimed it first; followed up until it began", "task", e.Task,
				"slot", e.Slot, "claim", standingClaim(k))
			rewatch([]string{k.Key})
		}
	}
	rewatch(given)
	mine := s.ownForRecord(ctx, own, at, events, rewatch)
	if len(gone) == 0 {
		return mine
	}
	changed, err := s.keys.Reclaim(ctx, recordedScope, gone, &store.Claimant{RunID: claimant}, false)
	if err != nil {
		s.log.Warn("cannot take over the claims of runs that died before they began; they are followed up", "task", events[0].Task,
			"keys", gone, "err", err)
		rewatch(gone)
		return nil
	}
	rewatch(slices.DeleteFunc(gone, func(k string) bool { return slices.Contains(changed, k) })) // taken by another node first
	return append(mine, s.keptForRecord(ctx, changed, at, events, claimant, rewatch)...)
}

// ownForRecord returns the indexes (at) of the events whose keys (own) this node's recorder holds
// already and whose slot has no entry: an earlier record of this node whose claim landed while
// its answer, or its event, did not (a store whose connections went silent: the claim reached
// it, the node gave up waiting), and whose claim could not be given back either. Not recorded,
// such a slot stayed claimed (no run, no other node's record) and without a record for the 2
// days the claim is kept. A slot that has an entry by now (that record landed late, or a run)
// needs none; one that cannot be read is followed up (rewatch).
func (s *Scheduler) ownForRecord(ctx context.Context, own []string, at map[string]int, events []store.Event, rewatch func([]string)) []int {
	var out []int
	for _, key := range own {
		e := events[at[key]]
		h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: e.Task, Slot: e.Slot, Limit: 1})
		switch {
		case err != nil:
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("cannot read a slot this node claimed to record; it is followed up", "task", e.Task, "slot", e.Slot, "err", err)
			}
			rewatch([]string{key})
		case len(h) == 0:
			out = append(out, at[key])
		}
	}
	return out
}

// keptForRecord reads the slot of each key taken over (changed) and returns the indexes (at) of
// the events still to record: those whose slot has no attempt. The others' keys are given back;
// one whose slot could not be read is followed up too (rewatch).
func (s *Scheduler) keptForRecord(ctx context.Context, changed []string, at map[string]int, events []store.Event,
	claimant string, rewatch func([]string)) []int {
	var out []int
	for _, key := range changed {
		e := events[at[key]]
		st, err := s.c.Store.Slot(ctx, e.Task, e.Slot)
		if err == nil && st.Last == nil {
			out = append(out, at[key])
			continue
		}
		if rerr := s.keys.ReleaseKeys(ctx, recordedScope, []string{key}, claimant); rerr != nil && !errors.Is(rerr, context.Canceled) {
			s.log.Warn("cannot give back a claim taken over to record a slot that needs no record: it stands until it is forgotten after 2 days (see it with once keys status --scope once.scheduler.recorded KEY)",
				"task", e.Task, "slot", e.Slot, "scope", recordedScope, "key", key, "err", rerr)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("cannot read a slot whose run died before it began; it is followed up", "task", e.Task, "slot", e.Slot, "err", err)
			rewatch([]string{key})
		}
	}
	return out
}

// rewatch follows up slot e.Slot, whose record (e, claimed as key) lost to a live run's claim: that
// run may still fail before its attempt is recorded (its lease lost, the store failing at Begin),
// and the slot, which this node would have recorded, would then have no record. Once the job's
// lease is free the follow-up reads the slot: an attempt, nothing more to do; none, the record is
// made again (the run's claim, gone by then, taken over). A job not on this node is left to the
// next account. owed marks the watch as a record this node owes (watch.owed).
func (s *Scheduler) rewatch(ctx context.Context, e store.Event, key string, owed ...bool) {
	kind, _, _ := strings.Cut(key, " ")
	if kind != "missed" && kind != overlapKind {
		return // a pause's skip: the run saw no pause as it began
	}
	s.mu.Lock()
	js := s.jobs[e.Task]
	s.mu.Unlock()
	if js == nil {
		return
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	w := js.watchLocked(context.WithoutCancel(ctx), e.Slot, false)
	if w == nil {
		return
	}
	if w.skipNote == "" {
		w.skipNote, w.missed = e.Note, kind == "missed"
	}
	w.owed = w.owed || slices.Contains(owed, true)
}
