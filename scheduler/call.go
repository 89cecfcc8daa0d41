package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/store"
)

// options are the guard's options for a launch of jb.
func (s *Scheduler) options(jb Job, l launch) once.Options {
	o := once.Options{Store: s.c.Store, Task: jb.Name, Holder: s.c.Node, TTL: jb.TTL, MaxAttempts: jb.MaxAttempts,
		OnUnknown: once.Policy(jb.OnUnknown), LockDir: s.c.LockDir, Logger: s.log, Fleet: true, Untried: l.untried,
		TracerProvider: s.c.TracerProvider}
	if jb.Limit >= 2 {
		o.Limit = jb.Limit // each launch takes one of the job's seats; the ledger keeps one attempt per slot
	}
	if pausable(l) {
		// Checked again as the run is about to begin: a pause seen after the launch's check
		// below (call) and before the attempt is recorded still keeps the slot from running.
		o.Prepare = func(context.Context, *once.Run) error {
			if _, paused := s.isPaused(jb.Name); paused {
				return errPaused
			}
			return nil
		}
	}
	s.checkClaimedAtBegin(&o, jb, l)
	if s.c.Resolve != nil {
		o.ResolveHint = func(sl string) string {
			if r := s.c.Resolve(jb.Name, sl); r != nil {
				return r.Failed
			}
			return ""
		}
	}
	return o
}

// checkClaimedAtBegin has a launch of untried slots that may begin late claim each slot just
// before its attempt is recorded (claimLaunch, claim.go): one that waited in the queue, follows a
// slot up, catches slots up, or (a fire) begins more than lateClaim after the slot's fire time
// (lateLaunch). A node that started meanwhile may have recorded the slot missed (a hole:
// recordHoles; a gap: account), or the node running the job skipped it, after call's check
// (dropClaimed) or the follow-up's; whichever claim the store took first decides: the run begins,
// or it does not (errClaimed) and the record stands. One round trip a slot, in place of the read
// of the claims made here before; a fire on time claims nothing. A claim lost by a sequence's
// slot ends the sequence (a Prepare error does): the slots after it are followed up (followRest).
func (s *Scheduler) checkClaimedAtBegin(o *once.Options, jb Job, l launch) {
	if !l.untried {
		return
	}
	mayBeLate := l.waited || l.why == whyFollow || l.why == whyCatchUp
	if !mayBeLate && (l.why != whyFire || len(l.slots) != 1) {
		return
	}
	prepare := o.Prepare
	o.Prepare = func(ctx context.Context, run *once.Run) error {
		if prepare != nil { // a pause, seen here: nothing claimed for a run that does not begin
			if err := prepare(ctx, run); err != nil {
				return err
			}
		}
		if !mayBeLate && !s.lateLaunch(l.fireAt) {
			return nil
		}
		return s.claimLaunch(ctx, run)
	}
}

// lateLaunch is whether a fire's run begins more than lateClaim after its slot's fire time at (by
// the fleet's clock): a node that starts now may find the slot in a gap and record it missed.
func (s *Scheduler) lateLaunch(at time.Time) bool {
	return at.IsZero() || s.clock.now().Sub(at) > lateClaim
}

// call runs the active launch a through the guard and acts on its results.
func (js *jobState) call(ctx context.Context, a *active) {
	s := js.s
	js.mu.Lock()
	jb, gen := js.job, js.gen
	if jb.Work != nil {
		a.workGrace = s.graceOf(jb) // this launch's definition, whatever a Reload makes of the job
	}
	js.mu.Unlock()
	if !js.dropClaimed(ctx, a, jb) {
		return
	}
	if _, paused := s.isPaused(jb.Name); paused && pausable(a.l) {
		s.pausedLaunch(ctx, jb, a.l.slots[0])
		return
	}
	o := s.options(jb, a.l)
	js.stopBetweenSlots(&o, a)
	out := s.output(jb)
	defer out.close()
	var timeout *time.Timer
	before := func(run *once.Run) {
		js.mu.Lock()
		a.run = run
		stopped := a.stopped
		js.mu.Unlock()
		out.begin(run)
		if stopped != "" { // stopped before the command started: it is stopped as it starts
			return
		}
		if jb.Timeout > 0 {
			timeout = time.AfterFunc(jb.Timeout, func() {
				js.mu.Lock()
				defer js.mu.Unlock()
				if js.activeLocked(a) && a.run == run {
					js.stopLocked(ctx, a, fmt.Sprintf("timed out after %s", jb.Timeout))
				}
			})
		}
	}
	results := func(res once.Result) {
		if timeout != nil {
			timeout.Stop()
		}
		js.mu.Lock()
		a.run = nil
		a.decided++
		a.busy = res.Decision == once.Busy
		js.mu.Unlock()
		out.end(ctx, res)
		js.after(ctx, a, res)
	}
	var err error
	if jb.Work != nil {
		err = js.callWork(ctx, o, a, jb, before, results)
	} else {
		err = js.callCommand(ctx, o, a, jb, out, before, results)
	}
	switch {
	case errors.Is(err, errPaused): // paused after the check above, before the attempt began
		s.pausedLaunch(ctx, jb, a.l.slots[0])
		return
	case errors.Is(err, errClaimed):
		js.claimedFirst(ctx, jb, a, err)
	case errors.Is(err, errStopped):
		s.log.Info("stopped between two slots of its sequence", "task", jb.Name, "why", a.l.why, "err", err)
	case err != nil && !stopping(ctx):
		js.failedLaunch(jb, a, gen, err)
		return // not followed up too: its follow-ups, failing in the outage, left the account short (TestOutageSlotsAreAccounted)
	}
	js.followRest(ctx, jb, a)
}

// failedLaunch handles a launch that failed without a record of its slots (the store is down,
// most often; or its command cannot start here, errCannotStart): the job is accounted before its
// next fire (of generation gen), which catches them up or records them missed. Without it the
// next slot to run became the job's newest and nothing looked behind it.
func (js *jobState) failedLaunch(jb Job, a *active, gen int, err error) {
	s := js.s
	js.mu.Lock()
	retryIn := js.accountLaterLocked(s.clock.now())
	if t, perr := js.spec.Parse(a.l.slots[0]); perr == nil && js.gen == gen && (js.failedFrom.IsZero() || t.Before(js.failedFrom)) {
		js.failedFrom = t // a job with no history yet is accounted from here
	}
	if js.gen == gen { // the slots it did not decide: a later slot that runs first hides them from the gap
		js.addFailedLocked(a.l.slots[min(a.decided, len(a.l.slots)):])
	}
	if errors.Is(err, errCannotStart) {
		js.cannotStart = strings.TrimPrefix(err.Error(), errCannotStart.Error()+": ")
	}
	js.mu.Unlock()
	if errors.Is(err, store.ErrSchemaAhead) {
		s.haltAhead(err)
		return
	}
	if errors.Is(err, errCannotStart) {
		s.log.Error("the job's command cannot start on this node (not the store): fix the job (once daemon --check names what it can); its slots are run by another node or recorded missed, saying why, by an account before the next fire",
			"task", jb.Name, "slots", a.l.slots, "why", a.l.why, "retry_in", retryIn, "err", err)
		return
	}
	s.log.Error("could not run the job; its slots are caught up or recorded as missed once the store answers (an account tried at a poll after retry_in, and before the next fire)", "task", jb.Name, "slots", a.l.slots, "why", a.l.why, "retry_in", retryIn, "err", err)
}

// followRest follows up the slots a sequence (a catch-up) did not reach: it ended early on a slot
// claimed first by another node (errClaimed), a stop (replace, its timeout: errStopped, or its
// context), or, without an error, on a lost lease or an outcome not recorded (the
// guard ends a sequence there). Those slots have no record, and newer ones (the fires meanwhile,
// their skips) have: the job's next account walks only the slots after its newest, and until the
// node's next start nothing looked at them (TestSequenceEndedEarlyLeavesNoSlot). Followed up, each
// is run at a poll once the job's lease is free (claiming it first: claimLaunch), unless it has
// an attempt by then or the fleet claimed it (recorded missed or skipped: wasSkipped); the job is
// accounted before its next fire too (its holes, holes.go). A draining node leaves them to the
// nodes that follow them and to the next start's account.
func (js *jobState) followRest(ctx context.Context, jb Job, a *active) {
	js.mu.Lock()
	defer js.mu.Unlock()
	n, from := len(a.l.slots), a.decided
	if a.busy {
		// Busy (held elsewhere as it began, or its lease taken between two slots): after watched
		// every slot, but a job follows up at most maxWatches at once, the oldest dropped for
		// room and forgotten; the busy slot and those after it wait in js.rest too.
		from--
	}
	if n < 2 || from >= n {
		return
	}
	rest := a.l.slots[from:]
	if js.s.isDraining() {
		js.s.log.Warn("the node drains: the slots its sequence did not reach are left to the nodes that follow them and to the next start of a node with this job, which catches them up (or records them missed, outside its catch-up window or beyond catch-up-max): if no node starts soon, check them with once history and run them with once backfill",
			"task", jb.Name, "why", a.l.why, "first", rest[0], "last", rest[len(rest)-1], "slots", len(rest))
		return
	}
	if !a.l.untried { // only catch-ups have several slots, and they run untried slots
		return
	}
	js.rest = appendNew(js.rest, rest)
	js.topUpLocked(ctx)
	// And accounted before the next fire, as before: a job whose fires keep its lease held leaves
	// a follow-up few polls with the lease free, while its account queues them here. Not a busy
	// one, as before: its holder may run them, and an account would queue them again, busy again.
	js.needAccount = js.needAccount || !a.busy
	js.s.log.Info("the sequence ended before its last slot: the slots it did not reach are followed up", "task", jb.Name,
		"why", a.l.why, "first", rest[0], "slots", len(rest), "waiting_for_room", len(js.rest))
}

// appendNew appends to rest the slots of more it does not hold: a catch-up of the same slots
// that ends early again adds none twice: rest holds at most the slots of the job's catch-ups.
func appendNew(rest, more []string) []string {
	have := make(map[string]bool, len(rest))
	for _, sl := range rest {
		have[sl] = true
	}
	for _, sl := range more {
		if !have[sl] {
			have[sl] = true
			rest = append(rest, sl)
		}
	}
	return rest
}

// topUpLocked follows up the slots of js.rest, oldest first, while the job has room among its
// watches (maxWatches), without dropping a watch for room (a dropped watch may record a skip). The
// rest of a long catch-up (catch-up-max up to 10,000) is followed up here, maxWatches at a time
// (followUp tops up at each poll): a running node does not account the job again until its next
// fire, and then finds only the rest's newest slots behind the task's newest entries (behindSlots).
func (js *jobState) topUpLocked(ctx context.Context) {
	for len(js.rest) > 0 && !js.removed && (js.watches[js.rest[0]] != nil || len(js.watches) < maxWatches) {
		if w := js.watchLocked(ctx, js.rest[0], true); w != nil {
			w.rest = true
		}
		js.rest = js.rest[1:]
	}
	if len(js.rest) == 0 {
		js.rest = nil
	}
}

// claimedFirst: a slot of launch a was claimed first by another node (claimLaunch), as its run was
// about to begin; it is not run, and that node's record (or run) stands. The slots of a sequence
// after it are followed up (followRest). A slot another node's live run claimed (a seat's,
// errRunsElsewhere) is followed up as a busy launch's is (after): that run may still die before
// its attempt is recorded.
func (js *jobState) claimedFirst(ctx context.Context, jb Job, a *active, err error) {
	s := js.s
	if errors.Is(err, errRunsElsewhere) {
		s.log.Info("not run: a run of another node claimed the slot first; it is followed up", "task", jb.Name, "slots", a.l.slots, "why", a.l.why, "err", err)
		skip := (jb.Overlap == "skip" || jb.Overlap == "") && a.l.why == whyFire
		js.mu.Lock()
		for _, sl := range a.l.slots {
			w := js.watchLocked(ctx, sl, a.l.untried && !skip)
			if w != nil && skip && w.skipNote == "" {
				// Not run late (overlap = skip), as a busy fire is not (after): if that run dies
				// before its attempt, the follow-up records the skip; without a note it dropped
				// the slot without a record.
				w.skipNote = fmt.Sprintf("overlap = skip: slot %s fired late and a run of another node had claimed it first", sl)
			}
		}
		js.mu.Unlock()
	} else {
		s.log.Warn("not run: the slot was claimed first by another node, which recorded it skipped or missed",
			"task", jb.Name, "slots", a.l.slots, "why", a.l.why, "err", err)
	}
}

// dropClaimed drops from a launch that waited in the queue the slots the fleet claimed meanwhile
// (claimed): the node running the job skipped one (its own buffer was full), a node that
// started recorded it missed (a hole, recordHoles), or a live run of another node claimed it (then
// followed up: that run may die before its attempt). It reports whether any slot is left to run.
func (js *jobState) dropClaimed(ctx context.Context, a *active, jb Job) bool {
	if !a.l.waited || !a.l.untried {
		return true
	}
	got, err := js.s.claimed(ctx, jb.Name, a.l.slots)
	if err != nil || len(got) == 0 {
		return true
	}
	for sl, k := range got {
		js.s.log.Info("not run: the slot was claimed by another node while it waited here", "task", jb.Name, "slot", sl,
			"claim", standingClaim(k))
	}
	js.mu.Lock() // a.l is read under it (drain, triggers)
	defer js.mu.Unlock()
	for sl, k := range got {
		if isLaunchClaim(k) {
			// A live run of another node claimed it: it may still die before its attempt is
			// recorded, and the slot would have no record. Followed up, as claimedFirst does.
			js.watchLocked(ctx, sl, true)
		}
	}
	a.l.slots = slices.DeleteFunc(slices.Clone(a.l.slots), func(sl string) bool { _, ok := got[sl]; return ok })
	return len(a.l.slots) > 0
}

// stopBetweenSlots has a sequence (a catch-up) stopped between two slots (a drain, replace, its
// timeout) begin no further attempt: stopLocked signals only after the stopped attempt's note is
// written (up to stopNoteTimeout), and the next slot could begin meanwhile.
func (js *jobState) stopBetweenSlots(o *once.Options, a *active) {
	if len(a.l.slots) < 2 {
		return
	}
	prepare, first := o.Prepare, a.l.slots[0]
	o.Prepare = func(ctx context.Context, run *once.Run) error {
		js.mu.Lock()
		stopped := a.stopped
		js.mu.Unlock()
		if stopped != "" && run.Slot != first {
			return fmt.Errorf("%w (%s)", errStopped, stopped)
		}
		if prepare != nil {
			return prepare(ctx, run)
		}
		return nil
	}
}

// errPaused is the launch's Prepare error when its job was paused before the attempt began.
var errPaused = errors.New("the job was paused before the slot's run began")

// errClaimed is the Prepare error of a launch that claimed its slot (claimLaunch) and found it
// claimed first: recorded skipped or missed by another node, or run by one.
var errClaimed = errors.New("the slot was claimed first by another node before its run began")

// errCannotStart: the launch's command cannot start on this node (job.New refused it: not found,
// not executable, its dir missing); no store was touched. The launch goes the way of a store
// error (its slots accounted before the next fire: another node of the fleet may run them, or the
// account records them missed), but the log and the missed note say why (jobState.cannotStart).
var errCannotStart = errors.New("the command cannot start on this node")

// errStopped is a sequence's Prepare error when its launch was stopped before the slot's attempt
// began.
var errStopped = errors.New("the launch was stopped before the slot's run began")

// pausable reports whether launch l is a slot's own launch, which a pause seen before its run
// begins keeps from running: no node fires a paused job's slots. Catch-ups, reruns and
// triggers are runs a person or the ledger asked for.
func pausable(l launch) bool {
	return (l.why == whyFire || l.why == whyFollow) && len(l.slots) == 1
}

// pausedLaunch drops slot sl of jb, paused since it fired and before its run began (a loaded
// node, a launch that waited for the one before, or a node that follows a slot another node
// held). It is recorded as paused unless it has an attempt already (another node ran it), and
// other nodes watching it then drop it too (wasSkipped).
func (s *Scheduler) pausedLaunch(ctx context.Context, jb Job, sl string) {
	if st, err := s.c.Store.Slot(ctx, jb.Name, sl); err == nil && st.Last == nil {
		s.pausedSlot(ctx, jb, sl)
	}
}

// callCommand runs a command job: a fresh job.Runner per launch, its output to out.
func (js *jobState) callCommand(ctx context.Context, o once.Options, a *active, jb Job, out *output,
	before func(*once.Run), results func(once.Result)) error {
	s := js.s
	grace := s.graceOf(jb)
	r, err := job.New(job.Job{Args: jb.Command, Dir: jb.Dir, Stdout: out, Stderr: out, Shim: s.c.Shim, Grace: grace,
		Notify: jb.Notify, Ping: jb.Ping, NotifyTimeout: 5 * time.Second, Logger: s.log.With("job", jb.Name), // which job's webhook fails: its URL is shown as its host only
		Env: func() []string {
			env := slices.Clone(jb.Env)
			if s.c.Env != nil {
				env = append(env, s.c.Env()...)
			}
			return env
		},
		Resolve: func(sl string) *notify.Resolve { return s.resolve(jb.Name, sl) },
		Before:  before,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errCannotStart, err)
	}
	defer func() {
		// The notifications go on after the launch: a webhook that hangs must not hold the
		// job's next slot (it would wait behind this launch, and the queue grow without bound).
		// The daemon's exit waits for them, each within its NotifyTimeout.
		r.Release()
		s.writes.Add(1)
		go func() { defer s.writes.Done(); r.WaitNotifications() }()
	}()
	js.mu.Lock()
	js.cannotStart = ""
	a.runner = r
	stopped := a.stopped
	js.mu.Unlock()
	if stopped != "" {
		r.Stop(syscall.SIGTERM)
	}
	if len(a.l.slots) == 1 {
		o.Slot = a.l.slots[0]
		res, err := r.Do(ctx, o)
		if err == nil {
			results(res)
		}
		return err
	}
	return r.SequenceStream(ctx, o, slices.Values(a.l.slots), a.l.slots[len(a.l.slots)-1],
		once.SeqOptions{KeepGoing: true, Quiet: true, OnResult: results})
}

// callWork runs a Go function job.
func (js *jobState) callWork(ctx context.Context, o once.Options, a *active, jb Job,
	before func(*once.Run), results func(once.Result)) error {
	work := func(ctx context.Context, run *once.Run) error {
		before(run)
		if jb.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, jb.Timeout)
			defer cancel()
		}
		a.working.Store(true)
		defer a.working.Store(false)
		return js.contained(ctx, run, jb)
	}
	if len(a.l.slots) == 1 {
		o.Slot = a.l.slots[0]
		res, err := once.Do(ctx, o, work)
		if err == nil {
			results(res)
		}
		return err
	}
	_, err := once.Sequence(ctx, o, a.l.slots, once.SeqOptions{KeepGoing: true, Quiet: true, OnResult: results}, work)
	return err
}

// contained runs jb.Work in a goroutine of its own and returns its error. A panic is this job's
// failed attempt, as a command's crash is, not the end of every job of the node: it would leave
// their attempts running, each then unknown (review). runtime.Goexit (which recover cannot stop)
// ends that goroutine only, and fails the attempt noting once.GoexitNote: in the launch's
// goroutine it skipped the launch's bookkeeping, and the job, still seen active, never ran again.
func (js *jobState) contained(ctx context.Context, run *once.Run, jb Job) (err error) {
	done := make(chan struct{})
	go func() {
		returned := false
		defer close(done)
		defer func() {
			v := recover()
			switch {
			case v != nil:
				js.s.log.Error("the job's Work panicked; its attempt is recorded as failed", "task", jb.Name, "slot", run.Slot,
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				err = fmt.Errorf("the work panicked: %v", v)
			case !returned:
				js.s.log.Error("the job's Work called runtime.Goexit; its attempt is recorded as failed", "task", jb.Name, "slot", run.Slot)
				err = errors.New(once.GoexitNote)
			}
		}()
		err = jb.Work(ctx, run)
		returned = true
	}()
	<-done
	return err
}

func (s *Scheduler) resolve(task, sl string) *notify.Resolve {
	if s.c.Resolve == nil {
		return nil
	}
	return s.c.Resolve(task, sl)
}

// after acts on one result of a launch: a slot another node holds is watched; a failed attempt
// is watched for its retry; attempts that vanished holders left, and an attempt that lost its
// lease, run again when the job's on-unknown policy is rerun; a trigger that was answered is
// removed.
func (js *jobState) after(ctx context.Context, a *active, res once.Result) {
	s := js.s
	js.mu.Lock()
	defer js.mu.Unlock()
	jb := js.job
	if jb.OnUnknown == string(once.PolicyRerun) {
		for _, ab := range res.Abandoned {
			if ab.Slot != "" {
				js.enqueueLocked(launch{slots: []string{ab.Slot}, why: whyRerun})
			}
		}
	}
	switch res.Decision {
	case once.Busy: // every slot of the launch: a catch-up elsewhere may die half-way
		skip := (jb.Overlap == "skip" || jb.Overlap == "") && a.l.why == whyFire
		for _, sl := range a.l.slots {
			w := js.watchLocked(ctx, sl, a.l.untried && !skip)
			switch {
			case w == nil || !skip || res.Attempt != nil:
			case jb.Limit >= 2 && res.Holder != nil: // every seat taken, by other nodes too
				w.skipNote = fmt.Sprintf("overlap = skip: all %d seats of the job were taken when slot %s fired", jb.Limit, sl)
			case jb.Limit < 2:
				// Held elsewhere. A live holder records the skip itself (overlapLocked), but one
				// that died or drains fires nothing: without this note the slot had no record.
				w.skipNote = fmt.Sprintf("overlap = skip: slot %s fired while the job was held elsewhere (%s)", sl, heldBy(res))
			}
		}
		return
	case once.Ran:
		at := res.Attempt
		switch {
		case res.RecordErr != nil:
			js.watchLocked(ctx, res.Slot, false)
		case at.State == store.Failed && jb.RetryBackoff > 0 && a.stopped == "":
			js.watchLocked(ctx, res.Slot, false)
		case at.State == store.Unknown && jb.OnUnknown == string(once.PolicyRerun) && a.stopped == "":
			js.watchLocked(ctx, res.Slot, false)
		}
	}
	if a.l.trigger != "" { // answered: ran, already tried, or waiting for review
		go s.triggerDone(ctx, jb.Name, a.l.trigger)
	}
}

// heldBy says who held the job when a launch found it busy: the holder, or the busy reason (a
// process of this host holding the local lock; the lease lost before the attempt began).
func heldBy(res once.Result) string {
	if l := res.Holder; l != nil {
		return fmt.Sprintf("by %s, run %s", l.Holder, l.RunID)
	}
	if res.Reason == "" {
		return "by another process of this host"
	}
	return res.Reason
}
