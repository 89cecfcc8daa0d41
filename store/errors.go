package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	// ErrBusy: the task's lease is held by someone else and has not expired. See BusyError.
	ErrBusy = errors.New("store: lease is held by another holder")
	// ErrNotHeld: the caller's lease is not the task's current grant (expired and taken over,
	// released, or never held). Also returned for ledger writes carrying a stale token.
	ErrNotHeld = errors.New("store: lease not held")
	// ErrConflict: the ledger refused an illegal transition or lost a race to another writer.
	ErrConflict = errors.New("store: ledger conflict")
	// ErrNotFound: no such attempt or slot.
	ErrNotFound = errors.New("store: not found")
	// ErrUnavailable: the store cannot be reached or used (network, auth, corrupt file). Nothing
	// was decided by this call's answer; callers fail closed. A write that failed so after it was
	// sent (a timeout, a connection lost before the answer) may have been applied all the same:
	// etcd applies a request whose client gave up, a COMMIT may be done when its answer is lost.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrBadDSN: the DSN cannot be parsed or names an unknown scheme or parameter.
	ErrBadDSN = errors.New("store: bad DSN")
	// ErrUnsupported: the store cannot do what was asked (a seat, AcquireRequest.Limit, on a
	// backend that does not grant them yet). Nothing was changed.
	ErrUnsupported = errors.New("store: not supported by this store")
	// ErrNotRecorded: the store records nothing more, and a write that failed so is certainly not
	// recorded where anyone will read it (SQLite: the ledger's file was deleted, emptied or
	// replaced while in use, and the write's commit went into the lost file). It comes with
	// ErrUnavailable; unlike a write that timed out, it cannot have landed after all.
	ErrNotRecorded = errors.New("store: not recorded")
	// ErrSchemaAhead: a newer once upgraded the store's schema after this process opened it (a
	// once daemon, once serve or a Go program that kept it open). It is also an ErrUnavailable:
	// nothing was written, and the process must be restarted with the newer once (SchemaAhead).
	ErrSchemaAhead = errors.New("store: schema upgraded by a newer once")
)

// SchemaAhead is the error of a store whose schema version have, newer than the version want this
// process opened, was found by what (a write, a poll): it wraps ErrSchemaAhead and ErrUnavailable.
func SchemaAhead(what string, have, want int64) error {
	return fmt.Errorf("%w: %w: %s: schema version %d, this once understands %d: a newer once upgraded it while this process ran; nothing more is written: restart this process with the newer once",
		ErrUnavailable, ErrSchemaAhead, what, have, want)
}

// BusyError is returned by Acquire when the lease is held. It matches ErrBusy.
type BusyError struct {
	Lease Lease // the current grant as the store sees it
}

// Error names the holder and when its lease expires.
func (e *BusyError) Error() string {
	l := e.Lease
	if l.Holder == "" {
		return ErrBusy.Error()
	}
	return fmt.Sprintf("store: task %q is held by %s (token %d, run %s) until %s",
		l.Task, l.Holder, l.Token, l.RunID, l.Expires.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// SchemaChecker is implemented by stores with a schema version (SQLite, PostgreSQL, MySQL), which
// Open reads: CheckSchema reads it again and returns an error wrapping ErrSchemaAhead when a newer
// once upgraded the store since, after which every call of the store fails so. A long-running
// process (once daemon, once serve) calls it at each poll. Writes check too, in a statement they
// make anyway, fail so and write nothing: SQLite every write; PostgreSQL and MySQL the writes that
// start or end work (Start, Begin, Finish, FinishRelease, Abandon, Report, a seat's and a
// takeover's Acquire; a plain exclusive Acquire commits alone, and gives back the grant it wrote).
type SchemaChecker interface {
	CheckSchema(ctx context.Context) error
}
