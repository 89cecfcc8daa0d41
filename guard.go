package once

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/once-run/once/flock"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

// guard is one guarded call (Do, Sequence, CatchUp) and, per slot, one attempt of it.
type guard struct {
	o     Options
	runID string
	slot  string
	log   *slog.Logger
	sp    *spans // the call's spans (trace.go)
	// release: this attempt is the guard's last act under the lease, so its outcome may release
	// the lease in the same write (store.Finisher) once Options.MinHold has passed.
	release bool
	// vanished: the attempts of vanished holders abandon found, until warnVanished logs them.
	vanished []store.Attempt
}

func newRunID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return id.String(), nil
}

// sequence takes the local lock and the lease once, then decides and runs each slot in turn.
// last is the last slot: busy events name it (for a catch-up, the current slot, as for a plain
// run). The steps are those of the package comment; each slot's are in attempt.
func sequence(ctx context.Context, o Options, slots iter.Seq[string], last string, so SeqOptions, work Work) (_ []Result, err error) {
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	if so.perRun {
		last = "run-" + runID
		slots, so.first = slices.Values([]string{last}), &last
	}
	g := &guard{o: o, runID: runID, slot: last, sp: newSpans(o, last)}
	g.log = o.Logger.With("task", o.Task, "slot", g.slot, "run_id", runID, "holder", o.Holder)
	defer func() { g.errorSpan(ctx, err) }()

	// 1. Local lock, then the store. With Replace, a local lock held by the holder to replace is
	// waited for once its lease is taken over (2b).
	unlock, busy, err := g.lockLocal(ctx)
	if err != nil || busy != nil {
		return g.busy(busy, so), err
	}
	pendingLock := unlock == nil
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	if o.Locked != nil && !pendingLock {
		o.Locked() // after the deferred unlock: a panic in it must not keep the lock for the process's life
	}
	if err := g.o.open(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while opening the store: %w", context.Cause(ctx))
		}
		return nil, err
	}

	// 2a. Where reading costs nothing (store.LocalReads), a single slot already done is skipped
	// before the lease is taken: a launch that finds its slot done writes nothing but its event.
	if r, ok := g.skipEarly(ctx, so); ok {
		return []Result{r}, nil
	}

	// 2. Lease, held for every slot of the sequence; with the attempts earlier holders left running
	// and the first slot's state read in the same step when the store can (store.Starter).
	ls, started, busy, err := g.takeLease(ctx, so.first)
	if err != nil || busy != nil {
		return g.busy(busy, so), err
	}
	defer g.releaseLease(ctx, ls)
	taken := ls.Info() // before any renewal: the grant as taken, with what it replaced
	if g.o.Replace {
		// 2b. The holder replaced, if any, stops before anything of this run starts.
		u, busy, err := g.awaitReplaced(ctx, ls, taken, time.Now(), pendingLock)
		if err != nil || busy != nil {
			return g.busy(busy, so), err
		}
		if pendingLock {
			unlock = u
		}
	}

	// 3. Attempts left running by holders whose leases are gone are unknown now.
	abandoned, err := g.abandon(ctx, ls, taken, started)
	if err != nil {
		return nil, err
	}
	g.resolveReplaced(ctx, taken, abandoned)

	// 3–5 for each slot (attempt): the ledger's decision, the work, its outcome.
	rs, firstStart, err := g.eachSlot(ctx, ls, slots, last, so, started, abandoned, work)
	if err != nil {
		return rs, err
	}

	// 5. Min-hold, then release (deferred).
	g.minHold(ctx, ls, firstStart)
	return rs, nil
}

// skipEarly reads the one slot of a Do before the lease is taken, on a store whose reads cost
// nothing (store.LocalReads), and returns its Skipped result when the ledger already says skip.
// Only a Skipped decision is taken so: it rests on a last attempt that is over (succeeded, resolved,
// unknown under --on-unknown skip, or tried at all under Untried), which no holder of the lease
// changes except by a new attempt, and a new attempt is not begun without one of these reads
// saying to run. Every other decision, and any error reading, goes the way of the lease, which
// reads the slot again. The attempts that vanished holders left running are marked unknown by the
// next launch that takes the lease.
func (g *guard) skipEarly(ctx context.Context, so SeqOptions) (Result, bool) {
	lr, ok := g.o.Store.(store.LocalReads)
	if !ok || !lr.LocalReads() || !so.single || so.perRun || so.first == nil || *so.first == "" {
		return Result{}, false
	}
	st, err := g.o.Store.Slot(ctx, g.o.Task, *so.first)
	if err != nil {
		return Result{}, false
	}
	d, reason := g.decideSlot(st)
	if d != Skipped {
		return Result{}, false
	}
	g.sp.slot = *so.first
	g.logDecision(ctx, d, reason, st.Last, 0, false)
	r := Result{Decision: Skipped, Attempt: st.Last, Reason: reason, Slot: *so.first}
	if so.OnResult != nil {
		so.OnResult(r)
	}
	return r, true
}

// busy is the single result of a sequence that found the task held elsewhere, or nil.
func (g *guard) busy(r *Result, so SeqOptions) []Result {
	if r == nil {
		return nil
	}
	r.Slot = g.slot
	if so.OnResult != nil {
		so.OnResult(*r)
	}
	return []Result{*r}
}

// lockLocal takes the kernel file lock when Options.LockDir is set; unlock releases it. A busy
// lock opens the store only to record the busy event, and returns the Busy result; with
// Options.Replace it returns neither unlock nor busy: the lock is taken after the lease.
func (g *guard) lockLocal(ctx context.Context) (unlock func(), busy *Result, err error) {
	if g.o.LockDir == "" || g.o.Limit >= 2 {
		return func() {}, nil, nil // with Limit, the store's seats decide who runs
	}
	lk, err := flock.Acquire(ctx, g.o.LockDir, g.o.Task, g.o.Wait)
	if err != nil && ctx.Err() != nil {
		return nil, nil, fmt.Errorf("interrupted while waiting for the local lock: %w", context.Cause(ctx))
	}
	if errors.Is(err, flock.ErrBusy) && g.o.Replace {
		return nil, nil, nil // its holder is replaced first (awaitReplaced)
	}
	if errors.Is(err, flock.ErrBusy) {
		if err := g.o.open(ctx); err != nil {
			return nil, nil, err
		}
		reason := "another once on this machine holds the task's lock"
		g.busyEvent(ctx, reason, nil)
		return nil, &Result{Decision: Busy, Reason: reason}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("local lock: %w", err)
	}
	return func() { _ = lk.Release() }, nil, nil
}

// takeLease takes the task's lease, waiting up to Options.Wait. With first (the first slot, when
// known) and a store.Starter, the same step abandons what vanished holders left running and reads
// that slot: started is then set. A lease held elsewhere is the Busy result.
func (g *guard) takeLease(ctx context.Context, first *string) (ls *lease.Lease, started *store.Started, busy *Result, err error) {
	o := g.o
	req := store.AcquireRequest{Task: o.Task, Holder: o.Holder, RunID: g.runID, TTL: o.TTL, Replace: o.Replace, Limit: o.Limit}
	take := func(ctx context.Context) (store.Lease, error) { return o.Store.Acquire(ctx, req) }
	if st, ok := o.Store.(store.Starter); ok && first != nil && !o.Replace && o.Limit < 2 {
		start := st.Start
		if ls, ok := o.Store.(store.LazyStarter); ok {
			// Nothing is acted on before a durable write follows: the attempt's Begin, or a
			// review event or the release when the slot is not run.
			start = ls.StartLazy
		}
		take = func(ctx context.Context) (store.Lease, error) {
			r, err := start(ctx, req, *first)
			if err != nil {
				return store.Lease{}, err
			}
			started = &r
			return r.Lease, nil
		}
	}
	ls, err = lease.Take(ctx, o.Store, o.TTL, o.Wait, take)
	if err != nil && ctx.Err() != nil {
		// Cancelled (a signal, in the CLI) while waiting or connecting: not busy, interrupted.
		return nil, nil, nil, fmt.Errorf("interrupted while taking the lease: %w", context.Cause(ctx))
	}
	var be *store.BusyError
	if errors.As(err, &be) {
		reason := fmt.Sprintf("held by %s (token %d, run %s) until %s", be.Lease.Holder, be.Lease.Token,
			be.Lease.RunID, be.Lease.Expires.UTC().Format(time.RFC3339))
		g.busyEvent(ctx, reason, &be.Lease)
		return nil, nil, &Result{Decision: Busy, Holder: &be.Lease, Reason: reason}, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return ls, started, nil, nil
}

// releaseLease gives the lease back (a no-op when an outcome already released it), even when ctx
// is cancelled; failing that, the lease expires by itself.
func (g *guard) releaseLease(ctx context.Context, ls *lease.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := ls.Release(rctx); err != nil {
		g.log.Warn("could not release the lease; it will expire by itself", "token", ls.Token(), "err", err)
	}
}

// abandon marks unknown the attempts that holders whose leases are gone left running (already
// done when the lease was taken by a store.Starter: started), and keeps each but those of the
// holders the grant taken replaced (resolveReplaced) for warnVanished.
func (g *guard) abandon(ctx context.Context, ls *lease.Lease, taken store.Lease, started *store.Started) ([]store.Attempt, error) {
	var abandoned []store.Attempt
	if started != nil {
		abandoned = started.Abandoned
	} else {
		var err error
		if abandoned, err = g.o.Store.Abandon(ctx, g.o.Task, ls.Token()); err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
	}
	for _, a := range abandoned {
		if !wasReplaced(taken, a.Token) { // replaced, not vanished: resolveReplaced says so
			g.vanished = append(g.vanished, a)
		}
	}
	g.sp.abandoned = abandoned
	return abandoned, nil
}

// warnVanished logs each attempt of a vanished holder that abandon found, once, on log: that of the
// first slot of the sequence, the one being started when they were taken over (its slot and run id
// are the takeover's, as in Do, whose one slot it is; the abandoned attempt's slot is prev_slot).
func (g *guard) warnVanished(log *slog.Logger, token int64) {
	for _, a := range g.vanished {
		log.Warn("previous attempt's holder vanished; its outcome is unknown", "token", token,
			"prev_slot", a.Slot, "prev_run_id", a.RunID, "prev_holder", a.Holder, "prev_token", a.Token)
	}
	g.vanished = nil
}

// eachSlot decides and runs the slots in turn under the lease, each with its own run id (the
// first keeps the sequence's). It stops after a busy result, an outcome not recorded, a lost
// lease, and, unless KeepGoing, a slot that failed or needs review. firstStart is when the first
// work started (zero if none ran).
func (g *guard) eachSlot(ctx context.Context, ls *lease.Lease, slots iter.Seq[string], last string, so SeqOptions,
	started *store.Started, abandoned []store.Attempt, work Work) (rs []Result, firstStart time.Time, err error) {
	runID, token := g.runID, ls.Token()
	defer g.warnVanished(g.log, token) // no slot began: on the sequence's own line
	i, busy := -1, false               // busy: this slot did more than skip (lookahead)
	for sl, ahead := range g.lookahead(ctx, slots, so, &busy) {
		if i++; i > 0 {
			g.sp.next(sl)
			if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
				return rs, firstStart, fmt.Errorf("interrupted before slot %s: %w", sl, err)
			}
			if runID, err = newRunID(); err != nil {
				return rs, firstStart, err
			}
		}
		check := checkSlot // Do's one slot may be "" (no slot)
		if !so.single {
			check = checkSeqSlot // SequenceStream's, as they come
		}
		if err := check(sl); err != nil {
			return rs, firstStart, err
		}
		g.sp.slot = sl
		sg := &guard{o: g.o, runID: runID, slot: sl, release: so.single, sp: g.sp}
		sg.log = g.o.Logger.With("task", g.o.Task, "slot", sl, "run_id", runID, "holder", g.o.Holder)
		g.warnVanished(sg.log, token) // the first slot's
		sg.log = sg.log.With("token", token)
		read := ahead
		if i == 0 && started != nil && sl == *so.first {
			read = &started.Slot
		}
		r, began, err := sg.attempt(ctx, ls, read, so.Quiet && !(so.loudLast && sl == last), work)
		if err != nil {
			return rs, firstStart, err
		}
		busy = r.Decision != Skipped
		r.Slot = sl
		if i == 0 {
			r.Abandoned = abandoned
		}
		if firstStart.IsZero() && !began.IsZero() {
			firstStart = began
		}
		if !so.discard {
			rs = append(rs, r)
		}
		if so.OnResult != nil {
			so.OnResult(r)
		}
		if r.Decision == Busy || r.RecordErr != nil || ls.Err() != nil {
			break
		}
		if !so.KeepGoing && (r.Decision == Review || r.Decision == Ran && r.Attempt.State != store.Succeeded) {
			break
		}
	}
	return rs, firstStart, nil
}

// minHold keeps the lease until Options.MinHold after the first work started, unless the lease is
// lost or ctx cancelled first.
func (g *guard) minHold(ctx context.Context, ls *lease.Lease, firstStart time.Time) {
	if firstStart.IsZero() {
		return
	}
	if hold := g.o.MinHold - time.Since(firstStart); hold > 0 {
		select {
		case <-time.After(hold):
		case <-ls.Lost():
		case <-ctx.Done():
			g.holdOnStop(ctx, ls, firstStart)
		}
	}
}

// holdOnStop keeps the lease to the end of Options.MinHold when the call is stopped (SIGTERM)
// while it waits that out: it stops renewing and renews the grant once, to expire when the hold
// ends, instead of releasing it (the deferred release is then a no-op). Released, another run
// could start at once, which is what --min-hold is there to prevent (clock skew between hosts).
func (g *guard) holdOnStop(ctx context.Context, ls *lease.Lease, firstStart time.Time) {
	left := g.o.MinHold - time.Since(firstStart)
	if left < time.Millisecond {
		return
	}
	info := ls.Info()
	if sl, ok := g.o.Store.(store.SessionLeases); ok && sl.LeasesEndWithSession() {
		g.log.Warn("stopped during --min-hold: this store's lease ends with once's session (ZooKeeper's ephemeral node), so another run may start before the hold ends", "token", info.Token, "left", left.Round(time.Millisecond).String())
		return
	}
	ls.Released()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := g.o.Store.Renew(rctx, info, left); err != nil {
		g.log.Warn("stopped during --min-hold, and the lease could not be kept to its end; it expires by itself", "token", info.Token, "err", err)
		return
	}
	g.log.Info("stopped during --min-hold: the lease is kept until the hold ends, then expires", "token", info.Token, "left", left.Round(time.Millisecond).String())
}

// busyEvent logs and records that the task was held elsewhere (by holder, when known: the lease);
// in a fleet only at Debug (Options.Fleet).
func (g *guard) busyEvent(ctx context.Context, reason string, holder *store.Lease) {
	if g.o.Fleet {
		g.log.Debug("busy", "reason", reason)
		return
	}
	g.log.Info("busy", "reason", reason)
	g.event(ctx, store.Busy, 0, 0, reason)
	g.decisionSpan(ctx, Busy, reason, busyAttrs(holder)...)
}

// event records a skipped, busy or review event. Busy and skipped events are recorded lazily where
// the store can (store.LazyRecorder): a launch that ran nothing does not wait for the disk to say
// so, and no decision reads them; review events are durable (review decides Waiting).
func (g *guard) event(ctx context.Context, kind store.State, token int64, attempt int, note string) {
	e := store.Event{Task: g.o.Task, Slot: g.slot, Kind: kind, RunID: g.runID,
		Holder: g.o.Holder, Token: token, Attempt: attempt, Note: store.Clip(note, store.MaxNoteLen)}
	var err error
	if lr, ok := g.o.Store.(store.LazyRecorder); ok && (kind == store.Busy || kind == store.Skipped) {
		err = lr.RecordLazy(ctx, e)
	} else {
		err = g.o.Store.Record(ctx, e)
	}
	if err != nil {
		g.log.Warn("could not record event", "event", string(kind), "err", err)
	}
}
