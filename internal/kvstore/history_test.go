package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// slotArchives saves slot's document with n archives of 32 attempts each and 8 attempts of its own,
// the archive named skip passed over (0: none), in task "t".
func slotArchives(t *testing.T, m *memKV, slot string, n, skip int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	arc := Archived{}
	k := 0
	for s := 1; s <= n; s++ {
		a := &Doc{Task: "t", Slot: ArchiveSlot(slot, s)}
		for range 32 {
			k++
			a.Attempts = append(a.Attempts, slotAtt(slot, k, at))
		}
		if _, err := m.Save(ctx, a, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		if s != skip {
			arc.fold(a)
		}
		arc.Docs = s
	}
	if skip > 0 {
		arc.Skipped = []int{skip}
	}
	d := &Doc{Task: "t", Slot: slot, Archived: &arc}
	for range 8 {
		k++
		d.Attempts = append(d.Attempts, slotAtt(slot, k, at))
	}
	if _, err := m.Save(ctx, d, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
}

func slotAtt(slot string, k int, at time.Time) store.Attempt {
	a := att(k, at.Add(time.Duration(k)*time.Second), store.Succeeded)
	a.Slot = slot
	return a
}

func runsOf(es []store.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Slot+"/"+e.RunID+"/"+e.Cursor)
	}
	return out
}

// The history of one slot reads that slot's documents, not its task's listing, and shows what the
// task's history shows of it: its archives (not one passed over, not one deleted since), pages by
// cursor included. A slot with more archives than slotReads is read through the listing.
func TestHistoryOfASlotReadsTheSlot(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	l := Ledger{KV: m}
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		slotArchives(t, m, fmt.Sprintf("other-%02d", i), 1, 0, at)
	}
	slotArchives(t, m, "s", 4, 2, at)
	slotArchives(t, m, "big", slotReads+1, 0, at)
	if err := m.Delete(ctx, &Doc{Task: "t", Slot: ArchiveSlot("s", 3)}, m.m[memKey("t", ArchiveSlot("s", 3))].ver); err != nil {
		t.Fatal(err)
	}
	all, err := l.History(ctx, store.HistoryQuery{Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		slot  string
		n     int // entries
		lists int // calls of Docs
	}{{"s", 2*32 + 8, 0}, {"big", (slotReads+1)*32 + 8, 1}, {"none", 0, 0}} {
		want := slices.DeleteFunc(slices.Clone(all), func(e store.Entry) bool { return e.Slot != c.slot })
		m.docs = 0
		got, err := l.History(ctx, store.HistoryQuery{Task: "t", Slot: c.slot})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.n || !slices.Equal(runsOf(got), runsOf(want)) {
			t.Fatalf("slot %s: %d entries, want %d, the task's history's entries of the slot (%d)", c.slot, len(got), c.n, len(want))
		}
		if m.docs != c.lists {
			t.Errorf("slot %s: %d listings of the task, want %d", c.slot, m.docs, c.lists)
		}
		if c.n == 0 {
			continue
		}
		// The next page from the middle: the same entries as the task's pages, filtered.
		mid := got[c.n/2]
		page, err := l.History(ctx, store.HistoryQuery{Task: "t", Slot: c.slot, Before: mid.Cursor, Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(runsOf(page), runsOf(want[c.n/2+1:c.n/2+6])) {
			t.Errorf("slot %s: the page after %s is %v, want %v", c.slot, mid.Cursor, runsOf(page), runsOf(want[c.n/2+1:c.n/2+6]))
		}
	}
}

// A slot's archive that cannot be read fails the slot's history: no page with entries missing.
func TestHistoryOfASlotFailsWithARead(t *testing.T) {
	m := newMem()
	slotArchives(t, m, "s", 4, 0, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC))
	m.fail = ArchiveSlot("s", 2)
	if es, err := (Ledger{KV: m}).History(context.Background(), store.HistoryQuery{Task: "t", Slot: "s"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%d entries, error %v; want ErrUnavailable", len(es), err)
	}
}
