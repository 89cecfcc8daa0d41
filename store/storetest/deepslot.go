package storetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/once-run/once/store"
)

// SlotReads is what BenchmarkSlotReads times: a store's reads of one slot and of a block of slots.
type SlotReads interface {
	Slot(ctx context.Context, task, slot string) (store.SlotState, error)
	store.SlotsReader
}

// DeepSlotAttempts is the number of attempts BenchmarkSlotReads's deep slots hold:
// ONCE_BENCH_SLOT_ATTEMPTS, 20,000 by default.
func DeepSlotAttempts() int {
	if v, err := strconv.Atoi(os.Getenv("ONCE_BENCH_SLOT_ATTEMPTS")); err == nil && v > 0 {
		return v
	}
	return 20000
}

// BenchmarkSlotReads times Slot and Slots on a slot "" of n attempts, all succeeded (task "ok") or
// all failed, none resolved (task "fail": the failure count's worst case), and Slots on a task
// "week" of store.MaxSlotsRead slots "m00000000"… of one attempt each (a backfill's block), which
// the caller has seeded.
func BenchmarkSlotReads(b *testing.B, s SlotReads, n int) {
	ctx := context.Background()
	week := make([]string, store.MaxSlotsRead)
	for i := range week {
		week[i] = fmt.Sprintf("m%08d", i)
	}
	for _, task := range []string{"ok", "fail"} {
		b.Run("Slot/"+task, func(b *testing.B) {
			for b.Loop() {
				if st, err := s.Slot(ctx, task, ""); err != nil || st.Last == nil || st.Last.Number != n {
					b.Fatalf("%+v, %v", st, err)
				}
			}
		})
		b.Run("Slots/"+task, func(b *testing.B) {
			for b.Loop() {
				if sts, err := s.Slots(ctx, task, []string{"", "x"}); err != nil || sts[0].Last == nil || sts[0].Last.Number != n {
					b.Fatalf("%+v, %v", sts, err)
				}
			}
		})
	}
	b.Run("Slots/week", func(b *testing.B) {
		for b.Loop() {
			if sts, err := s.Slots(ctx, "week", week); err != nil || sts[len(week)-1].Last == nil {
				b.Fatalf("%v", err)
			}
		}
	})
}
