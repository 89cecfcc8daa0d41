package once

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// MaxCatchUpWindowSlots bounds how many slots a catch-up window may span, done ones included:
// every one of them is read from the ledger on each run.
const MaxCatchUpWindowSlots = 10000

// CatchUp runs the slots of spec that were missed, then the current one. Every slot whose start
// lies in (now − window, now] (now is o.Now()) and that has not succeeded (nor been resolved as
// succeeded) runs once, oldest first, each as its own attempt with its own slot value; then the
// current slot, exactly as Do would run it. All of them run under one lease (see Sequence).
//
// The sequence stops at the first slot that fails or needs review (an unknown outcome under
// PolicyReview, attempts used up): later slots are not run past it, so that a failing job is not
// run for every missed period, and the failed slot is tried again, first, by the next CatchUp.
// A slot that fails is never marked done.
//
// Errors (matching ErrInvalid, nothing run): spec is not a slot.KindPer or slot.KindSchedule spec,
// window is not positive, max is negative; a *WindowError when the window spans more than
// MaxCatchUpWindowSlots slots or more than max missed slots (the current one not counted) are
// due. The results are as for Sequence.
func CatchUp(ctx context.Context, o Options, spec slot.Spec, window time.Duration, max int, work Work) ([]Result, error) {
	if err := o.check(work); err != nil {
		return nil, err
	}
	if err := o.open(ctx); err != nil {
		return nil, err
	}
	slots, err := DueSlots(ctx, o, spec, window, max)
	if err != nil {
		return nil, err
	}
	return sequence(ctx, o, slices.Values(slots), slots[len(slots)-1], SeqOptions{Quiet: true, loudLast: true, first: &slots[0]}, work)
}

// DueSlots lists what CatchUp would run now, oldest first: the missed slots of the window that
// have not succeeded, then the current slot (always last, whatever its state). It reads the
// ledger without taking the lease, so the answer is advisory; errors are as for CatchUp.
func DueSlots(ctx context.Context, o Options, spec slot.Spec, window time.Duration, max int) ([]string, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := o.open(ctx); err != nil {
		return nil, err
	}
	if k := spec.Kind(); k != slot.KindPer && k != slot.KindSchedule {
		return nil, invalidf("CatchUp needs a slot.KindPer or slot.KindSchedule spec: %s has no missed periods", noMissed(spec))
	}
	if window <= 0 {
		return nil, invalidf("CatchUp's window %s is not positive", window)
	}
	if max < 0 {
		return nil, invalidf("CatchUp's max %d is negative: give 0 or more", max)
	}
	now := o.Now()
	cur := spec.At(now)
	if cur == "" {
		return nil, invalidf("%s: no slot starts before %s", spec, now.Format(time.RFC3339))
	}
	rng, err := spec.Range(now.Add(-window).Add(time.Nanosecond), now, MaxCatchUpWindowSlots)
	if err != nil {
		if errors.Is(err, slot.ErrInvalid) {
			return nil, &WindowError{Task: o.Task, Spec: spec, Window: window, Spans: true}
		}
		return nil, err
	}
	var due []string
	for _, s := range rng {
		if s.Value == cur {
			continue
		}
		st, err := o.Store.Slot(ctx, o.Task, s.Value)
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		if !Done(st) {
			due = append(due, s.Value)
		}
	}
	if len(due) > max {
		return nil, &WindowError{Task: o.Task, Spec: spec, Window: window, Due: len(due), Max: max,
			First: due[0], Last: due[len(due)-1]}
	}
	return append(due, cur), nil
}

// WindowError is a catch-up window refused for its size (it matches ErrInvalid); nothing ran.
// Its fields let a caller say it in its own words (the once command names its flags).
type WindowError struct {
	Task   string
	Spec   slot.Spec
	Window time.Duration
	// Spans: the window spans more than MaxCatchUpWindowSlots slots. Else Due missed slots,
	// First to Last, are due, more than Max.
	Spans       bool
	Due, Max    int
	First, Last string
}

// Error says what was refused, in the library's words (the CLI words it with its flags).
func (e *WindowError) Error() string {
	if e.Spans {
		return fmt.Sprintf("CatchUp's window %s spans more than %d slots of %s", e.Window, MaxCatchUpWindowSlots, e.Spec)
	}
	return fmt.Sprintf("CatchUp would run %d missed slots of task %s (%s to %s), more than its max %d",
		e.Due, e.Task, e.First, e.Last, e.Max)
}

// Is makes a WindowError match ErrInvalid.
func (e *WindowError) Is(target error) bool { return target == ErrInvalid }

// noMissed names a spec that has no periods, for messages: "a task without a slot", "an explicit
// slot".
func noMissed(spec slot.Spec) string {
	if spec.Kind() == slot.KindSlot {
		return "an explicit " + spec.String()
	}
	return "a task without a slot"
}

// Done reports whether a slot needs no more runs: its last attempt succeeded, or a person
// resolved it as succeeded.
func Done(st store.SlotState) bool {
	last := st.Last
	if last == nil {
		return false
	}
	if r := last.Resolution; r != nil {
		return r.As == store.Succeeded
	}
	return last.State == store.Succeeded
}
