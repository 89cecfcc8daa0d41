package store

import (
	"context"
	"errors"
	"fmt"
)

// SuccessScan is how many of a task's newest attempts ReadLastSuccess looks at for its latest
// success: the dashboard's task list and page, its API and the metrics collector read no further,
// so that the read costs the same whatever the task's history (a task failing for months would
// otherwise be read back to its last success, and one that never succeeded to its first attempt).
const SuccessScan = 1000

// SuccessFinder is implemented by stores that find a task's newest success among its newest
// attempts from an index, in one read that stops at the first success (the SQL stores). The others
// are read through History (ReadLastSuccess).
//
// Contract: NewestSuccess returns the newest succeeded attempt (in history order) among task's
// newest within attempts, nil when none of them succeeded; beyond is true when none succeeded and
// the task has more than within attempts (older ones not read). It reads at most within attempts
// (and, when none succeeded, counts at most within+1), whatever the task's history; within ≤ 0
// is refused with ErrInvalid (CheckSuccessWithin).
type SuccessFinder interface {
	NewestSuccess(ctx context.Context, task string, within int) (a *Attempt, beyond bool, err error)
}

// LastSuccess is what a reader knows of a task's latest success.
type LastSuccess struct {
	// Attempt is the task's newest succeeded attempt, nil when none was found.
	Attempt *Attempt
	// Unknown is true when no success was found among the task's Looked newest attempts and the
	// task has older ones, which were not read: whether one of them succeeded is not known. With
	// Attempt nil and Unknown false, the task never succeeded (in the history kept).
	Unknown bool
	// Looked is how many of the task's newest attempts were read when Unknown: SuccessScan, or
	// fewer on a store read through History when events came between them.
	Looked int
}

// ReadLastSuccess finds task's latest success among its newest SuccessScan attempts: through
// SuccessFinder when the store is one, otherwise through History, newest first, stopping at the
// first success, at SuccessScan attempts or at 4×SuccessScan entries (events between attempts
// count there: then Looked says how many attempts were read).
func ReadLastSuccess(ctx context.Context, l Ledger, task string) (LastSuccess, error) {
	return ReadLastSuccessWithin(ctx, l, task, SuccessScan)
}

// ReadLastSuccessWithin is ReadLastSuccess looking at task's newest within attempts (the
// conformance suite's small cases); within ≤ 0 is refused with ErrInvalid.
func ReadLastSuccessWithin(ctx context.Context, l Ledger, task string, within int) (LastSuccess, error) {
	if err := CheckSuccessWithin(within); err != nil {
		return LastSuccess{}, err
	}
	if f, ok := l.(SuccessFinder); ok {
		a, beyond, err := f.NewestSuccess(ctx, task, within)
		if err != nil || !beyond {
			return LastSuccess{Attempt: a}, err
		}
		return LastSuccess{Unknown: true, Looked: within}, nil
	}
	var out LastSuccess
	entries, looked := 0, 0
	err := EachHistory(ctx, l, HistoryQuery{Task: task, Limit: within*4 + 1}, func(e Entry) error {
		entries++
		if entries > within*4 || e.State.IsAttempt() && looked == within {
			out.Unknown, out.Looked = true, looked // more than were looked at
			return errFound
		}
		if !e.State.IsAttempt() {
			return nil
		}
		looked++
		if e.State == Succeeded {
			a := e.Attempt
			out.Attempt = &a
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return LastSuccess{}, err
	}
	return out, nil
}

var errFound = errors.New("found")

// CheckSuccessWithin is the one rule for SuccessFinder's within, applied by every backend before
// it reads: at least 1. Its error wraps ErrInvalid.
func CheckSuccessWithin(within int) error {
	if within <= 0 {
		return &invalidValue{fmt.Sprintf("newest success: within %d: give at least 1", within)}
	}
	return nil
}
