package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestPruneByMarksMatchesScan: on random ledgers (failed, unknown, succeeded and resolved
// attempts, missed/skipped/busy/review events, entries of several slots at one microsecond,
// slots with archives), a sequence of prunes (every task or one, with and without ForgetSlots,
// Since, dry runs) by the marks removes exactly what the read of every document removes: the same counts, the same
// documents left, entry for entry.
func TestPruneByMarksMatchesScan(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var times []time.Time // the entries' instants, of the last build
	build := func(seed uint64) *histKV {
		times = times[:0]
		rng := rand.New(rand.NewPCG(seed, 7))
		h := newHist()
		l := NewLedger(h)
		for _, task := range []string{"t1", "t2"} {
			for s := range 43 {
				slot := fmt.Sprintf("s%02d", s)
				at := base.Add(time.Duration(rng.IntN(100)) * time.Hour)
				if rng.IntN(4) == 0 { // a tie: another slot's instant, to the microsecond
					at = base.Add(time.Duration(rng.IntN(3)) * time.Hour)
				}
				n, writes, step := 0, rng.IntN(6), 20*time.Hour
				if s >= 40 { // slots with archives (archiveAt)
					at, writes, step = base, 45+rng.IntN(40), 4*time.Hour
				}
				for range writes {
					err := l.update(ctx, task, slot, 0, "", func(d *Doc, _ time.Time) (bool, error) {
						l.archive(ctx, d)
						if rng.IntN(3) == 0 {
							kinds := []store.State{store.Missed, store.Skipped, store.Busy, store.Review}
							d.Events = append(d.Events, Event{Kind: kinds[rng.IntN(len(kinds))], Attempt: n, At: at, Holder: "h"})
							return true, nil
						}
						n++
						states := []store.State{store.Failed, store.Unknown, store.Succeeded, store.Failed}
						a := att(n, at, states[rng.IntN(len(states))])
						a.Task, a.Slot, a.RunID = task, slot, fmt.Sprintf("%s-%s-%d", task, slot, n)
						if a.State != store.Succeeded && rng.IntN(4) == 0 {
							a.Resolution = &store.Resolution{As: store.Succeeded, By: "p", At: at.Add(time.Minute)}
						}
						d.Attempts = append(d.Attempts, a)
						return true, nil
					})
					if err != nil {
						t.Fatal(err)
					}
					times = append(times, at)
					at = at.Add(time.Duration(rng.Int64N(int64(step))))
				}
			}
		}
		if docs, _ := h.memKV.Docs(ctx, ""); !slices.ContainsFunc(docs, (*Doc).IsArchive) {
			t.Fatal("no archive built: the test is wrong")
		}
		return h
	}
	dump := func(m *memKV) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []string
		for k, e := range m.m {
			d, err := Unmarshal(e.b)
			if err != nil {
				t.Fatal(err)
			}
			d.Marked, d.KindsMarked = false, false
			b, _ := json.Marshal(d)
			out = append(out, k+" "+string(b))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}
	var total store.PruneResult
	for seed := range uint64(6) {
		byMarks, byScan := build(seed), build(seed)
		if dump(byMarks.memKV) != dump(byScan.memKV) {
			t.Fatal("the builds differ")
		}
		rng := rand.New(rand.NewPCG(seed, 9))
		for step := range 6 {
			r := store.PruneRequest{Before: base.Add(time.Duration(rng.IntN(240)) * time.Hour), ForgetSlots: rng.IntN(2) == 0, DryRun: rng.IntN(4) == 0}
			if rng.IntN(3) == 0 { // just after an entry, in its microsecond
				r.Before = times[rng.IntN(len(times))].Add(time.Nanosecond)
			}
			if rng.IntN(3) == 0 {
				r.Task = "t2"
			}
			if !r.ForgetSlots && rng.IntN(3) == 0 { // once run --retain's window
				r.Since = r.Before.Add(-time.Duration(rng.IntN(50)) * time.Hour)
			}
			got, err := NewLedger(byMarks).Prune(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Ledger{KV: byScan.memKV}.Prune(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("seed %d step %d %+v: by the marks %+v, by every document %+v", seed, step, r, got, want)
			}
			total.Add(got)
			if a, b := dump(byMarks.memKV), dump(byScan.memKV); a != b {
				t.Fatalf("seed %d step %d %+v: the documents left differ:\nby the marks:\n%s\nby every document:\n%s", seed, step, r, a, b)
			}
		}
	}
	if total.Attempts < 100 || total.Events < 100 || total.Slots < 10 {
		t.Fatalf("the prunes removed too little to compare: %+v", total)
	}
	t.Logf("removed in all: %+v", total)
}
