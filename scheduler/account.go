package scheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/once-run/once/notify"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// Bounds of one gap's accounting.
const (
	// maxMissedEvents is how many missed slots a gap records one by one (the newest); the oldest
	// of them says how many earlier ones were missed too.
	maxMissedEvents = 100
	// maxGapCount bounds how far back the earlier missed slots are counted.
	maxGapCount = 1_000_000
	// newestEntries is how many of the task's newest history entries name the newest slot known.
	newestEntries = 20
)

// gap is the slots of a job that passed since the newest slot the ledger knows, newest first by
// kind: late (fired moments ago: fired now), catchUp (in the catch-up window, at most
// catch-up-max), missed (the rest, the newest maxMissedEvents of them) and earlier (how many more
// missed ones are older; more is set when there were more than maxGapCount).
type gap struct {
	late, catchUp, missed []slot.Slot
	holes                 []slot.Slot // holes behind the newest slot that are not run: recordHoles
	earlier               int
	more                  bool
}

// account catches up job js after a gap: on start, after a suspend, after refused fires. The
// slots since the newest slot of the job's history run oldest first when they are due in its
// catch-up window (or passed only moments ago); older ones are recorded as missed, once per
// fleet, and announced. A job with no history starts from now.
func (s *Scheduler) account(ctx context.Context, js *jobState, now time.Time) {
	ctx, cancel := bounded(ctx) // a store that stopped answering fails it: kept, and tried again
	defer cancel()
	js.mu.Lock()
	jb, spec := js.job, js.spec
	if js.next.Value == "" || !fireTime(jb.Name, js.next, jb.Jitter).After(now) {
		js.next = nextFire(jb.Name, spec, jb.Jitter, now)
	}
	tk := js.takeFailedLocked(now) // taken now: a paused job's accounting must not leave it for later
	js.mu.Unlock()
	// keep puts tk back for the next accounting when this one could not finish (putBackLocked).
	kept := false
	defer func() {
		if !kept { // the store answered: a later error waits firstAccountRetry again
			js.mu.Lock()
			js.retryBackoff = 0
			js.mu.Unlock()
		}
	}()
	retryIn := time.Duration(0)
	keep := func() {
		kept = true
		js.mu.Lock()
		retryIn = js.accountLaterLocked(s.clock.now())
		js.putBackLocked(tk)
		js.mu.Unlock()
	}
	pause, paused := s.isPaused(jb.Name)
	k, err := s.newestSlot(ctx, jb, spec, now)
	last := k.last
	if err != nil {
		if !stopping(ctx) {
			keep()
			s.log.Warn("cannot read the job's history to catch up; trying again at a poll after retry_in, and at its next slot", "task", jb.Name, "retry_in", retryIn, "err", err)
		}
		return
	}
	if last.IsZero() {
		if tk.from.IsZero() {
			return
		}
		// No history, but a launch failed without a record (the store was down at the job's
		// first fires): the gap starts at its slot, else that slot and the one this accounting
		// stands in for would be lost without a word.
		last = tk.from.Add(-time.Nanosecond)
	}
	holes, lost, err := s.allHoles(ctx, jb.Name, spec, k, tk.slots, last)
	if err != nil {
		if !stopping(ctx) {
			keep()
			s.log.Warn("cannot read the fleet's claims, or a queued or failed slot's history, to catch up; trying again at a poll after retry_in, and at its next slot", "task", jb.Name, "retry_in", retryIn, "err", err)
		}
		return
	}
	if paused {
		if !s.accountPaused(ctx, jb, spec, last, now, pause) {
			keep()
		}
		s.recordAllHoles(ctx, js, jb, holes, lost, k.newest) // nothing of a paused job runs
		return
	}
	g := findGap(jb, spec, last, now, holes)
	if len(g.missed) > 0 && !s.recordMissed(ctx, jb, g, js.missedNote()) {
		keep()
		js.missedLeft(tk.gen, g.missed) // a later slot that runs first would hide them from the next account's gap
	}
	s.recordAllHoles(ctx, js, jb, g.holes, lost, k.newest)
	if run := append(g.catchUp, g.late...); len(run) > 0 {
		slots := make([]string, len(run))
		for i, sl := range run {
			slots[i] = sl.Value
		}
		s.log.Info("catching up", "task", jb.Name, "slots", len(slots), "first", slots[0], "last", slots[len(slots)-1])
		s.markQueued(ctx, jb.Name, slots)
		js.submit(ctx, launch{slots: slots, untried: true, why: whyCatchUp})
	}
}

// retryAccounts accounts, at a poll, each job whose account a store error put off
// (accountLaterLocked) once its retryAccount has passed, unless its next fire is close: that
// fire accounts it. Without it, slots a store blip left without a record waited for the job's
// next fire: a day for a daily job.
func (s *Scheduler) retryAccounts(ctx context.Context) {
	if s.isDraining() {
		return
	}
	if _, ok := s.clock.state(); !ok {
		return // the dispatcher refuses to fire too; it accounts once the clock is right
	}
	now := s.clock.now()
	for _, js := range s.snapshot() {
		js.mu.Lock()
		jb, retry := js.job, js.retryAccount
		due := js.needAccount && !retry.IsZero() && !now.Before(retry) && !js.removed &&
			js.next.Value != "" && fireTime(jb.Name, js.next, jb.Jitter).After(now.Add(late))
		if due {
			js.needAccount, js.retryAccount = false, time.Time{}
		}
		js.mu.Unlock()
		if due {
			s.log.Info("accounting the job again after a store error, before its next fire", "task", jb.Name)
			go s.account(ctx, js, now)
		}
	}
}

// known is what account reads of a job's history: the start of its newest slot (zero when none)
// and, for a job whose slots can wait in a node's queue, the holes behind it (findHoles), newest
// first.
type known struct {
	last  time.Time
	holes []hole
	// behind: the catch-up window's slots behind what the newest entries show (findHoles), and
	// cursor: the oldest of those entries', from which the task's history is read on for them.
	behind []slot.Slot
	cursor string
	// newest is when the newest of the task's entries read for its holes began (the store's clock):
	// a node that took the job's lease since a shared read of the leases shows in it (recordHoles).
	newest time.Time
}

// newestSlot reads the newest slot of jb's history that spec can read (a changed schedule's old
// slots and manual runs' slots are not its own). When the newest slot due at now has an entry,
// that is the newest, read from that slot's history alone: a slot's history costs that slot on
// every store, the task's newest entries a page (on the key-value stores, from the task's history
// index: docs/stores/redis.md; the first page on a ledger an older once wrote builds it, once). Otherwise it is the newest such slot among the task's newest
// entries (an older slot is not probed by name: a slot can be recorded under another spelling of
// its instant, e.g. a backfill's local offset, which Parse reads and a name does not match). A job
// whose slots can wait in a queue (queues) has its newest entries read in any case, for its holes.
func (s *Scheduler) newestSlot(ctx context.Context, jb Job, spec slot.Spec, now time.Time) (known, error) {
	var k known
	if sl := spec.Prev(now); sl.Value != "" {
		h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: jb.Name, Slot: sl.Value, Limit: 1})
		if err != nil {
			return k, err
		}
		if len(h) > 0 { // no slot after it is due: the gap is empty, whatever else the history holds
			k.last = sl.Start
			if !queues(jb) {
				return k, nil
			}
		}
	}
	h, err := s.c.Store.History(ctx, store.HistoryQuery{Task: jb.Name, Limit: newestEntries})
	if err != nil {
		return k, err
	}
	for _, e := range h {
		if t, err := spec.Parse(e.Slot); err == nil && t.After(k.last) {
			k.last = t
		}
		if e.StartedAt.After(k.newest) {
			k.newest = e.StartedAt
		}
	}
	if queues(jb) {
		k.holes, k.behind = findHoles(jb, spec, h, len(h) < newestEntries, k.last, now, s.c.MaxClockOffset+late, s.c.MaxClockOffset)
		if len(k.behind) > 0 {
			k.cursor = h[len(h)-1].Cursor
		}
	}
	return k, nil
}

// accountPaused accounts the gap of a job paused now (a node starts, or comes back, while the
// job is paused): nothing of it runs, not even in its catch-up window; the slots due before the
// pause began are recorded missed (no node ran the job then), those due since as skipped for the
// pause, as a running node records them. Skipping the account of a paused job left the slots of
// the gap without a record, and after the resume the job went on from its next slot. It reports
// false when the missed slots could not be recorded.
func (s *Scheduler) accountPaused(ctx context.Context, jb Job, spec slot.Spec, last, now time.Time, pause store.Key) bool {
	all := jb
	all.CatchUp, all.CatchUpMax = 0, 0
	g := findGap(all, spec, last, now, nil)
	var before []slot.Slot
	var since []string
	for _, sl := range append(g.missed, g.late...) {
		if sl.Start.Before(pause.ClaimedAt) {
			before = append(before, sl)
		} else {
			since = append(since, sl.Value)
		}
	}
	s.pausedSlots(ctx, jb, since) // one claim for the gap, not one per slot
	g.missed, g.late = before, nil
	return len(g.missed) == 0 || s.recordMissed(ctx, jb, g, missedNote)
}

// findGap walks back from now to the slot after last: the slots fired less than late ago, then
// the catch-up window's newest catch-up-max, then the missed ones.
//
// holes (findHoles, newest first, all older than last) follow the same rules after the gap's
// slots, as older ones: those due moments ago or in the catch-up window (within catch-up-max,
// counted with the gap's) run with them; the others go to g.holes, to be recorded missed
// (recordHoles), not to g.missed.
func findGap(jb Job, spec slot.Spec, last, now time.Time, holes []slot.Slot) gap {
	var g gap
	window, most := jb.CatchUp, jb.CatchUpMax
	if window > 0 && most <= 0 {
		most = 1
	}
	from := now.Add(-window)
	n := 0
	for sl := spec.Prev(now); sl.Value != "" && sl.Start.After(last); sl = spec.Prev(sl.Start.Add(-time.Nanosecond)) {
		at := fireTime(jb.Name, sl, jb.Jitter)
		switch {
		case at.After(now): // not due yet: the dispatcher fires it
		case now.Sub(at) <= late && len(g.late) == 0:
			g.late = append(g.late, sl)
		case window > 0 && sl.Start.After(from) && len(g.catchUp) < most:
			g.catchUp = append(g.catchUp, sl)
		case len(g.missed) < maxMissedEvents:
			g.missed = append(g.missed, sl)
		default:
			if n++; n > maxGapCount {
				g.more = true
				return reverse(g)
			}
			g.earlier++
		}
	}
	for _, sl := range holes {
		at := fireTime(jb.Name, sl, jb.Jitter)
		switch {
		case at.After(now):
		case now.Sub(at) <= late && len(g.late) == 0:
			g.late = append(g.late, sl)
		case window > 0 && sl.Start.After(from) && len(g.catchUp) < most:
			g.catchUp = append(g.catchUp, sl)
		default:
			g.holes = append(g.holes, sl)
		}
	}
	return reverse(g)
}

// reverse puts each list oldest first.
func reverse(g gap) gap {
	slices.Reverse(g.late)
	slices.Reverse(g.catchUp)
	slices.Reverse(g.missed)
	slices.Reverse(g.holes)
	return g
}

// missedNote is the note of a slot of a gap recorded missed.
const missedNote = "missed: its fire time passed while no node of the fleet ran the job, outside its catch-up window"

// missedNote is missedNote, and why this node could not start the job's command when its last
// launch could not (errCannotStart): the cause is then in history, not only in this node's log.
func (js *jobState) missedNote() string {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.cannotStart == "" {
		return missedNote
	}
	return store.Clip(missedNote+"; "+js.s.c.Node+" could not start its command: "+js.cannotStart, store.MaxNoteLen)
}

// recordedScope is the business-key scope in which the fleet's nodes claim the right to record
// a missed (or paused) slot, so that it is recorded once however many nodes find it.
const recordedScope = "once.scheduler.recorded"

// recordMissed records g's missed slots as missed events with the note why, each once per fleet,
// and sends one notification for them. It reports false when it could not record them: the caller leaves them
// for the job's next accounting.
func (s *Scheduler) recordMissed(ctx context.Context, jb Job, g gap, why string) bool {
	events := make([]store.Event, len(g.missed))
	for i, sl := range g.missed {
		note := why
		if i == 0 && (g.earlier > 0 || g.more) {
			note += fmt.Sprintf("; %s earlier slots were missed too (not recorded one by one)", earlier(g))
		}
		events[i] = store.Event{Task: jb.Name, Slot: sl.Value, Kind: store.Missed, Holder: s.c.Node, Note: note}
	}
	recorded, err := s.recordOnce(ctx, "missed", events)
	if err != nil {
		s.log.Warn("cannot record the missed slots; the job is accounted again at a later poll and at its next slot", "task", jb.Name, "err", err)
	}
	s.stats.missed.Add(int64(recorded))
	if recorded == 0 {
		return err == nil
	}
	first, last := g.missed[0].Value, g.missed[len(g.missed)-1].Value
	s.log.Warn("missed slots: they passed while no node ran the job, outside its catch-up window",
		"task", jb.Name, "missed", recorded, "first", first, "last", last, "earlier", earlier(g),
		"backfill", fmt.Sprintf("once backfill --task %s --from %s --to %s -- COMMAND", jb.Name, first, last))
	s.out.Event(jb.Notify, notify.Event{Event: notify.Missed, Task: jb.Name, Slot: last, Holder: s.c.Node,
		Reason: fmt.Sprintf("%d slots missed, %s to %s (and %s earlier)", recorded, first, last, earlier(g))})
	return err == nil
}

func earlier(g gap) string {
	if g.more {
		return fmt.Sprintf("more than %d", maxGapCount)
	}
	return fmt.Sprint(g.earlier)
}

// recordOnce records each of events that no other node of the fleet records: the nodes claim
// "KIND TASK SLOT" in recordedScope first, and only the node whose claim wins records. A run that
// may begin late claims the same keys (claimLaunch, claim.go): a key a live run won is not
// recorded (the slot runs), one a run that died before its attempt won is taken over. A claim
// whose event could not be recorded is given back, so that a later try can record it. It
// returns how many events this node recorded; err is the first failure.
func (s *Scheduler) recordOnce(ctx context.Context, kind string, events []store.Event) (int, error) {
	keys := make([]string, len(events))
	for i, e := range events {
		keys[i] = kind + " " + e.Task + " " + e.Slot
	}
	won := make([]bool, len(keys))
	claimant := store.Clip(recorderPrefix+s.c.Node, store.MaxRunIDLen)
	if s.keys == nil {
		for i := range won {
			won[i] = true
		}
	} else {
		var err error
		won, err = s.keys.Claim(ctx, store.ClaimRequest{Scope: recordedScope, Keys: keys, Pending: true,
			Claimant: store.Claimant{RunID: claimant}})
		if err != nil {
			return 0, err
		}
		// A key lost to a run that claimed the slot (claimLaunch) and died before its attempt
		// began is taken over: the slot is then recorded, not left without a record.
		for _, i := range s.takeOverForRecord(ctx, keys, won, events, claimant) {
			won[i] = true
		}
	}
	n := 0
	var first error
	// Claimed: written even if ctx ends now (a claim without its record would hide the slot), but
	// within a bound, since Run waits for these writes at shutdown.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for i, e := range events {
		if !won[i] {
			continue
		}
		e.Note = store.Clip(e.Note, store.MaxNoteLen)
		if err := s.c.Store.Record(wctx, e); err != nil {
			if first == nil {
				first = err
			}
			if s.keys != nil {
				_ = s.keys.ReleaseKeys(wctx, recordedScope, keys[i:i+1], claimant)
			}
			continue
		}
		n++
	}
	return n, first
}
