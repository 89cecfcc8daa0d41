package once

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

// attempt decides one slot under the held lease and runs the work when the ledger says so. read
// is the slot's state when it was read as the lease was taken (store.Starter), else nil. It
// returns the local instant the work started (zero when it did not run).
func (g *guard) attempt(ctx context.Context, ls *lease.Lease, read *store.SlotState, quiet bool, work Work) (Result, time.Time, error) {
	// 3. The ledger: the slot's state, and whether to run it.
	st, d, reason, err := g.decideRead(ctx, read)
	if err != nil {
		return Result{}, time.Time{}, err
	}
	run := g.newRun(ls, st)
	if d != Ran {
		g.logDecision(ctx, d, reason, st.Last, ls.Token(), quiet)
		r := Result{Decision: d, Attempt: st.Last, Reason: reason}
		if d == Busy {
			r.Holder = seatHolder(g.o.Task, st.Last)
		}
		return r, time.Time{}, nil
	}

	// 4. Work: prepared first, so that work which cannot start costs no attempt; then recorded as
	// running, fenced by the token; then run until it returns or the lease is lost. The attempt's
	// span is the parent of the work's (ctx), and of the command's (TRACEPARENT, package job).
	ctx, sp := g.startSpan(ctx, Ran, attemptAttrs(run)...)
	if g.o.Prepare != nil {
		if err := g.o.Prepare(ctx, run); err != nil {
			err = fmt.Errorf("%w: %w", ErrNotStarted, err)
			failSpan(sp, err)
			return Result{}, time.Time{}, err
		}
	}
	att, err := g.o.Store.Begin(ctx, store.Attempt{Task: g.o.Task, Slot: g.slot, RunID: g.runID, Number: run.Attempt,
		Holder: g.o.Holder, Token: run.Token, State: store.Running, Limit: g.seats()})
	if r, ok := g.beginRefused(ctx, err, ls, sp, quiet); ok {
		return r, time.Time{}, nil
	}
	if err != nil {
		err = fmt.Errorf("ledger: begin attempt: %w", err)
		failSpan(sp, err)
		return Result{}, time.Time{}, err
	}
	started := time.Now()
	log := g.log.With("attempt", run.Attempt)
	log.Info("start", "previous", string(run.Previous))
	werr := g.runWork(ctx, log, ls, sp, run, work)

	// 5. The outcome, recorded (and the lease released with it when this is the last act).
	out := outcome(werr, ls.Err())
	if lost := ls.Err(); lost != nil {
		sp.AddEvent("lease lost", trace.WithAttributes(AttrReason.String(lost.Error())))
	}
	res := Result{Decision: Ran, Attempt: &att, WorkErr: werr}
	took := time.Since(started).Round(time.Millisecond).String() // the work's, not the record's retries
	fin, late, ferr := g.record(ctx, log, ls, run, out, g.release && time.Since(started) >= g.o.MinHold)
	endAttempt(sp, out, ferr)
	if ferr != nil {
		res.RecordErr = ferr
		att.State = store.Running
		g.logUnrecorded(ctx, log, out, took, ferr)
		return res, started, nil
	}
	res.Attempt = &fin
	lvl := slog.LevelInfo
	if fin.State != store.Succeeded {
		lvl = slog.LevelWarn
	}
	if late != nil {
		log.Warn("end: the outcome was recorded after all: the write whose answer was lost had landed (read back)",
			"state", string(fin.State), "exit_code", *out.ExitCode, "duration", took, "records", fin.Records, "err", late)
		return res, started, nil
	}
	log.Log(ctx, lvl, "end", "state", string(fin.State), "exit_code", *out.ExitCode, "duration", took, "records", fin.Records)
	return res, started, nil
}

// logUnrecorded logs the end of an attempt whose outcome is not known to be recorded (record's
// error ferr): not recorded, or, when reading it back failed (ErrMaybeRecorded), maybe.
func (g *guard) logUnrecorded(ctx context.Context, log *slog.Logger, out store.Outcome, took string, ferr error) {
	msg := "end: outcome NOT recorded; the next holder will see this attempt as unknown"
	args := []any{"state", string(out.State), "exit_code", *out.ExitCode, "duration", took, "err", ferr}
	if errors.Is(ferr, ErrMaybeRecorded) {
		msg = "end: the outcome may or may not have been recorded: the write failed in a way that may have landed, and the attempt could not be read back"
		args = append(args, "check_with", historyCommand(g.o.Task, g.slot))
	}
	log.Log(ctx, slog.LevelError, msg, args...)
}

// beginRefused is the result of a Begin the store refused for a reason that is a decision, not an
// error (ok true; the span ended): the lease was lost first (Busy); a person resolved the slot as
// done since it was read (decided again: Skipped); or, holding a seat,
// another seat began this slot between our read of it and our Begin (Busy: the ledger admits one
// running attempt per slot).
func (g *guard) beginRefused(ctx context.Context, err error, ls *lease.Lease, sp trace.Span, quiet bool) (Result, bool) {
	if errors.Is(err, store.ErrConflict) {
		// Only a person's decision since the read; a seat that lost the race to Begin is busy
		// below, even when the other seat's attempt has ended by this read.
		if st, d, reason, rerr := g.decideRead(ctx, nil); rerr == nil && d != Ran && d != Busy && st.Last != nil && st.Last.Resolution != nil {
			g.logDecision(ctx, d, reason, st.Last, ls.Token(), quiet)
			sp.SetAttributes(AttrDecision.String(string(d)), AttrReason.String(reason))
			sp.End()
			return Result{Decision: d, Attempt: st.Last, Reason: reason}, true
		}
	}
	if !errors.Is(err, store.ErrNotHeld) && !(errors.Is(err, store.ErrConflict) && g.o.Limit >= 2) {
		return Result{}, false
	}
	reason := "lost the lease before starting"
	lvl := slog.LevelWarn // a waiter that got the lease and exits busy says why
	if !errors.Is(err, store.ErrNotHeld) {
		reason = fmt.Sprintf("slot %s began under another seat at the same moment", g.slot)
		lvl = slog.LevelInfo
	}
	g.log.Log(ctx, lvl, "busy", "reason", reason, "err", err)
	sp.SetAttributes(AttrDecision.String(string(Busy)), AttrReason.String(reason))
	sp.End()
	return Result{Decision: Busy, Reason: reason}, true
}

// slotState is the slot's ledger state: read, when the lease was taken with it, else read now.
func (g *guard) slotState(ctx context.Context, read *store.SlotState) (store.SlotState, error) {
	if read != nil {
		return *read, nil
	}
	st, err := g.o.Store.Slot(ctx, g.o.Task, g.slot)
	if err != nil {
		return store.SlotState{}, fmt.Errorf("ledger: %w", err)
	}
	return st, nil
}

// decideRead reads the slot's state (slotState) and decides it (decideSlot).
func (g *guard) decideRead(ctx context.Context, read *store.SlotState) (store.SlotState, Decision, string, error) {
	st, err := g.slotState(ctx, read)
	if err != nil {
		return st, "", "", err
	}
	d, reason := g.decideSlot(st)
	return st, d, reason, nil
}

// newRun is the attempt this guard would make of a slot in state st.
func (g *guard) newRun(ls *lease.Lease, st store.SlotState) *Run {
	o := g.o
	run := &Run{Task: o.Task, Slot: g.slot, RunID: g.runID, Holder: o.Holder, Token: ls.Token(),
		Attempt: 1, Checkpoint: st.Checkpoint, lease: ls}
	if g.slot == "" {
		run.IdempotencyKey = g.runID
	} else {
		run.IdempotencyKey = o.Task + "/" + g.slot
	}
	if last := st.Last; last != nil {
		run.Attempt = last.Number + 1
		if last.State == store.Failed || last.State == store.Unknown {
			run.Previous = last.State
		}
	}
	return run
}

// seats is the Limit of the seat the guard runs under (store.Attempt.Limit), 0 when exclusive.
func (g *guard) seats() int {
	if g.o.Limit >= 2 {
		return g.o.Limit
	}
	return 0
}

// seatHolder is the grant that runs attempt a, as a Busy result names it.
func seatHolder(task string, a *store.Attempt) *store.Lease {
	return &store.Lease{Task: task, Holder: a.Holder, RunID: a.RunID, Token: a.Token}
}

// decideSlot is the slot policy for a slot in state st: Ran when it has no memory (no slot) or
// no attempt yet; with Options.Limit, Busy while another seat's attempt runs it.
func (g *guard) decideSlot(st store.SlotState) (Decision, string) {
	if st.Last == nil || g.slot == "" {
		return Ran, ""
	}
	if l := st.Last; g.o.Limit >= 2 && l.State == store.Running && l.Resolution == nil {
		// Abandon left it running, so its holder's seat is live: the slot is busy, not in doubt.
		return Busy, fmt.Sprintf("slot %s is running: attempt %d by %s holds another seat (token %d, run %s)",
			l.Slot, l.Number, l.Holder, l.Token, l.RunID)
	}
	if g.o.Untried {
		return Skipped, fmt.Sprintf("already tried: attempt %d by %s is %s", st.Last.Number, st.Last.Holder, st.Last.State)
	}
	return g.decide(st)
}

// logDecision logs, and records as an event, a slot the guard did not run (Skipped, Review); a
// quiet skip is logged at Debug and not recorded.
func (g *guard) logDecision(ctx context.Context, d Decision, reason string, last *store.Attempt, token int64, quiet bool) {
	switch d {
	case Skipped:
		if quiet || g.o.Fleet || g.o.Untried {
			g.log.Debug("skipped", "reason", reason, "attempt", last.Number)
			return
		}
		g.log.Info("skipped", "reason", reason, "attempt", last.Number)
		g.event(ctx, store.Skipped, token, last.Number, reason)
		g.decisionSpan(ctx, Skipped, reason, lastAttrs(last, token)...)
	case Busy:
		g.busyEvent(ctx, reason, seatHolder(g.o.Task, last))
	case Review:
		args := []any{"reason", reason, "attempt", last.Number}
		if g.o.ResolveHint != nil {
			args = append(args, "rerun_with", g.o.ResolveHint(g.slot))
		}
		g.log.Warn("needs review", args...)
		g.event(ctx, store.Review, token, last.Number, reason)
		g.decisionSpan(ctx, Review, reason, lastAttrs(last, token)...)
	}
}

// runWork runs work as run, with a context cancelled (cause: why) when the lease is lost. A
// panic in work is recorded as a failed attempt (its value as note) before it goes on, with the
// stack that raised it, to the caller: the lease is then released on the way out (sequence), so
// the slot is neither left running under a live holder nor shown as one whose holder vanished.
// runtime.Goexit in work (t.FailNow in a test's work) is recorded the same way, noted
// GoexitNote, and goes on ending the caller's goroutine: recover cannot stop it, and returns nil.
func (g *guard) runWork(ctx context.Context, log *slog.Logger, ls *lease.Lease, sp trace.Span, run *Run, work Work) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-ls.Lost():
			cancel(ls.Err())
		case <-wctx.Done():
		}
	}()
	started := time.Now()
	returned := false
	defer func() {
		v := recover()
		if v == nil && returned {
			return
		}
		werr, msg, why := fmt.Errorf("the work panicked: %v", v), "end: the work panicked", []any{"panic", fmt.Sprint(v)}
		if v == nil { // not a panic (panic(nil) recovers a *runtime.PanicNilError): runtime.Goexit
			werr, msg, why = errors.New(GoexitNote), "end: the work called runtime.Goexit", nil
		}
		out := outcome(werr, ls.Err())
		_, _, ferr := g.record(ctx, log, ls, run, out, false)
		endAttempt(sp, out, ferr)
		log.Error(msg, append([]any{"state", string(out.State), "recorded", ferr == nil, "err", ferr,
			"stack", string(debug.Stack())}, why...)...)
		g.minHold(ctx, ls, started) // the lease is kept its MinHold all the same (clock skew)
		if v != nil {
			panic(v)
		}
	}()
	err := work(wctx, run)
	returned = true
	return err
}

// GoexitNote is the note of an attempt whose work called runtime.Goexit (t.FailNow, t.SkipNow):
// it neither returned nor panicked, and did not finish.
const GoexitNote = "the work called runtime.Goexit (as t.FailNow does) instead of returning"

// outcome is what an attempt records, from what its work returned (werr) and why the lease was
// lost while it ran (lost, nil if it was not). It is a pure function of the two:
//
//   - nil → succeeded, exit code 0;
//   - an ExitCoder → its code: 0 is succeeded, anything else failed; a code beyond 32 bits, which
//     no store keeps (store.Outcome.Check would refuse the outcome and lose it), is recorded as 1
//     with the code in the note;
//   - any other error → failed, exit code 1, the error's text as note;
//   - with the lease lost, the note says so, and an outcome that is not succeeded is unknown: the
//     work was stopped, so it may have done all, some or none of its effects, and running the
//     slot again is the unknown policy's call, not a retry.
//
// The note is clipped to store.MaxNoteLen; ExitCode is never nil.
func outcome(werr, lost error) store.Outcome {
	out := store.Outcome{State: store.Succeeded}
	code := 0
	var ec ExitCoder
	switch {
	case werr == nil:
	case errors.As(werr, &ec):
		code = ec.ExitCode()
		if code != 0 {
			out.State = store.Failed
		}
		if code < math.MinInt32 || code > math.MaxInt32 {
			code, out.Note = 1, fmt.Sprintf("exit code %d is beyond 32 bits: recorded as 1", code)
		}
	default:
		code, out.State, out.Note = 1, store.Failed, werr.Error()
	}
	out.ExitCode = &code
	if lost != nil {
		if werr == nil || !errors.Is(werr, lost) { // work that returned its context's cause says it already
			out.Note = store.JoinNote(out.Note, lost.Error())
		}
		if out.State != store.Succeeded {
			out.State = store.Unknown
			out.Note = store.JoinNote(out.Note, "stopped because the lease was lost; whether the work happened is unknown")
		}
	}
	out.Note = store.Clip(out.Note, store.MaxNoteLen) // a work error's text may be anything
	return out
}

// stoppedRetry bounds finish's retries after a stop (see finish).
const stoppedRetry = 10 * time.Second

// finish records the outcome, retrying a store that is briefly unavailable while the lease holds,
// each try bounded by tryDeadline: a try stuck on a connection that went silent gives way to one
// that may get a new connection. With release, and a store that can (store.Finisher), the same
// write releases the lease. The
// first failure is logged at once (the retries may last most of the TTL); ctx ending while it
// retries (a stop signal once the command is over) makes the try under way the last: the next
// holder then finds the attempt unknown, as it would after the lease. A ctx that had ended before
// (what stopped the work: a scheduler's timeout, drain or replace) keeps the retries for
// stoppedRetry at most, so that a stop still ends the call soon.
//
// maybe is true when a try failed in a way that leaves unknown whether its write landed
// (store.ErrUnavailable but not store.ErrNotRecorded: a timeout, an answer lost): an error after
// it, a later try's refusal
// included (the attempt is no longer running, the lease no longer held: because that write
// landed), does not say that the outcome was not recorded.
func (g *guard) finish(ctx context.Context, log *slog.Logger, ls *lease.Lease, out store.Outcome, release bool) (a store.Attempt, maybe bool, err error) {
	stop := ctx.Done()
	if ctx.Err() != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stoppedRetry)
		defer cancel()
		stop, ctx = sctx.Done(), sctx // each try within the bound too
	} else {
		ctx = context.WithoutCancel(ctx)
	}
	fr, ok := g.o.Store.(store.Finisher)
	release = release && ok
	for try := 0; ; try++ {
		if d := ls.Deadline(); time.Until(d) <= 0 {
			// No try outlives the grant's expiry: past it, the store's answer would read
			// "unavailable: context deadline exceeded" of a store that is fine (SIGSTOP, a frozen VM).
			if maybe { // the last try's answer, not the expiry, is what is not known
				return store.Attempt{}, true, err
			}
			return store.Attempt{}, false, fmt.Errorf("%w: the lease expired at %s before the outcome was recorded (the work did not stop when its context was cancelled, or this process was stopped or starved, for longer than the lease's TTL)",
				lease.ErrLost, d.UTC().Format(time.RFC3339Nano))
		}
		fctx, cancel := context.WithDeadline(ctx, tryDeadline(ls, time.Now()))
		if release {
			if a, err = fr.FinishRelease(fctx, g.runID, ls.Info(), out); err == nil {
				ls.Released()
			}
		} else {
			a, err = g.o.Store.Finish(fctx, g.runID, ls.Token(), out)
		}
		spent := fctx.Err() != nil // the try ran out its bound: the next one begins at once
		cancel()
		// A schema a newer once upgraded refuses every try alike: not retried.
		if err == nil || !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrSchemaAhead) {
			return a, maybe, err
		}
		// Nothing was decided, or it was and the answer was lost (a try that ran out of its
		// bound: the store maps the deadline to ErrUnavailable, and the write may have landed);
		// a store that records nothing more says this write is not recorded (it is retried all
		// the same: it fails alike).
		maybe = maybe || !errors.Is(err, store.ErrNotRecorded)
		if time.Until(ls.Deadline()) < 0 {
			return a, maybe, err
		}
		if try == 0 {
			log.Warn("the work is over; its outcome could not be recorded, retrying while the lease lasts, each try bounded by a third of the TTL (a stop signal gives up)",
				"state", string(out.State), "until", ls.Deadline().Format(time.RFC3339), "err", err)
		}
		pause := 200 * time.Millisecond // for a store that fails fast (refused, reset)
		if spent {
			pause = 0 // a short lease under load: its tries would spend a fifth of it pausing
		}
		select {
		case <-ls.Lost():
			return a, maybe, err
		case <-stop:
			return a, maybe, err
		case <-time.After(pause):
		}
	}
}

// tryFraction is the share of the lease's TTL one try of finish may take (tryDeadline).
const tryFraction = 3

// tryDeadline is when a try of finish that starts at now gives up: a third of the lease's TTL
// later, or the grant's expiry if that comes first.
//
// Why a bound below the expiry: a store connection can go silent without a reset (a NAT or
// firewall that forgot it, a server frozen or failed over), and a try on it waits for its
// deadline, while a new connection would be answered at once; bounded by the expiry alone, the
// outcome of a run whose connection went silent was lost (measured: PostgreSQL, a 60 s lease, its
// outcome unknown after 60 s). A try that times out may have landed: finish counts it as maybe,
// so that the next try's refusal (not running, not held: because it landed) ends, through
// record's read-back, as recorded after all.
//
// Why a third: it is the time the lease itself gives a store to answer (renewals every TTL/3,
// the grant given up when a third of the TTL is left), so a store that answers within it holds
// the lease and records its outcome alike, and a slow one is not made to fail here first: 20 s
// with the default TTL of 60 s, above SQLite's busy_timeout (10 s by default), which then ends a
// try first. And it leaves the expiry room for two more tries after a first that hung.
func tryDeadline(ls *lease.Lease, now time.Time) time.Time {
	d := ls.Deadline()
	if t := now.Add(ls.TTL() / tryFraction); t.Before(d) {
		return t
	}
	return d
}

// historyCommand is the once history line that shows task's attempts of slot (of every slot
// without one).
func historyCommand(task, slot string) string {
	line := "once history " + shell.Flag("task", task)
	if slot != "" {
		line += " " + shell.Flag("slot", slot)
	}
	return line
}

// readBackTimeout bounds record's read of an attempt whose outcome write may have landed.
const readBackTimeout = 3 * time.Second

// ErrMaybeRecorded is wrapped by Result.RecordErr when the write of the outcome failed in a way
// that leaves unknown whether it landed (a timeout: etcd applies a request whose client gave up; a
// SQL COMMIT whose answer was lost) and reading the attempt back failed too: the outcome may or may
// not have been recorded; the attempt's history (once history --task T) tells.
var ErrMaybeRecorded = errors.New("the outcome may or may not have been recorded")

// record records out as run's outcome (finish). When finish failed in a way that may have landed
// (its maybe), the attempt is read back once (readBack, within readBackTimeout of a context a
// stop does not cancel): ended as out says, it was recorded after all — the attempt as read, and
// finish's error as late; still running (or ended otherwise: the next holder marked it unknown),
// finish's error; unreadable, finish's error and the read's, wrapping ErrMaybeRecorded.
func (g *guard) record(ctx context.Context, log *slog.Logger, ls *lease.Lease, run *Run, out store.Outcome, release bool) (fin store.Attempt, late, err error) {
	fin, maybe, err := g.finish(ctx, log, ls, out, release)
	if err == nil || !maybe {
		return fin, nil, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	a, rerr := g.readBack(rctx, run)
	switch {
	case rerr != nil:
		return store.Attempt{}, nil, fmt.Errorf("%w: %w; reading attempt %d back: %w", ErrMaybeRecorded, err, run.Attempt, rerr)
	case a.State == out.State && a.ExitCode != nil && *a.ExitCode == *out.ExitCode:
		return a, err, nil
	}
	return store.Attempt{}, nil, err
}

// readBack reads run's attempt as stored: the slot's last attempt, else (a newer attempt began
// since: another seat's, the next holder's) among the slot's newest entries of history.
func (g *guard) readBack(ctx context.Context, run *Run) (store.Attempt, error) {
	st, err := g.o.Store.Slot(ctx, run.Task, run.Slot)
	if err != nil {
		return store.Attempt{}, err
	}
	if l := st.Last; l != nil && l.RunID == run.RunID && l.Number == run.Attempt {
		return *l, nil
	}
	const newest = 100
	es, err := g.o.Store.History(ctx, store.HistoryQuery{Task: run.Task, Slot: run.Slot, Limit: newest})
	if err != nil {
		return store.Attempt{}, err
	}
	for _, e := range es {
		if e.State.IsAttempt() && e.RunID == run.RunID && e.Number == run.Attempt {
			return e.Attempt, nil
		}
	}
	return store.Attempt{}, fmt.Errorf("%w: run %s is not among the %d newest entries of task %q slot %q", store.ErrNotFound, run.RunID, newest, run.Task, run.Slot)
}
