package kvstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestKindIndexFlat: a read of a kind that has an index of its own (the newest missed events:
// once status, doctor) reads that index alone: no mark of another kind and no document but those
// of its entries, at any size of history, whether the kind is absent or present; its pages are
// the whole-history read's.
func TestKindIndexFlat(t *testing.T) {
	ctx := context.Background()
	h := newHist()
	l := NewLedger(h)
	scan := Ledger{KV: h.memKV}
	cost := func(q store.HistoryQuery) (marks, loads int, got []store.Entry) {
		t.Helper()
		h.read, h.loads = 0, 0
		got, err := l.History(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		want, err := scan.History(ctx, q)
		if err != nil || !slices.Equal(runsOf(got), runsOf(want)) {
			t.Fatalf("history %+v: %v, the scan %v (%v)", q, runsOf(got), runsOf(want), err)
		}
		return h.read, h.loads, got
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2000 { // history of other kinds only
		task, slot, at := []string{"t0", "t1"}[i%2], fmt.Sprintf("s%03d", i%200), at.Add(time.Duration(i)*time.Second)
		err := l.update(ctx, task, slot, 0, "", func(d *Doc, _ time.Time) (bool, error) {
			l.archive(ctx, d)
			if i%3 == 0 {
				d.Events = append(d.Events, Event{Kind: store.Busy, RunID: fmt.Sprintf("e%d", i), At: at})
				return true, nil
			}
			a := att(len(d.Attempts)+1, at, store.Failed)
			if k := len(d.Attempts); k > 0 {
				a.Number = d.Attempts[k-1].Number + 1
			} else if d.Archived != nil {
				a.Number += d.Archived.Through
			}
			a.Task, a.Slot, a.RunID = task, slot, fmt.Sprintf("a%d", i)
			d.Attempts = append(d.Attempts, a)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	q := store.HistoryQuery{Kind: store.Missed, Limit: 20}
	if marks, loads, got := cost(q); marks != 0 || loads != 0 || len(got) != 0 {
		t.Fatalf("no missed event in 2,000 entries: read %d marks and %d documents, %d entries", marks, loads, len(got))
	}
	for i := range 30 {
		if err := l.Record(ctx, store.Event{Task: "t1", Slot: "m" + string(rune('a'+i%3)), Kind: store.Missed, RunID: "missed"}); err != nil {
			t.Fatal(err)
		}
	}
	marks, loads, got := cost(q)
	if len(got) != 20 || marks > 64 || loads > 3 {
		t.Fatalf("30 missed events in 2,000 entries: %d entries read %d marks and %d documents", len(got), marks, loads)
	}
	// Pages by cursor, both ways, and of one task.
	for _, p := range []store.HistoryQuery{
		{Kind: store.Missed, Limit: 7, Before: got[3].Cursor},
		{Kind: store.Missed, Limit: 7, After: got[15].Cursor},
		{Kind: store.Missed, Before: got[19].Cursor, After: got[2].Cursor},
		{Task: "t0", Kind: store.Missed}, {Task: "t1", Kind: store.Missed, Limit: 3},
	} {
		cost(p)
	}
}

// TestKindIndexOlder: a ledger a once before the indexes of a kind wrote is indexed by its first
// read of such a kind; an older once's write (its marks kept, "hk" dropped) of a missed event is
// not in the index until this once writes the document again, and doctor's history-index check
// says so meanwhile.
func TestKindIndexOlder(t *testing.T) {
	ctx := context.Background()
	h := newHist()
	l := NewLedger(h)
	scan := Ledger{KV: h.memKV}
	seedHist(t, l, 300, 5)
	// As a once before them left it: no index of a kind, no "hk".
	for task, keys := range h.idx {
		for k := range keys {
			if kind, _ := SplitKind(k); kind != "" {
				delete(h.idx[task], k)
			}
		}
	}
	for k, e := range h.memKV.m {
		h.memKV.m[k] = ent{[]byte(strings.Replace(string(e.b), `,"hk":true`, "", 1)), e.ver}
	}
	h.kinds = false
	want, _ := scan.History(ctx, store.HistoryQuery{Kind: store.Missed})
	got, err := l.History(ctx, store.HistoryQuery{Kind: store.Missed})
	if err != nil || !h.kinds || len(want) == 0 || !slices.Equal(runsOf(got), runsOf(want)) {
		t.Fatalf("first read of an unbuilt index: %d entries (%v), built %v; want %d", len(got), err, h.kinds, len(want))
	}
	if fs := l.CheckHistory(ctx); fs[0].Level != store.LevelOK {
		t.Fatalf("CheckHistory after the build: %+v", fs)
	}
	// An older once's write of a missed event: "hx" kept, "hk" dropped, no kind mark.
	d, ver, _, _ := h.memKV.Load(ctx, "t1", "s1")
	d.Events = append(d.Events, Event{Kind: store.Missed, RunID: "older", At: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
	add, _ := d.MarkChanges()
	for _, k := range add {
		if kind, _ := SplitKind(k); kind == "" {
			h.mark("t1", []string{k}, nil)
		}
	}
	h.memKV.m[memKey("t1", "s1")] = ent{[]byte(strings.Replace(string(d.Marshal()), `,"hk":true`, "", 1)), ver + 1}
	if got, _ := l.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1}); len(got) == 1 && got[0].RunID == "older" {
		t.Fatal("an older once's missed event is in the index already: the test is wrong")
	}
	if fs := l.CheckHistory(ctx); fs[0].Level != store.LevelWarn || !strings.Contains(fs[0].Message, "(tasks t1)") {
		t.Fatalf("CheckHistory after an older once's write: %+v", fs)
	}
	if err := l.Record(ctx, store.Event{Task: "t1", Slot: "s1", Kind: store.Busy, RunID: "newer"}); err != nil {
		t.Fatal(err)
	}
	got, _ = l.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1})
	if len(got) != 1 || got[0].RunID != "older" {
		t.Fatalf("after this once's write of an older once's document: %v, want [older]", runsOf(got))
	}
	if fs := l.CheckHistory(ctx); fs[0].Level != store.LevelOK {
		t.Fatalf("CheckHistory after this once's write: %+v", fs)
	}
}

// TestKindsMarkedEarlier: a document an earlier once wrote, which put its missed marks (hk) but not
// the other kinds' (no hk2), adds those at its next write, and only those; one this once wrote adds
// none.
func TestKindsMarkedEarlier(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &Doc{Task: "t", Slot: "s", Attempts: []store.Attempt{att(1, at, store.Failed)},
		Events: []Event{{Kind: store.Missed, At: at.Add(time.Second)}, {Kind: store.Busy, At: at.Add(2 * time.Second)}}}
	ours := d.Marshal()
	earlier := strings.Replace(string(ours), `,"hk2":true`, "", 1)
	if earlier == string(ours) {
		t.Fatalf("no hk2 in %s", ours)
	}
	for _, c := range []struct {
		doc  string
		want []string
	}{{string(ours), nil}, {earlier, []string{"!busy!", "!failed!"}}} {
		r, err := Unmarshal([]byte(c.doc))
		if err != nil {
			t.Fatal(err)
		}
		add, del := r.MarkChanges()
		var kinds []string
		for _, k := range add {
			kind, _ := SplitKind(k)
			kinds = append(kinds, KindPrefix(kind))
		}
		slices.Sort(kinds)
		if !slices.Equal(kinds, c.want) || len(del) != 0 {
			t.Fatalf("%s: adds %v (kinds %v), deletes %v; want the kinds %v", c.doc, add, kinds, del, c.want)
		}
	}
}
