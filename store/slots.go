package store

import (
	"context"
	"fmt"
)

// MaxSlotsRead is the most slots one call of SlotsReader.Slots reads.
const MaxSlotsRead = 1000

// SlotsReader is implemented by stores that read the states of many slots of one task in one
// bounded read: once backfill --dry-run over years of minutes then costs a read per
// MaxSlotsRead slots, not one per slot (on SQLite a transaction, a check of its files and a
// statement prepared per slot: 130 µs, five minutes for 2.1M slots).
//
// Contract: Slots(ctx, task, slots) returns the state of each of slots, in the order given
// (repeats included), each as Ledger.Slot would return it read at the same moment: a slot never
// tried is SlotState{Task, Slot} with no Last. More than MaxSlotsRead slots are refused with
// ErrInvalid (CheckSlotsRead). It costs the slots asked for as Slot does each (the last attempt,
// at most MaxFailures failures, the checkpoint, the reviews), never the task's other history nor
// a slot's older attempts: flat in a slot's attempts.
type SlotsReader interface {
	Slots(ctx context.Context, task string, slots []string) ([]SlotState, error)
}

// CheckSlotsRead is the one rule for SlotsReader's slots, applied by every backend before it
// reads: at most MaxSlotsRead. Its error wraps ErrInvalid.
func CheckSlotsRead(slots []string) error {
	if len(slots) > MaxSlotsRead {
		return &invalidValue{fmt.Sprintf("slots: %d slots asked for at once: at most %d", len(slots), MaxSlotsRead)}
	}
	return nil
}

// SlotsArgs are the arguments of a statement that reads slots of task: the task, then each slot.
func SlotsArgs(task string, slots []string) []any {
	args := make([]any, 0, len(slots)+1)
	args = append(args, task)
	for _, sl := range slots {
		args = append(args, sl)
	}
	return args
}

// SlotsInOrder is a SlotsReader's answer from found, the states of the slots tried, each under
// key(its slot) (nil: the slot itself): the state of each of slots in order, under the task and
// slot names asked for; a slot not found was never tried, SlotState{Task, Slot} with no Last.
func SlotsInOrder(task string, slots []string, found map[string]SlotState, key func(string) string) []SlotState {
	out := make([]SlotState, len(slots))
	for i, sl := range slots {
		k := sl
		if key != nil {
			k = key(sl)
		}
		st := found[k] // the zero state when not tried
		st.Task, st.Slot = task, sl
		out[i] = st
	}
	return out
}

// ReadSlots returns the state of each of slots of task, in order: with the store's Slots
// (SlotsReader), MaxSlotsRead at a time, else Slot for each.
func ReadSlots(ctx context.Context, l Ledger, task string, slots []string) ([]SlotState, error) {
	out := make([]SlotState, 0, len(slots))
	sr, ok := l.(SlotsReader)
	for len(slots) > 0 {
		n := min(len(slots), MaxSlotsRead)
		if ok {
			sts, err := sr.Slots(ctx, task, slots[:n])
			if err != nil {
				return out, err
			}
			out = append(out, sts...)
		} else {
			for _, sl := range slots[:n] {
				st, err := l.Slot(ctx, task, sl)
				if err != nil {
					return out, err
				}
				out = append(out, st)
			}
		}
		slots = slots[n:]
	}
	return out, nil
}
