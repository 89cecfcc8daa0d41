// Package once makes a piece of work run once: never two at a time, never twice for the same slot,
// never silently lost. It is the library behind the once command; a Go program can guard a function
// with exactly the same semantics.
//
// A guarded run goes through four steps, in order:
//
//  1. a kernel file lock on this machine (Options.LockDir), failing fast when busy;
//  2. a lease in the store, with a fencing token, renewed every TTL/3 while the work runs;
//  3. the ledger for the slot: a slot that already succeeded is skipped, one whose last attempt ended
//     in an unknown state (its holder vanished) follows Options.OnUnknown, a failed one is tried again
//     until Options.MaxAttempts;
//  4. the work, whose context is cancelled when the lease is lost; then its outcome is recorded and
//     the lease released (not before Options.MinHold).
//
// Slots come from package slot, stores from package store and its backends.
package once

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/once-run/once/flock"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

// Policy says what to do with a slot whose last attempt ended in an unknown state.
type Policy string

// Policies for Options.OnUnknown.
const (
	PolicyReview Policy = "review" // stop and wait for a person (once resolve); the default
	PolicyRerun  Policy = "rerun"  // run the slot again as the next attempt
	PolicySkip   Policy = "skip"   // treat the slot as done
)

// ParsePolicy validates a value for Options.OnUnknown.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyReview, PolicyRerun, PolicySkip:
		return p, nil
	}
	return "", invalidf("Options.OnUnknown %q: use review, rerun or skip", s)
}

// Options configures a guarded run.
type Options struct {
	Store store.Store // required, unless Open is set
	Task  string      // required; see ValidateTask
	// Open, when Store is nil, opens the store. Do and Sequence call it only once they hold the
	// local lock (LockDir), so that a launch which finds the task running on this machine neither
	// waits for the store nor touches it beyond recording its busy event; CatchUp, which reads the
	// ledger to find the missed slots, calls it first. Its error is returned as is.
	Open func(ctx context.Context) (store.Store, error)
	// Holder names this process in leases and history; default "hostname:pid". At most
	// store.MaxHolderLen bytes of printable UTF-8 (store.CheckName).
	Holder string
	// Slot is the slot value (see package slot); "" runs without per-slot memory: only mutual
	// exclusion and history.
	Slot string
	// TTL of the lease, renewed every TTL/3; default 60s.
	TTL time.Duration
	// MinHold keeps the lease at least this long after the work starts (short jobs and clock skew).
	MinHold time.Duration
	// Wait for a busy lock or lease up to this long instead of returning Busy at once.
	Wait time.Duration
	// OnUnknown: what to do when the slot's last attempt ended unknown; default PolicyReview.
	OnUnknown Policy
	// MaxAttempts failed (or unknown) attempts allowed per slot before it needs review; 0 = no limit.
	MaxAttempts int
	// LockDir, when set, adds the kernel file lock in this private directory before the lease.
	LockDir string
	// Logger receives one line at the start and end of every attempt and one for every skip, busy
	// and review; nil discards them.
	Logger *slog.Logger
	// ResolveHint, when set, returns the command a person runs to let slot, which needs review,
	// run again; the "needs review" log line carries it as rerun_with. The once command sets it
	// to a complete `once resolve` line for its store.
	ResolveHint func(slot string) string
	// Prepare, when set, is called for each attempt after the ledger has decided to run it and before
	// the attempt is recorded, with the Run it will be (its RunID, Attempt and Token are final). Whatever
	// can fail before the work starts belongs here — finding a command, starting its supervisor — so
	// that work which cannot start uses up no attempt: an error ends the call with an error wrapping
	// ErrNotStarted and the Prepare error, and nothing is recorded. Work that is prepared may still not
	// be called (the lease was lost before the attempt was recorded): Prepare's resources must be
	// released by the caller after Do returns.
	Prepare func(ctx context.Context, run *Run) error
	// Now is the clock that CatchUp uses to tell which slots are due; nil means time.Now. Tests
	// set it to simulate downtime. Lease expiry never uses it: that is the store's clock.
	Now func() time.Time
}

// Decision says what a guarded call did.
type Decision string

// Decisions.
const (
	Ran     Decision = "ran"     // the work ran; see Result.Attempt
	Skipped Decision = "skipped" // the slot had already succeeded (or unknown with PolicySkip)
	Busy    Decision = "busy"    // the lock or lease is held elsewhere
	Review  Decision = "review"  // the slot needs a person: unknown outcome or attempts used up
)

// Run describes the attempt being made; the work receives it.
type Run struct {
	Task, Slot, RunID, Holder string
	Attempt                   int
	Token                     int64
	// Previous is the state of the slot's previous attempt (store.Failed, store.Unknown) or "".
	Previous store.State
	// Checkpoint is the last checkpoint an earlier attempt of this slot reported, or "".
	Checkpoint string
	// IdempotencyKey is stable for the task and slot across attempts: "TASK/SLOT"; the run id
	// without a slot.
	IdempotencyKey string

	lease *lease.Lease
}

// Lost is closed when the lease is lost; the work must stop.
func (r *Run) Lost() <-chan struct{} { return r.lease.Lost() }

// LostErr says why the lease was lost, or nil.
func (r *Run) LostErr() error { return r.lease.Err() }

// StopBy is the local instant by which work must be dead once the lease is lost: a sixth of the TTL
// before the store can grant the lease to another holder.
func (r *Run) StopBy() time.Time { return r.lease.Deadline().Add(-r.lease.TTL() / 6) }

// Env returns the ONCE_* variables for a command run as this attempt (all but ONCE_STORE, which
// only the caller knows).
func (r *Run) Env() []string {
	return []string{
		"ONCE_TASK=" + r.Task,
		"ONCE_SLOT=" + r.Slot,
		"ONCE_RUN_ID=" + r.RunID,
		"ONCE_ATTEMPT=" + strconv.Itoa(r.Attempt),
		"ONCE_FENCING_TOKEN=" + strconv.FormatInt(r.Token, 10),
		"ONCE_IDEMPOTENCY_KEY=" + r.IdempotencyKey,
		"ONCE_PREVIOUS=" + string(r.Previous),
		"ONCE_CHECKPOINT=" + r.Checkpoint,
	}
}

// Result is what a guarded call did.
type Result struct {
	Decision Decision
	// Attempt is the attempt as recorded: after the work for Ran; the slot's last attempt for
	// Skipped and Review (nil when there is none).
	Attempt *store.Attempt
	// Holder is the current holder when Busy (empty when only the local lock was busy).
	Holder *store.Lease
	// Reason explains Skipped, Busy and Review in one line.
	Reason string
	// WorkErr is what the work returned.
	WorkErr error
	// RecordErr is set when the work ran but its outcome could not be recorded (lease lost or store
	// unavailable): the slot will show as unknown to the next holder.
	RecordErr error
	// Slot is the slot this result is about.
	Slot string
	// Abandoned lists the running attempts of earlier holders that vanished, found and marked
	// unknown when the lease was taken (first result of a sequence only).
	Abandoned []store.Attempt
}

// ErrNotStarted wraps the error of Options.Prepare: the work could not start, and no attempt was
// recorded for it.
var ErrNotStarted = errors.New("the work could not start")

// ExitCoder is implemented by work errors that carry a process exit code (exec.ExitError does).
type ExitCoder interface{ ExitCode() int }

// Work is the guarded work: it runs as the attempt run and must stop when ctx is cancelled (the
// lease was lost: context.Cause(ctx) wraps lease.ErrLost). A nil error records success with exit
// code 0; an ExitCoder error records its code (0 is success); any other error records failed with
// exit code 1 and the error as note.
type Work = func(ctx context.Context, run *Run) error

// Do runs work under the guard. It returns an error only when it could not decide (store
// unavailable, bad options); busy, skipped and review are Results. The work's context is cancelled
// (with lease.ErrLost as its cause) when the lease is lost. A nil error from work records the
// attempt as succeeded with exit code 0; an ExitCoder error records its code (0 is success); any
// other error records failed with exit code 1 and the error as note.
func Do(ctx context.Context, o Options, work Work) (Result, error) {
	if err := o.fill(); err != nil {
		return Result{}, err
	}
	rs, err := sequence(ctx, o, slices.Values([]string{o.Slot}), o.Slot, SeqOptions{first: &o.Slot, single: true}, work)
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// SeqOptions tunes Sequence.
type SeqOptions struct {
	// KeepGoing goes on to the next slot after a failed attempt or a slot that needs review;
	// without it the sequence stops there.
	KeepGoing bool
	// Quiet skips slots that already succeeded without a log line at Info or a skipped event in
	// history (a backfill or catch-up window lists many done slots on every run).
	Quiet bool
	// OnResult, when set, is called after each slot is decided (and run), in order.
	OnResult func(r Result)

	loudLast bool    // CatchUp: the current slot (the last) is skipped as loudly as by Do
	discard  bool    // SequenceStream: results go to OnResult only
	first    *string // the first slot, when known before the lease is taken (store.Starter reads it)
	single   bool    // Do: the one slot is the last, and its outcome may release the lease (store.Finisher)
}

// Sequence runs work for each of slots, in the order given, under one local lock and one lease
// held for the whole sequence, each slot through the ledger exactly as Do would (its own run id,
// attempt number, skip, review and max-attempts rules). o.Slot is ignored. It stops after the
// first slot that failed or needs review unless KeepGoing, and always when the lease is lost, an
// outcome could not be recorded or ctx is cancelled. It returns one Result per slot decided, in
// order (a single Busy result when the task is held elsewhere); the error is as for Do, with the
// results decided before it.
func Sequence(ctx context.Context, o Options, slots []string, so SeqOptions, work Work) ([]Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return nil, nil
	}
	so.first, so.single = &slots[0], false
	return sequence(ctx, o, slices.Values(slots), slots[len(slots)-1], so, work)
}

// SequenceStream is Sequence over the slots that slots yields, one at a time, keeping none of
// them nor their results: each Result goes to so.OnResult (set it) as the slot is decided, so
// memory stays the same whatever the number of slots (a backfill over years of minutes). A busy
// result is recorded against busySlot (Sequence uses its last slot). The error is as for
// Sequence.
func SequenceStream(ctx context.Context, o Options, slots iter.Seq[string], busySlot string, so SeqOptions, work Work) error {
	if err := o.fill(); err != nil {
		return err
	}
	so.discard, so.first, so.single = true, nil, false
	_, err := sequence(ctx, o, slots, busySlot, so, work)
	return err
}

func newRunID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return id.String(), nil
}

type guard struct {
	o     Options
	runID string
	slot  string
	log   *slog.Logger
	// release: this attempt is the guard's last act under the lease, so its outcome may release
	// the lease in the same write (store.Finisher) once Options.MinHold has passed.
	release bool
}

func (o *Options) fill() error {
	if o.Store == nil && o.Open == nil {
		return invalidf("no store: set Options.Store or Options.Open")
	}
	if err := ValidateTask(o.Task); err != nil {
		return err
	}
	if o.Holder == "" {
		o.Holder = DefaultHolder()
	}
	if err := store.CheckName("Options.Holder", o.Holder, store.MaxHolderLen); err != nil {
		return invalid(err)
	}
	if o.TTL == 0 {
		o.TTL = 60 * time.Second
	}
	if o.TTL < 300*time.Millisecond {
		return invalidf("Options.TTL %s is too short: use at least 300ms (renewals happen every TTL/3)", o.TTL)
	}
	if o.MinHold < 0 || o.Wait < 0 || o.MaxAttempts < 0 {
		return invalidf("Options.MinHold, Wait and MaxAttempts must not be negative")
	}
	if o.OnUnknown == "" {
		o.OnUnknown = PolicyReview
	}
	if _, err := ParsePolicy(string(o.OnUnknown)); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// DefaultHolder is "hostname:pid".
func DefaultHolder() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}

// event records a skipped, busy or review event. A busy event is recorded lazily where the store
// can (store.LazyRecorder): a launch that ran nothing does not wait for the disk to say so, and no
// decision reads busy events; skipped and review events are durable (review decides Waiting).
func (g *guard) event(ctx context.Context, kind store.State, token int64, attempt int, note string) {
	e := store.Event{Task: g.o.Task, Slot: g.slot, Kind: kind, RunID: g.runID,
		Holder: g.o.Holder, Token: token, Attempt: attempt, Note: store.Clip(note, store.MaxNoteLen)}
	var err error
	if lr, ok := g.o.Store.(store.LazyRecorder); ok && kind == store.Busy {
		err = lr.RecordLazy(ctx, e)
	} else {
		err = g.o.Store.Record(ctx, e)
	}
	if err != nil {
		g.log.Warn("could not record event", "event", string(kind), "err", err)
	}
}

// open opens the store when only Options.Open was given.
func (o *Options) open(ctx context.Context) error {
	if o.Store != nil {
		return nil
	}
	s, err := o.Open(ctx)
	if err != nil {
		return err
	}
	o.Store = s
	return nil
}

// sequence takes the local lock and the lease once, then decides and runs each slot in turn.
// last is the last slot: busy events name it (for a catch-up, the current slot, as for a plain
// run).
func sequence(ctx context.Context, o Options, slots iter.Seq[string], last string, so SeqOptions, work Work) (rs []Result, err error) {
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	g := &guard{o: o, runID: runID, slot: last}
	g.log = o.Logger.With("task", o.Task, "slot", g.slot, "run_id", runID, "holder", o.Holder)
	busy := func(r Result) ([]Result, error) {
		r.Slot = g.slot
		if so.OnResult != nil {
			so.OnResult(r)
		}
		return []Result{r}, nil
	}

	// 1. Local lock.
	if o.LockDir != "" {
		lk, err := flock.Acquire(ctx, o.LockDir, o.Task, o.Wait)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while waiting for the local lock: %w", context.Cause(ctx))
		}
		if errors.Is(err, flock.ErrBusy) {
			if err := g.o.open(ctx); err != nil {
				return nil, err
			}
			reason := "another once on this machine holds the task's lock"
			g.log.Info("busy", "reason", reason)
			g.event(ctx, store.Busy, 0, 0, reason)
			return busy(Result{Decision: Busy, Reason: reason})
		}
		if err != nil {
			return nil, fmt.Errorf("local lock: %w", err)
		}
		defer lk.Release()
	}

	if err := o.open(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while opening the store: %w", context.Cause(ctx))
		}
		return nil, err
	}
	g.o.Store = o.Store

	// 2. Lease, held for every slot of the sequence; with the attempts earlier holders left running
	// and the first slot's state read in the same step when the store can (store.Starter).
	req := store.AcquireRequest{Task: o.Task, Holder: o.Holder, RunID: runID, TTL: o.TTL}
	var started *store.Started
	take := func(ctx context.Context) (store.Lease, error) { return o.Store.Acquire(ctx, req) }
	if st, ok := o.Store.(store.Starter); ok && so.first != nil {
		take = func(ctx context.Context) (store.Lease, error) {
			r, err := st.Start(ctx, req, *so.first)
			if err != nil {
				return store.Lease{}, err
			}
			started = &r
			return r.Lease, nil
		}
	}
	ls, err := lease.Take(ctx, o.Store, o.TTL, o.Wait, take)
	if err != nil && ctx.Err() != nil {
		// Cancelled (a signal, in the CLI) while waiting or connecting: not busy, interrupted.
		return nil, fmt.Errorf("interrupted while taking the lease: %w", context.Cause(ctx))
	}
	var be *store.BusyError
	if errors.As(err, &be) {
		reason := fmt.Sprintf("held by %s (token %d, run %s) until %s", be.Lease.Holder, be.Lease.Token,
			be.Lease.RunID, be.Lease.Expires.UTC().Format(time.RFC3339))
		g.log.Info("busy", "reason", reason)
		g.event(ctx, store.Busy, 0, 0, reason)
		return busy(Result{Decision: Busy, Holder: &be.Lease, Reason: reason})
	}
	if err != nil {
		return nil, err
	}
	token := ls.Token()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := ls.Release(rctx); rerr != nil {
			g.log.Warn("could not release the lease; it will expire by itself", "token", token, "err", rerr)
		}
	}()

	// 3. Attempts left running by holders whose leases are gone are unknown now.
	var abandoned []store.Attempt
	if started != nil {
		abandoned = started.Abandoned
	} else if abandoned, err = o.Store.Abandon(ctx, o.Task, token); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	for _, a := range abandoned {
		g.log.Warn("previous attempt's holder vanished; its outcome is unknown", "token", token,
			"prev_slot", a.Slot, "prev_run_id", a.RunID, "prev_holder", a.Holder, "prev_token", a.Token)
	}

	var firstStart time.Time
	i := -1
	for sl := range slots {
		if i++; i > 0 {
			if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
				return rs, fmt.Errorf("interrupted before slot %s: %w", sl, err)
			}
			if runID, err = newRunID(); err != nil {
				return rs, err
			}
		}
		sg := &guard{o: o, runID: runID, slot: sl, release: so.single}
		sg.log = o.Logger.With("task", o.Task, "slot", sl, "run_id", runID, "holder", o.Holder, "token", token)
		var read *store.SlotState
		if i == 0 && started != nil && sl == *so.first {
			read = &started.Slot
		}
		r, began, err := sg.attempt(ctx, ls, read, so.Quiet && !(so.loudLast && sl == last), work)
		if err != nil {
			return rs, err
		}
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

	// 5. Min-hold, then release (deferred).
	if !firstStart.IsZero() {
		if hold := o.MinHold - time.Since(firstStart); hold > 0 {
			select {
			case <-time.After(hold):
			case <-ls.Lost():
			case <-ctx.Done():
			}
		}
	}
	return rs, nil
}

// attempt decides one slot under the held lease and runs the work when the ledger says so. read
// is the slot's state when it was read as the lease was taken (store.Starter), else nil. It
// returns the local instant the work started (zero when it did not run).
func (g *guard) attempt(ctx context.Context, ls *lease.Lease, read *store.SlotState, quiet bool, work Work) (res Result, started time.Time, err error) {
	o, log, token := g.o, g.log, ls.Token()
	var st store.SlotState
	if read != nil {
		st = *read
	} else if st, err = o.Store.Slot(ctx, o.Task, g.slot); err != nil {
		return Result{}, started, fmt.Errorf("ledger: %w", err)
	}
	run := &Run{Task: o.Task, Slot: g.slot, RunID: g.runID, Holder: o.Holder, Token: token,
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
		if g.slot != "" {
			if d, reason := g.decide(st); d != Ran {
				switch d {
				case Skipped:
					if quiet {
						log.Debug("skipped", "reason", reason, "attempt", last.Number)
						break
					}
					log.Info("skipped", "reason", reason, "attempt", last.Number)
					g.event(ctx, store.Skipped, token, last.Number, reason)
				case Review:
					args := []any{"reason", reason, "attempt", last.Number}
					if o.ResolveHint != nil {
						args = append(args, "rerun_with", o.ResolveHint(g.slot))
					}
					log.Warn("needs review", args...)
					g.event(ctx, store.Review, token, last.Number, reason)
				}
				return Result{Decision: d, Attempt: last, Reason: reason}, started, nil
			}
		}
	}

	// 4. Work: prepared first, so that work which cannot start costs no attempt.
	if o.Prepare != nil {
		if err := o.Prepare(ctx, run); err != nil {
			return Result{}, started, fmt.Errorf("%w: %w", ErrNotStarted, err)
		}
	}
	att, err := o.Store.Begin(ctx, store.Attempt{Task: o.Task, Slot: g.slot, RunID: g.runID, Number: run.Attempt,
		Holder: o.Holder, Token: token, State: store.Running})
	if err != nil {
		if errors.Is(err, store.ErrNotHeld) {
			reason := "lost the lease before starting"
			log.Info("busy", "reason", reason)
			return Result{Decision: Busy, Reason: reason}, started, nil
		}
		return Result{}, started, fmt.Errorf("ledger: begin attempt: %w", err)
	}
	started = time.Now()
	log = log.With("attempt", run.Attempt)
	log.Info("start", "previous", string(run.Previous))

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-ls.Lost():
			cancel(ls.Err())
		case <-wctx.Done():
		}
	}()
	werr := work(wctx, run)
	cancel(nil)

	// Outcome.
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
	default:
		code, out.State, out.Note = 1, store.Failed, werr.Error()
	}
	out.ExitCode = &code
	if lerr := ls.Err(); lerr != nil {
		out.Note = joinNote(out.Note, lerr.Error())
		if out.State != store.Succeeded {
			// The work was stopped because the lease was lost: it may have done all, some or none
			// of its effects, so running the slot again is the unknown policy's call, not a retry.
			out.State = store.Unknown
			out.Note = joinNote(out.Note, "stopped because the lease was lost; whether the work happened is unknown")
		}
	}
	out.Note = store.Clip(out.Note, store.MaxNoteLen) // a work error's text may be anything
	res = Result{Decision: Ran, Attempt: &att, WorkErr: werr}
	fin, ferr := g.finish(ctx, ls, out, g.release && time.Since(started) >= o.MinHold)
	if ferr != nil {
		res.RecordErr = ferr
		att.State = store.Running
		log.Error("end: outcome NOT recorded; the next holder will see this attempt as unknown",
			"state", string(out.State), "exit_code", code, "duration", time.Since(started).Round(time.Millisecond).String(), "err", ferr)
		return res, started, nil
	}
	res.Attempt = &fin
	lvl := slog.LevelInfo
	if fin.State != store.Succeeded {
		lvl = slog.LevelWarn
	}
	log.Log(ctx, lvl, "end", "state", string(fin.State), "exit_code", code,
		"duration", time.Since(started).Round(time.Millisecond).String(), "records", fin.Records)
	return res, started, nil
}

// finish records the outcome, retrying a store that is briefly unavailable while the lease holds.
// With release, and a store that can (store.Finisher), the same write releases the lease.
func (g *guard) finish(ctx context.Context, ls *lease.Lease, out store.Outcome, release bool) (store.Attempt, error) {
	ctx = context.WithoutCancel(ctx)
	fr, ok := g.o.Store.(store.Finisher)
	release = release && ok
	for {
		fctx, cancel := context.WithDeadline(ctx, ls.Deadline())
		var a store.Attempt
		var err error
		if release {
			if a, err = fr.FinishRelease(fctx, g.runID, ls.Info(), out); err == nil {
				ls.Released()
			}
		} else {
			a, err = g.o.Store.Finish(fctx, g.runID, ls.Token(), out)
		}
		cancel()
		if err == nil || !errors.Is(err, store.ErrUnavailable) || time.Until(ls.Deadline()) < 0 {
			return a, err
		}
		select {
		case <-ls.Lost():
			return a, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// decide applies the slot policy to a slot that has a last attempt.
func (g *guard) decide(st store.SlotState) (Decision, string) {
	last := st.Last
	if r := last.Resolution; r != nil {
		if r.As == store.Succeeded {
			return Skipped, fmt.Sprintf("resolved as succeeded by %s", r.By)
		}
		return Ran, ""
	}
	switch last.State {
	case store.Succeeded:
		return Skipped, fmt.Sprintf("slot already succeeded (attempt %d, run %s)", last.Number, last.RunID)
	case store.Unknown:
		switch g.o.OnUnknown {
		case PolicySkip:
			return Skipped, "last attempt's outcome is unknown and --on-unknown is skip"
		case PolicyRerun:
			return g.budget(st)
		}
		return Review, fmt.Sprintf("attempt %d's outcome is unknown (its holder %s vanished)", last.Number, last.Holder)
	case store.Failed:
		if st.Waiting {
			return Review, fmt.Sprintf("attempt %d failed and the slot waits for review", last.Number)
		}
		return g.budget(st)
	}
	return Review, fmt.Sprintf("attempt %d is in state %s", last.Number, last.State)
}

func (g *guard) budget(st store.SlotState) (Decision, string) {
	if g.o.MaxAttempts > 0 && st.Failures >= g.o.MaxAttempts {
		return Review, fmt.Sprintf("%d failed attempts, --max-attempts is %d", st.Failures, g.o.MaxAttempts)
	}
	return Ran, ""
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Decide says what a guarded run of o.Slot would do given the slot's ledger state st, without
// taking the lease: Ran (run it), Skipped or Review, with the reason. Dry runs use it; the guard
// itself decides again under the lease.
func Decide(o Options, st store.SlotState) (Decision, string, error) {
	if err := o.fill(); err != nil {
		return "", "", err
	}
	if st.Last == nil || o.Slot == "" {
		return Ran, "", nil
	}
	g := &guard{o: o, slot: o.Slot}
	d, reason := g.decide(st)
	return d, reason, nil
}
