package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testSlotsRead: store.SlotsReader's Slots reads each slot as Slot does — never tried, succeeded,
// failed twice with a checkpoint, waiting for review, unknown and resolved, running, another
// task's slot of the same name, a slot between two asked for, a slot's name with a space after
// it — in the order asked, repeats included, and refuses more than store.MaxSlotsRead slots.
func testSlotsRead(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	sr := s.(store.SlotsReader)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "d1", "r1", 1)
	finish(t, s, "r1", l.Token, store.Succeeded, 0)
	begin(t, s, l, "d2", "r2", 1)
	if err := s.Report(ctx, "r2", l.Token, store.Report{Checkpoint: "cp"}); err != nil {
		t.Fatal(err)
	}
	finish(t, s, "r2", l.Token, store.Failed, 1)
	begin(t, s, l, "d2", "r3", 2)
	finish(t, s, "r3", l.Token, store.Failed, 2)
	if err := s.Record(ctx, store.Event{Task: "job", Slot: "d2", Kind: store.Review, RunID: "r3", Holder: "a", Token: l.Token, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, l, "d3", "r4", 1)
	begin(t, s, l, "d4", "r5", 1)
	begin(t, s, l, "d5", "r6", 1) // between d4 and d6, not asked for
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	l2 := acquire(t, s, "job", "b", time.Minute)
	if _, err := s.Abandon(ctx, "job", l2.Token); err != nil { // d3, d4 and d5: unknown
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d4", As: store.Succeeded, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, l2, "d6", "r7", 1) // running
	other := acquire(t, s, "other", "a", time.Minute)
	begin(t, s, other, "never", "r8", 1)
	finish(t, s, "r8", other.Token, store.Succeeded, 0)

	// "d1 ": the slot d1 where a collation pads (MySQL, MariaDB), another slot elsewhere.
	asked := []string{"d6", "never", "d1", "d2", "d3", "d4", "d1", "d1 "}
	got, err := sr.Slots(ctx, "job", asked)
	if err != nil || len(got) != len(asked) {
		t.Fatalf("Slots(%q) = %d states, %v", asked, len(got), err)
	}
	for i, sl := range asked {
		if want := slotState(t, s, "job", sl); !reflect.DeepEqual(got[i], want) {
			t.Errorf("Slots: slot %s (#%d) = %s; Slot = %s", sl, i, show(got[i]), show(want))
		}
	}
	if got, err := sr.Slots(ctx, "job", nil); err != nil || len(got) != 0 {
		t.Errorf("Slots(nil) = %v, %v", got, err)
	}
	_, err = sr.Slots(ctx, "job", make([]string, store.MaxSlotsRead+1))
	wantErr(t, "Slots of more than MaxSlotsRead", err, store.ErrInvalid)
}

func show(st store.SlotState) string {
	if st.Last == nil {
		return fmt.Sprintf("%+v", st)
	}
	return fmt.Sprintf("%+v last %+v", st, *st.Last)
}
