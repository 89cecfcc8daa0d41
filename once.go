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
// Slots come from package slot, stores from package store and its backends; package job runs a
// command as the work.
package once

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/slot"
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
	// waits for the store nor touches it beyond recording its busy event; CatchUp and DueSlots,
	// which read the ledger to find the missed slots, call it first. Its error is returned as is; a
	// nil store without an error is ErrInvalid. The call never closes the store it opened: Open
	// keeps it (a variable it sets) for the caller to close after the call returns.
	Open func(ctx context.Context) (store.Store, error)
	// Holder names this process in leases and history; default DefaultHolder() (user@hostname:pid).
	// Given, it is kept as given: at most store.MaxHolderLen bytes of printable UTF-8
	// (store.CheckName).
	Holder string
	// Slot is the slot value (see package slot); "" runs without per-slot memory: only mutual
	// exclusion and history. A value is 1–200 bytes of printable UTF-8 in Unicode NFC, without '/'
	// (slot.CheckValue); another is refused with ErrInvalid.
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
	// Locked, when set, is called once the local lock is held (at once without LockDir, or with
	// Limit), before the store is opened; not when Replace finds the lock held (it takes it after
	// the lease). A
	// caller that knows the work will most likely run starts its slow preparation there, so that
	// it overlaps the store's work (package job starts the command's supervision shim); Prepare
	// then finishes it, and the caller releases what was started when Prepare is not called.
	Locked func()
	// Fleet marks a launch by one of several nodes that all launch every slot and expect one of them
	// to run it (a scheduler such as package scheduler): finding the task held elsewhere (Busy) or
	// the slot already succeeded (Skipped) is then the fleet working, not news, so it is logged at
	// Debug and recorded in no history event. Reviews and every attempt are recorded as always.
	Fleet bool
	// Untried runs the slot only when it has no attempt yet: a slot that any holder has already
	// tried, whatever its state, is Skipped (at Debug, with no history event). A fleet fires each
	// slot on every node; Untried keeps a node that arrives late from retrying the attempt another
	// node has just made. Retries are then the caller's decision: a call without Untried.
	Untried bool
	// Replace takes the lease over from a live holder instead of returning Busy (once run
	// --replace): the holder's next renewal fails (a store.LossNotifier tells it at once), which
	// cancels its work as any lost lease does. This call waits until the replaced grant's expiry by
	// the store's clock, by when that work has stopped (Run.StopBy: a Work that ignores its
	// context is not stopped by anything, and then runs beside this call's), and, on this
	// machine, for the holder's local lock; then the attempt it left running is marked unknown and
	// resolved as failed with a note naming this run, and this call goes on as usual. Never two at
	// a time: the wait is what a takeover after the holder's death would wait, started now. Wait
	// does not apply to the lease.
	Replace bool
	// Limit, when 2 or more, lets up to Limit holders run the task at once (once run --limit):
	// each takes one of Limit seats of the task's lease (store.AcquireRequest.Limit) with its own
	// fencing token, and is Busy when all are taken or the exclusive lease is held. Two holders
	// still never run one slot at once (the ledger's conflict). Without a slot (Slot ""), Do
	// records each run under a slot of its own, "run-" and its run id, so that runs recorded side
	// by side stay apart in history. The kernel lock (LockDir) is not taken: it admits one. 0 and
	// 1 mean exclusive; at most store.MaxLimit; not with Replace.
	Limit int
	// TracerProvider, when set, receives a span for each attempt and for each skip, busy and review
	// the history records, children of ctx's span; nil makes none (docs/telemetry.md).
	TracerProvider trace.TracerProvider
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

	lease *lease.Lease // nil in a Run not made by the guard (a test's): never lost, no TTL
}

// Lost is closed when the lease is lost; the work must stop. A Run the guard did not make (a
// test's &Run{}) has no lease: its channel (nil) is never closed.
func (r *Run) Lost() <-chan struct{} {
	if r.lease == nil {
		return nil
	}
	return r.lease.Lost()
}

// LostErr says why the lease was lost, or nil.
func (r *Run) LostErr() error {
	if r.lease == nil {
		return nil
	}
	return r.lease.Err()
}

// StopBy is the local instant by which work must be dead once the lease is lost: a sixth of the TTL
// before the store can grant the lease to another holder; the zero time without a lease.
func (r *Run) StopBy() time.Time {
	if r.lease == nil {
		return time.Time{}
	}
	return r.lease.Deadline().Add(-r.lease.TTL() / 6)
}

// Released reports whether the run's lease has been given back, or is being given back: its
// outcome is recorded and another holder may take the task, though the call has not returned.
func (r *Run) Released() bool { return r.lease != nil && r.lease.IsReleased() }

// TTL is the time-to-live the run's lease is renewed with; 0 without a lease.
func (r *Run) TTL() time.Duration {
	if r.lease == nil {
		return 0
	}
	return r.lease.TTL()
}

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
	// unavailable): the slot will show as unknown to the next holder. A write that failed in a way
	// that may have landed (store.ErrUnavailable: a timeout) is checked by reading the attempt back
	// once: recorded after all, RecordErr is nil and Attempt is as recorded; unreadable, RecordErr
	// wraps ErrMaybeRecorded.
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
// lease was lost: context.Cause(ctx) wraps lease.ErrLost), by run.StopBy(): nothing can stop a
// goroutine, so work that goes on past it may run beside the next holder's (Options.Replace's,
// or a takeover's), and its outcome is then not recorded (Result.RecordErr). A nil error records success with exit
// code 0; an ExitCoder error records its code (0 is success); any other error records failed with
// exit code 1 and the error as note. A panic is recorded as a failed attempt (exit code 1, note "the
// work panicked: " and its value), the lease is released (not before MinHold), and the panic goes on to the caller of
// Do, Sequence or CatchUp with the stack that raised it. A call of runtime.Goexit in work (t.FailNow
// in a test) is recorded and released the same way, noted GoexitNote, and goes on ending the
// goroutine that called Do, Sequence or CatchUp (nothing can stop a Goexit).
type Work = func(ctx context.Context, run *Run) error

// Do runs work under the guard. It returns an error only when it could not decide (store
// unavailable, bad options, a nil work: ErrInvalid before anything is taken); busy, skipped and
// review are Results. The work's context is cancelled
// (with lease.ErrLost as its cause) when the lease is lost. A nil error from work records the
// attempt as succeeded with exit code 0; an ExitCoder error records its code (0 is success); any
// other error records failed with exit code 1 and the error as note.
func Do(ctx context.Context, o Options, work Work) (Result, error) {
	if err := o.check(work); err != nil {
		return Result{}, err
	}
	so := SeqOptions{first: &o.Slot, single: true, perRun: o.Limit >= 2 && o.Slot == ""}
	rs, err := sequence(ctx, o, slices.Values([]string{o.Slot}), o.Slot, so, work)
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
	perRun   bool    // Do with Limit and no slot: the one slot is "run-" and the run id (Options.Limit)
}

// Sequence runs work for each of slots, in the order given, under one local lock and one lease
// held for the whole sequence, each slot through the ledger exactly as Do would (its own run id,
// attempt number, skip, review and max-attempts rules). o.Slot is ignored. Each slot is held to
// Options.Slot's rule, and must not be "" (ErrInvalid, nothing taken). It stops after the
// first slot that failed or needs review unless KeepGoing, and always when the lease is lost, an
// outcome could not be recorded or ctx is cancelled. It returns one Result per slot decided, in
// order (a single Busy result when the task is held elsewhere); the error is as for Do, with the
// results decided before it.
func Sequence(ctx context.Context, o Options, slots []string, so SeqOptions, work Work) ([]Result, error) {
	o.Slot = "" // ignored: not held to a rule either
	if err := o.check(work); err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return nil, nil
	}
	for _, sl := range slots {
		if err := checkSeqSlot(sl); err != nil {
			return nil, err
		}
	}
	so.first, so.single = &slots[0], false
	return sequence(ctx, o, slices.Values(slots), slots[len(slots)-1], so, work)
}

// SequenceStream is Sequence over the slots that slots yields, one at a time, keeping none of
// them nor their results: each Result goes to so.OnResult (nil: ErrInvalid) as the slot is decided, so
// memory stays the same whatever the number of slots (a backfill over years of minutes). A busy
// result is recorded against busySlot (Sequence uses its last slot). busySlot and each slot are
// held to Options.Slot's rule (ErrInvalid), a slot must not be "" either (as for Sequence):
// busySlot before anything is taken, a slot as it comes. o.Slot is ignored.
// The error is as for Sequence.
func SequenceStream(ctx context.Context, o Options, slots iter.Seq[string], busySlot string, so SeqOptions, work Work) error {
	o.Slot = "" // ignored, as by Sequence
	if err := o.check(work); err != nil {
		return err
	}
	if so.OnResult == nil { // the results would be lost: a failed slot under KeepGoing said nowhere
		return invalidf("no SeqOptions.OnResult: SequenceStream keeps no results, so each goes to OnResult (set it)")
	}
	if err := checkSlot(busySlot); err != nil { // recorded with a busy event, named in the result
		return err
	}
	so.discard, so.first, so.single = true, nil, false
	_, err := sequence(ctx, o, slots, busySlot, so, work)
	return err
}

func (o *Options) fill() error {
	if o.Store == nil && o.Open == nil {
		return invalidf("no store: set Options.Store or Options.Open")
	}
	return o.fillValues()
}

// fillValues is fill but for the store: the values a decision reads (Decide takes no store).
func (o *Options) fillValues() error {
	if err := ValidateTask(o.Task); err != nil {
		return err
	}
	if err := checkSlot(o.Slot); err != nil {
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
	if o.Limit < 0 || o.Limit > store.MaxLimit {
		return invalidf("Options.Limit %d is out of range: use 1 to %d holders at once", o.Limit, store.MaxLimit)
	}
	if o.Limit >= 2 && o.Replace {
		return invalidf("Options.Limit and Options.Replace cannot be combined")
	}
	if o.MinHold < 0 || o.Wait < 0 || o.MaxAttempts < 0 {
		return invalidf("Options.MinHold, Wait and MaxAttempts must not be negative")
	}
	if o.MaxAttempts > store.MaxFailures {
		return invalidf("Options.MaxAttempts %d is over %d, the most failures a store counts", o.MaxAttempts, store.MaxFailures)
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

// check is fill for a call that runs work: a nil work is refused before anything is taken (it
// would be called only once the attempt was recorded, and panic there as a failed attempt).
func (o *Options) check(work Work) error {
	if work == nil {
		return invalidf("no work: give a non-nil Work")
	}
	return o.fill()
}

// checkSeqSlot is checkSlot for a slot of a sequence, where "" is refused: it would run without
// per-slot memory, again on every call (a list split at a trailing newline ends with "").
func checkSeqSlot(v string) error {
	if v == "" {
		return invalidf("a sequence's slot is empty: give each slot a value (\"\" runs without per-slot memory, so it would run every time)")
	}
	return checkSlot(v)
}

// checkSlot holds a slot value to the rule of an explicit --slot (slot.CheckValue), "" (no slot)
// aside: every store then keeps it the same way (a 300-byte slot ran on SQLite and failed on
// MySQL, with the lease taken), and TASK/SLOT, the idempotency key, splits at its last '/'.
func checkSlot(v string) error {
	if v == "" {
		return nil
	}
	if err := slot.CheckValue(v); err != nil {
		return invalid(err)
	}
	return nil
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
	if s == nil {
		return invalidf("Options.Open returned neither a store nor an error")
	}
	o.Store = s
	return nil
}

// DefaultHolder is "user@hostname:pid", so that history shows who ran what: user is the name of
// the effective uid (its number when it has none), "alice(root)" when alice ran it with sudo
// (SUDO_USER beside the effective user: any process can set SUDO_USER). A user that would not fit
// store.MaxHolderLen is shortened to the uid's number, then left out ("hostname:pid", an older once's
// form, which every reader of holders still takes).
func DefaultHolder() string { return who.Holder() }
