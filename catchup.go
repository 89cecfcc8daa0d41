package once

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// Errors (wrapping ErrInvalid, nothing run): spec is not a --per or --schedule spec, window is
// not positive, the window spans more than MaxCatchUpWindowSlots slots, or more than max missed
// slots (the current one not counted) are due. The results are as for Sequence.
func CatchUp(ctx context.Context, o Options, spec slot.Spec, window time.Duration, max int, work Work) ([]Result, error) {
	if err := o.fill(); err != nil {
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
		return nil, invalidf("catch-up needs a --per or --schedule spec: %s has no missed periods", noMissed(spec))
	}
	if window <= 0 {
		return nil, invalidf("--catch-up %s: give a positive window such as 6h, 3d or 2w", window)
	}
	if max < 0 {
		return nil, invalidf("--catch-up-max %d is negative: give 0 or more", max)
	}
	now := o.Now()
	cur := spec.At(now)
	if cur == "" {
		return nil, invalidf("%s: no slot starts before %s", spec, now.Format(time.RFC3339))
	}
	rng, err := spec.Range(now.Add(-window).Add(time.Nanosecond), now, MaxCatchUpWindowSlots)
	if err != nil {
		if errors.Is(err, slot.ErrInvalid) {
			return nil, invalidf("--catch-up %s spans more than %d slots of %s: shorten the window, or use once backfill", window, MaxCatchUpWindowSlots, spec)
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
		return nil, invalidf("catch-up would run %d missed slots of task %s (%s to %s), more than --catch-up-max %d: raise --catch-up-max, or run them with once backfill",
			len(due), o.Task, due[0], due[len(due)-1], max)
	}
	return append(due, cur), nil
}

// noMissed names a spec that has no periods, for messages: "a task without a slot", "an explicit
// --slot".
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

// MaxWindow is the longest catch-up window ParseWindow accepts.
const MaxWindow = 10 * 366 * 24 * time.Hour

// ParseWindow parses a catch-up window: a Go duration (90m, 36h), optionally preceded by a
// whole number of weeks and/or days ("2w", "3d", "1d12h", "1w2d"). It must be positive and at
// most MaxWindow. Errors wrap ErrInvalid.
func ParseWindow(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, invalidf("--catch-up %q: give a window such as 6h, 3d, 1d12h or 2w", s)
	}
	rest := s
	var d time.Duration
	for _, u := range []struct {
		suffix byte
		unit   time.Duration
	}{{'w', 7 * 24 * time.Hour}, {'d', 24 * time.Hour}} {
		i := strings.IndexByte(rest, u.suffix)
		if i < 0 {
			continue
		}
		n, err := strconv.ParseUint(rest[:i], 10, 16)
		if err != nil || i == 0 || rest[0] == '+' || n > 5000 {
			return bad()
		}
		d += time.Duration(n) * u.unit
		rest = rest[i+1:]
	}
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return bad()
		}
		x, err := time.ParseDuration(rest)
		if err != nil {
			return bad()
		}
		d += x
	}
	if d <= 0 {
		return bad()
	}
	if d > MaxWindow {
		return 0, invalidf("--catch-up %q is longer than 10 years", s)
	}
	return d, nil
}
