package kvstore

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestPruneReadsWhatItRemoves: with a history index Prune (and so --retain) reads the documents
// that hold an entry before its cutoff, found by the marks oldest first, not the task's every
// document; what it removes is what the read of every document removes.
func TestPruneReadsWhatItRemoves(t *testing.T) {
	ctx := context.Background()
	h := newHist()
	l := NewLedger(h)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 600 { // a slot an hour, two attempts each (the first failed): 600 documents
		slot := base.Add(time.Duration(i) * time.Hour)
		for n, st := range []store.State{store.Failed, store.Succeeded} {
			at := slot.Add(time.Duration(n) * time.Minute)
			err := l.update(ctx, "t", slot.Format(time.RFC3339), 0, "", func(d *Doc, _ time.Time) (bool, error) {
				a := att(n+1, at, st)
				a.Task, a.Slot, a.RunID = "t", d.Slot, d.Slot+string(rune('a'+n))
				d.Attempts = append(d.Attempts, a)
				return true, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	prune := func(before time.Time) (store.PruneResult, int) {
		t.Helper()
		h.loads, h.docs = 0, 0
		res, err := l.Prune(ctx, store.PruneRequest{Task: "t", Before: before})
		if err != nil || h.docs != 0 {
			t.Fatalf("prune before %v: %+v, %v; %d listings of every document", before, res, err, h.docs)
		}
		return res, h.loads
	}
	if res, loads := prune(base.Add(-time.Second)); res != (store.PruneResult{}) || loads != 0 {
		t.Fatalf("a prune before the oldest entry: %+v, %d documents read", res, loads)
	}
	// 10 slots' failed first attempts go: their documents are read, twice (the list, the rewrite),
	// and the 11th's, whose first attempt is at the cutoff.
	res, loads := prune(base.Add(10 * time.Hour))
	if res.Attempts != 10 || loads > 22 {
		t.Fatalf("a prune of 10 slots' failures: %+v, %d documents read", res, loads)
	}
	// Against the read of every document: the same result.
	scan := Ledger{KV: h.memKV}
	want, err := scan.Prune(ctx, store.PruneRequest{Task: "t", Before: base.Add(100 * time.Hour), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Prune(ctx, store.PruneRequest{Task: "t", Before: base.Add(100 * time.Hour), DryRun: true})
	if err != nil || got != want || want.Attempts != 90 {
		t.Fatalf("dry run by the marks: %+v %v; by every document: %+v", got, err, want)
	}
	got, err = l.Prune(ctx, store.PruneRequest{Task: "t", Before: base.Add(100 * time.Hour), ForgetSlots: true})
	if err != nil || got.Slots != 100 {
		t.Fatalf("forget-slots by the marks: %+v %v, want 100 slots", got, err)
	}
	if all, _ := scan.History(ctx, store.HistoryQuery{Task: "t"}); len(all) != 2*500 {
		t.Fatalf("after forgetting 100 of 600 slots: %d entries, want 1000", len(all))
	}
}
