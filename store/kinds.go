package store

import (
	"fmt"
	"strings"
)

// The states and kinds history knows, written once for every backend: an entry of history is an
// attempt in one of AttemptStates or an event of one of EventKinds.
var (
	// AttemptStates are the states of an attempt, in the order an attempt moves through them.
	AttemptStates = []State{Running, Succeeded, Failed, Unknown}
	// EventKinds are the kinds of event Ledger.Record keeps.
	EventKinds = []State{Skipped, Busy, Review, Missed}
)

// IsAttempt reports whether st is the state of an attempt (running, succeeded, failed, unknown).
func (st State) IsAttempt() bool { return in(st, AttemptStates) }

// IsEvent reports whether st is a kind of event Ledger.Record keeps (skipped, busy, review,
// missed).
func (st State) IsEvent() bool { return in(st, EventKinds) }

func in(st State, set []State) bool {
	for _, s := range set {
		if st == s {
			return true
		}
	}
	return false
}

func names(set []State) string {
	s := make([]string, len(set))
	for i, st := range set {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// CheckEvent is the one rule for the event a Ledger.Record keeps, applied by every backend
// before it writes: one of EventKinds, whose error wraps ErrConflict (an event of another kind is
// not a transition the ledger has); then its values (values.go: the task and slot, printable run
// id and holder, a token of 0 or more, an attempt of 0 to MaxNumber, the note), whose errors wrap
// ErrInvalid.
func CheckEvent(e Event) error {
	if !e.Kind.IsEvent() {
		return fmt.Errorf("%w: event kind %q: an event is one of %s", ErrConflict, e.Kind, names(EventKinds))
	}
	return checkEventValues(e)
}

// CheckKind is the one rule for HistoryQuery.Kind: empty (every entry), an attempt state or an
// event kind. Errors wrap ErrInvalid; every History applies it (HistoryQuery.Cursors).
func CheckKind(k State) error {
	if k == "" || k.IsAttempt() || k.IsEvent() {
		return nil
	}
	return &invalidValue{fmt.Sprintf("history kind %q: give an attempt state (%s) or an event kind (%s)", k, names(AttemptStates), names(EventKinds))}
}

// Selects reports whether an entry of state st (an attempt's state or an event's kind) is one q's
// Kind keeps; its Task, Slot and cursors are the caller's to check.
func (q HistoryQuery) Selects(st State) bool { return q.Kind == "" || q.Kind == st }

// ReadsAttempts reports whether q can select attempts (its Kind is empty or an attempt state),
// and ReadsEvents whether it can select events: a store reads only the entries q can select.
func (q HistoryQuery) ReadsAttempts() bool { return q.Kind == "" || q.Kind.IsAttempt() }

// ReadsEvents: see ReadsAttempts.
func (q HistoryQuery) ReadsEvents() bool { return q.Kind == "" || q.Kind.IsEvent() }
