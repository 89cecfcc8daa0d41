package once

import (
	"context"
	"iter"

	"github.com/once-run/once/store"
)

// lookahead yields the slots of a sequence, each with its state when it was read ahead, or nil:
// its attempt reads it then. On a store.SlotsReader the slots are read a block at a time, one
// read a block: a backfill over years of minutes that are done costs a read per 1,000 slots, not a
// Slot each (on SQLite 130 µs: nine minutes for four years). A block's states are used until a
// slot of it does more than skip (the consumer sets *busy): a slot run takes time, in which a
// person may resolve a later one, so the slots after it are read again by their attempts, and the
// next block is of one slot, doubling while every slot of a block is skipped. A state so used is as
// fresh as its attempt's own read, a few slots' skips earlier, under the same lease (only a
// person's Resolve writes a slot meanwhile, as it may just after any read). On another store, in
// Do, or when a read ahead fails, every slot is read by its attempt.
func (g *guard) lookahead(ctx context.Context, slots iter.Seq[string], so SeqOptions, busy *bool) iter.Seq2[string, *store.SlotState] {
	sr, ok := g.o.Store.(store.SlotsReader)
	if !ok || so.single {
		return func(yield func(string, *store.SlotState) bool) {
			for sl := range slots {
				if !yield(sl, nil) {
					return
				}
			}
		}
	}
	return func(yield func(string, *store.SlotState) bool) {
		n := 1
		block := make([]string, 0, store.MaxSlotsRead)
		each := func() bool {
			sts, err := sr.Slots(ctx, g.o.Task, block)
			*busy = false
			for i, sl := range block {
				var read *store.SlotState
				if err == nil && !*busy {
					read = &sts[i]
				}
				if !yield(sl, read) {
					return false
				}
			}
			if n = min(2*n, store.MaxSlotsRead); *busy {
				n = 1
			}
			block = block[:0]
			return true
		}
		for sl := range slots {
			if block = append(block, sl); len(block) >= n && !each() {
				return
			}
		}
		if len(block) > 0 {
			each()
		}
	}
}
