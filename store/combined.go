package store

import (
	"context"
	"errors"
	"fmt"
)

// Optional capabilities that let a guarded run make fewer durable writes. The guard finds them by
// type assertion and falls back to the plain Leaser and Ledger calls when a store lacks them, so a
// backend implements them only where one transaction (one commit, one fsync, fewer round trips)
// is cheaper than the calls they stand for. They change no rule: each does exactly what the calls
// it replaces would do one after another, with nothing of anyone else's in between.

// Starter takes a task's lease and prepares its first decision in one transaction.
//
// Contract: Start(ctx, req, slot) is Acquire(ctx, req), then Abandon(ctx, req.Task, token) with the
// new token, then Slot(ctx, req.Task, slot), as one atomic step. When the lease is busy it returns
// the *BusyError Acquire would and changes nothing; any other error changes nothing either.
// req.Replace is refused (ErrConflict): a replacing run must wait for the old holder to stop
// before it abandons its attempt, so it calls Acquire and Abandon apart.
type Starter interface {
	Start(ctx context.Context, req AcquireRequest, slot string) (Started, error)
}

// Started is what Start did: the grant, the attempts it marked unknown, and the slot's state read
// after that.
type Started struct {
	Lease     Lease
	Abandoned []Attempt
	Slot      SlotState
}

// LazyStarter is Starter without waiting for the disk.
//
// Contract: StartLazy(ctx, req, slot) is Start(ctx, req, slot), except that it may return before
// what it did is durable, as RecordLazy may: a crash or power loss soon after may undo all of it
// (the grant and the attempts marked unknown together, never a part), and the store's next
// durable write makes it durable. The caller acts on nothing it returned — it starts no work and
// hands the token to nothing — before a durable write of its own has followed (Begin; or a review
// event, a release). The guard prefers it to Start: a run then waits for the disk twice, to begin
// its attempt and to finish it, which is the floor. A store implements it only where the later
// write's sync covers the earlier commit: one log, synced in order (SQLite's WAL, PostgreSQL's).
type LazyStarter interface {
	StartLazy(ctx context.Context, req AcquireRequest, slot string) (Started, error)
}

// Finisher records a run's outcome and releases its lease in one transaction.
//
// Contract: FinishRelease(ctx, runID, l, o) is Finish(ctx, runID, l.Token, o) then Release(ctx, l),
// as one atomic step: both happen or neither does, and the error is the one the failing call
// would have returned (ErrNotHeld, ErrConflict, ErrNotFound, ErrUnavailable …).
type Finisher interface {
	FinishRelease(ctx context.Context, runID string, l Lease, o Outcome) (Attempt, error)
}

// LazyRecorder keeps an event without waiting for it to be durable.
//
// Contract: RecordLazy(ctx, e) is Record(ctx, e), except that it may return before the event is
// on disk: a crash or power loss soon after may lose the event (never part of it, and nothing
// else), and the store's next durable write makes it durable. Readers see it as soon as it returns.
// A review event is the exception: it decides whether the slot waits for a person, so it is recorded
// durably, as by Record. The guard uses it for busy and skipped events: no decision reads them, and
// a launch that ran nothing should not wait in the queue of durable writes to say so.
type LazyRecorder interface {
	RecordLazy(ctx context.Context, e Event) error
}

// LocalReads marks a store whose reads cost neither a round trip nor a write: the embedded store,
// read in the caller's process. When LocalReads returns true, the guard reads a single slot before
// it takes the lease, and a launch whose slot the ledger already says to skip (done) skips it
// without the lease: no durable write at all. A store across a network does not implement it:
// there the read would be one more round trip for every run, and Starter reads the slot with the
// lease instead.
//
// Contract: none beyond Slot's; LocalReads only says that calling Slot first is cheap.
type LocalReads interface {
	LocalReads() bool
}

// ErrResolvedDone is wrapped (with ErrConflict) by Begin's refusal of a slot whose last attempt a
// person resolved as succeeded (Ledger's contract); ResolvedDone makes it.
var ErrResolvedDone = errors.New("resolved as succeeded")

// ResolvedDone is Begin's refusal of a new attempt in slot of task, whose last attempt n a person
// resolved as succeeded: the slot is done, even when the resolve came after the run read it. Every
// backend refuses with it (but in the slot "", which has no memory).
func ResolvedDone(task, slot string, n int) error {
	return fmt.Errorf("%w: task %q slot %q: attempt %d was %w: the slot is done", ErrConflict, task, slot, n, ErrResolvedDone)
}

// CheckStart refuses what Start cannot do: a Replace request (see Starter), or a seat
// (req.Limit >= 2: the guard calls Acquire and Abandon apart for seats).
func CheckStart(req AcquireRequest) error {
	if req.Limit >= 2 {
		return fmt.Errorf("%w: task %q: Start cannot grant a seat (Limit %d); use Acquire", ErrUnsupported, req.Task, req.Limit)
	}
	if req.Replace {
		return fmt.Errorf("%w: task %q: Start cannot replace a holder; use Acquire, then Abandon once the old holder's grant has expired", ErrConflict, req.Task)
	}
	return nil
}

// MaxFailures is the most failures SlotState.Failures counts, and so the largest useful
// --max-attempts. Counting stops there so that reading a slot stays flat however many attempts
// failed in it (a task without a slot that fails every minute has half a million a year).
const MaxFailures = 1000

// MaxLimit is the most seats a task may have (AcquireRequest.Limit).
const MaxLimit = 1000

// CheckLimit refuses a Limit out of range (ErrInvalid), and Limit together with Replace.
func CheckLimit(req AcquireRequest) error {
	switch {
	case req.Limit < 0 || req.Limit > MaxLimit:
		return fmt.Errorf("%w: task %q: limit %d is out of range 0..%d", ErrInvalid, req.Task, req.Limit, MaxLimit)
	case req.Limit >= 2 && req.Replace:
		return fmt.Errorf("%w: task %q: a seat (limit %d) cannot replace a holder", ErrInvalid, req.Task, req.Limit)
	}
	return nil
}

// NoSeats is a backend's refusal of seats (AcquireRequest.Limit >= 2) it does not grant yet:
// ErrUnsupported naming the backend, nil for an exclusive request.
func NoSeats(backend string, req AcquireRequest) error {
	if err := CheckLimit(req); err != nil || req.Limit < 2 {
		return err
	}
	return fmt.Errorf("%w: %s cannot grant seats yet (task %q, limit %d); every store of this module grants them", ErrUnsupported, backend, req.Task, req.Limit)
}
