package kvstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestCheckHistory: doctor's check is OK on a ledger this once wrote and on one whose index was
// built from an older once's documents (they keep no "hx", their marks are in), warns once an
// older once writes an entry after the build (naming its task), and is OK again when this once's
// next write of that document puts its marks.
func TestCheckHistory(t *testing.T) {
	ctx := context.Background()
	h := newHist()
	l := NewLedger(h)
	level := func(want store.Level, what string) store.Finding {
		t.Helper()
		fs := l.CheckHistory(ctx)
		if len(fs) != 1 || fs[0].Level != want {
			t.Fatalf("%s: %+v, want one finding %s", what, fs, want)
		}
		return fs[0]
	}
	seedHist(t, l, 200, 5)
	level(store.LevelOK, "written by this once")
	// Written by an older once (no "hx" in any document), then built by the first page.
	for k, e := range h.memKV.m {
		h.memKV.m[k] = ent{[]byte(strings.Replace(string(e.b), `,"hx":true`, "", 1)), e.ver}
	}
	h.idx, h.built = map[string]map[string]bool{}, false
	level(store.LevelInfo, "not built")
	if _, err := l.History(ctx, store.HistoryQuery{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	level(store.LevelOK, "built from an older once's documents")
	// An older once's write after the build.
	d, ver, _, _ := h.memKV.Load(ctx, "t1", "s1")
	d.Events = append(d.Events, Event{Kind: store.Busy, RunID: "older", At: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
	h.memKV.m[memKey("t1", "s1")] = ent{[]byte(strings.Replace(string(d.Marshal()), `,"hx":true`, "", 1)), ver + 1}
	if f := level(store.LevelWarn, "an older once's entry after the build"); !strings.Contains(f.Message, "(tasks t1)") {
		t.Fatalf("the warning does not name the task: %s", f.Message)
	}
	if err := l.Record(ctx, store.Event{Task: "t1", Slot: "s1", Kind: store.Busy, RunID: "newer"}); err != nil {
		t.Fatal(err)
	}
	level(store.LevelOK, "after this once's write of that document")
}
