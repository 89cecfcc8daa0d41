package store

import (
	"context"
	"time"
)

// PruneRequest says what Ledger.Prune may remove. See Ledger for the rule, and PruneRequest.Decide,
// where it is written once for every backend.
type PruneRequest struct {
	// Before: only attempts that started, and events that happened, before this instant. Required.
	Before time.Time
	// Since, when set, leaves alone what started or happened before it: a prune that walks only
	// what crossed Before since an earlier one (once run --retain). Not with ForgetSlots, which
	// removes a slot whole.
	Since time.Time
	// Task limits pruning to one task; "" prunes every task.
	Task string
	// ForgetSlots also removes every record of a slot that is done (its last attempt succeeded,
	// or was resolved as succeeded), ended before Before and has no entry since. A catch-up window
	// or a backfill that reaches back past Before runs such a slot again: give it only with a
	// Before older than any window you catch up or backfill.
	ForgetSlots bool
	// DryRun counts what would be removed and removes nothing.
	DryRun bool
}

// PruneResult counts what Prune removed (or, with DryRun, would remove).
type PruneResult struct {
	Attempts int64 `json:"attempts"`
	Events   int64 `json:"events"`
	Slots    int64 `json:"slots"` // slots forgotten whole (ForgetSlots); their entries are counted too
}

// Add adds o's counts to r.
func (r *PruneResult) Add(o PruneResult) {
	r.Attempts += o.Attempts
	r.Events += o.Events
	r.Slots += o.Slots
}

// CheckPrune refuses a PruneRequest no backend may honour, before it reaches the store.
func CheckPrune(r PruneRequest) error {
	switch {
	case r.Before.IsZero():
		return &invalidValue{"prune needs a time: only history older than it is removed"}
	case !r.Since.IsZero() && r.ForgetSlots:
		return &invalidValue{"prune: a slot is forgotten whole, so ForgetSlots cannot be limited by Since"}
	}
	return nil
}

// PruneFacts is what Prune's rule needs to know about one attempt or event and its slot.
type PruneFacts struct {
	Event  bool
	Kind   State     // an event's kind, or an attempt's state
	Number int       // an attempt's number; for an event, the attempt it is about (0: none)
	At     time.Time // an attempt's start, an event's time
	// Last is the slot's last attempt (Number 0 when the slot has none). Its Resolution and
	// EndedAt are what the rule reads.
	Last Attempt
	// Checkpoint is the number of the slot's latest attempt that reported a checkpoint, 0 when none.
	Checkpoint int
	// Recent: the slot has an attempt or an event at or after Before. Read for ForgetSlots only.
	Recent bool
	// Slotless: the attempt is of a task's runs without a slot (slot ""), which nothing decides
	// by but the last: no retry budget, no review. Read for attempts only.
	Slotless bool
}

// PruneAction is what Prune does with one entry.
type PruneAction int

const (
	Keep   PruneAction = iota // keep the entry
	Drop                      // remove the entry
	Forget                    // remove every attempt and event of the entry's slot, together
)

// Done reports whether a slot whose last attempt is last is done: it succeeded, or a person
// resolved it as succeeded. A done slot is never run again.
func Done(last Attempt) bool {
	return last.Number > 0 && (last.State == Succeeded || last.Resolution != nil && last.Resolution.As == Succeeded)
}

// Decide is Prune's rule for one entry (see Ledger), written once for every backend.
func (r PruneRequest) Decide(f PruneFacts) PruneAction {
	if !f.At.Before(r.Before) || f.At.Before(r.Since) {
		return Keep
	}
	last := f.Last
	if last.Number == 0 { // events of a slot never tried: nothing depends on them
		if f.Event {
			return Drop
		}
		return Keep
	}
	end := last.StartedAt
	if last.EndedAt != nil {
		end = *last.EndedAt
	}
	if r.ForgetSlots && Done(last) && end.Before(r.Before) && !f.Recent {
		return Forget
	}
	if f.Event {
		if f.Kind == Review && f.Number == last.Number && last.Resolution == nil {
			return Keep // it makes the slot wait for a person
		}
		return Drop
	}
	settled := last.State == Succeeded || last.Resolution != nil || f.Slotless && last.State != Running
	if f.Kind == Running || f.Number >= last.Number || f.Number == f.Checkpoint || !settled {
		return Keep
	}
	return Drop
}

// Retainer is a Ledger that prunes for once run --retain in its own way. A SQL store reads a
// window of a task's history through an index, so once prunes after a run only what aged out since
// the task's previous launch (PruneRequest.Since). A key-value store finds the previous launch less
// cheaply: it prunes at most once per a given interval, what crossed the cutoff since its previous
// prune.
type Retainer interface {
	// Retain prunes the task's entries that started or happened before before, by the rule of
	// Prune (PruneRequest{Task: task, Before: before}), unless a Retain of the task pruned up to
	// a time within every before before (not after it: a clock that ran ahead must not stop the
	// prunes); pruned reports whether this one did. After a first Retain of the task, it may leave
	// what is older than the previous one's before (less a margin for clocks): PruneRequest.Since.
	// Concurrent calls may both prune, which removes nothing twice.
	Retain(ctx context.Context, task string, before time.Time, every time.Duration) (res PruneResult, pruned bool, err error)
}
