package once_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// countingReads counts a store's reads of slot states: Slot one at a time, Slots a block at a time.
type countingReads struct {
	store.Store
	slot, slots, read int
}

func (c *countingReads) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	c.slot++
	return c.Store.Slot(ctx, task, slot)
}

func (c *countingReads) Slots(ctx context.Context, task string, slots []string) ([]store.SlotState, error) {
	c.slots++
	c.read += len(slots)
	return c.Store.(store.SlotsReader).Slots(ctx, task, slots)
}

// A sequence over slots that are done (a backfill over years of minutes) reads their states a
// block at a time on a store.SlotsReader, not a Slot each: it took 270 µs a slot on SQLite.
func TestSequenceReadsDoneSlotsInBlocks(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	var slots []string
	for i := range 300 {
		slots = append(slots, fmt.Sprintf("s%03d", i))
	}
	o := once.Options{Store: s, Task: "t", TTL: 10 * time.Second}
	if _, err := once.Sequence(ctx, o, slots, once.SeqOptions{Quiet: true}, succeed); err != nil {
		t.Fatal(err)
	}
	c := &countingReads{Store: s}
	o.Store = c
	rs, err := once.Sequence(ctx, o, slots, once.SeqOptions{Quiet: true}, succeed)
	if err != nil || len(rs) != len(slots) || rs[len(rs)-1].Decision != once.Skipped {
		t.Fatalf("%d results, %v", len(rs), err)
	}
	// Blocks of 1, 2, 4, … 128, then the 45 left: 9 reads.
	if c.slot != 0 || c.slots > 9 || c.read != len(slots) {
		t.Errorf("%d Slot reads, %d Slots reads of %d slots; want 0, at most 9 of %d", c.slot, c.slots, c.read, len(slots))
	}
}

// A state read ahead is not used once a slot before it ran: while it ran, a person resolved the
// later slot (its last attempt unknown, skipped under --on-unknown skip) as failed, and the
// sequence runs it, as it did when each slot was read in its turn.
func TestSequenceReadsAgainAfterARun(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	forgeVanished(t, s, "t", "b")
	o := once.Options{Store: s, Task: "t", TTL: 10 * time.Second, OnUnknown: once.PolicySkip}
	// Warm up: a done slot, so that the next sequence reads a block of two ahead (a and b).
	if _, err := once.Sequence(ctx, o, []string{"0"}, once.SeqOptions{}, succeed); err != nil {
		t.Fatal(err)
	}
	var ran []string
	work := func(_ context.Context, r *once.Run) error {
		ran = append(ran, r.Slot)
		if r.Slot == "a" {
			if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "t", Slot: "b", As: store.Failed, By: "bob"}); err != nil {
				return err
			}
		}
		return nil
	}
	c := &countingReads{Store: s}
	o.Store = c
	rs, err := once.Sequence(ctx, o, []string{"0", "a", "b"}, once.SeqOptions{}, work)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ran) != "[a b]" || len(rs) != 3 || rs[2].Decision != once.Ran {
		t.Fatalf("ran %v, results %+v", ran, rs)
	}
	if c.slots == 0 {
		t.Errorf("no read ahead: %d Slot reads", c.slot)
	}
}
