package once

import (
	"fmt"

	"github.com/once-run/once/store"
)

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
		if last.Note != "" { // its holder may have said why (a lost lease): not always a vanished holder
			return Review, fmt.Sprintf("attempt %d's outcome is unknown (holder %s; its note: %s)", last.Number, last.Holder, store.Clip(last.Note, 200))
		}
		return Review, fmt.Sprintf("attempt %d's outcome is unknown (its holder %s vanished, or could not record its outcome: its log says which)", last.Number, last.Holder)
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

// Decide says what a guarded run of o.Slot would do given the slot's ledger state st, without
// taking the lease: Ran (run it), Skipped or Review, with the reason. Dry runs use it; the guard
// itself decides again under the lease. o needs no Store: nothing is read.
func Decide(o Options, st store.SlotState) (Decision, string, error) {
	if err := o.fillValues(); err != nil {
		return "", "", err
	}
	g := &guard{o: o, slot: o.Slot}
	d, reason := g.decideSlot(st)
	return d, reason, nil
}
