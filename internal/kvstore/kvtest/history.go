package kvtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// HistoryIndex: a ledger an older once wrote has no history index (kvstore.HistoryKV); the first
// page of history builds it from the documents, archives included, and every page after it reads
// the index: the whole history, and a walk by cursors in both directions, are what they were.
// unindex removes the prefix's history index, its indexes of a kind and the marks that say they
// were built.
func HistoryIndex(t *testing.T, dsnOf func(testing.TB) string, unindex func(t *testing.T, dsn string)) {
	historyCheck(t, dsnOf)
	historySlot(t, dsnOf)
	t.Run("HistoryUpgrade", func(t *testing.T) {
		t.Parallel()
		dsn := dsnOf(t)
		s := open(t, dsn)
		ctx := ctxT(t)
		for _, task := range []string{"a", "b"} {
			l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "seed", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			code := 0
			for i := range 50 { // a slot archived past 40 attempts, and slots of their own
				slot := ""
				if i%5 == 0 {
					slot = fmt.Sprintf("s%02d", i)
				}
				run := fmt.Sprintf("%s-%02d", task, i)
				if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: run, Holder: "h", Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
					t.Fatal(err)
				}
				if i%7 == 0 {
					if err := s.Record(ctx, store.Event{Task: task, Slot: slot, Kind: store.Busy, RunID: "b" + run}); err != nil {
						t.Fatal(err)
					}
				}
				if i%9 == 0 && task == "a" { // a kind with an index of its own (kvstore.IndexedKinds)
					if err := s.Record(ctx, store.Event{Task: task, Slot: slot, Kind: store.Missed, RunID: "m" + run}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		want := cursors(t, s, store.HistoryQuery{})
		// The index's history is the read of every document's (a KV without HistoryKV).
		scan := kvstore.Ledger{KV: struct{ kvstore.KV }{s.(interface{ Backend() kvstore.KV }).Backend()}}
		if all := cursors(t, scan, store.HistoryQuery{}); !slices.Equal(all, want) {
			t.Fatalf("history read from the index: %d entries, the documents hold %d", len(want), len(all))
		}
		wantMissed := cursors(t, s, store.HistoryQuery{Kind: store.Missed})
		if all := cursors(t, scan, store.HistoryQuery{Kind: store.Missed}); len(all) == 0 || !slices.Equal(all, wantMissed) {
			t.Fatalf("missed events read from their index: %d, the documents hold %d", len(wantMissed), len(all))
		}
		unindex(t, dsn)
		s2 := open(t, dsn)
		if got := cursors(t, s2, store.HistoryQuery{Kind: store.Missed}); !slices.Equal(got, wantMissed) {
			t.Fatalf("missed events after their index was built from the documents: %d, want %d", len(got), len(wantMissed))
		}
		if got := cursors(t, s2, store.HistoryQuery{}); !slices.Equal(got, want) {
			t.Fatalf("history after the index was built from the documents: %d entries, want %d", len(got), len(want))
		}
		for _, q := range []store.HistoryQuery{{}, {Task: "a"}, {Task: "b", Kind: store.Busy}, {Kind: store.Missed}, {Task: "a", Kind: store.Missed}} {
			walkPages(t, s2, q)
		}
	})
}

// historyCheck: doctor's history-index check (kvstore.CheckHistory) looks a document's newest
// entry up in the index on this store: a document written without "hx" whose marks are in is OK,
// one whose newest mark is not (an older once's write after the build, to a slot the index names
// by an older mark: the window doctor reads) a warning naming its task; the same for a
// document's newest missed event in the index of its kind.
func historyCheck(t *testing.T, dsnOf func(testing.TB) string) {
	t.Run("HistoryCheck", func(t *testing.T) {
		t.Parallel()
		s := open(t, dsnOf(t))
		ctx := ctxT(t)
		kv := s.(interface{ Backend() kvstore.KV }).Backend()
		check := s.(interface {
			CheckHistory(context.Context) []store.Finding
		})
		if _, err := s.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1}); err != nil { // builds the indexes
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Minute)
		var docs []*kvstore.Doc
		for _, slot := range []string{"a", "ab", "b"} { // "a"'s marks a prefix of "ab"'s, at one instant
			// Two attempts: the first's mark names the document in the window doctor reads
			// (the task's newest marks) when the second's is missing.
			was := at.Add(-time.Second)
			d := &kvstore.Doc{Task: "chk", Slot: slot, Attempts: []store.Attempt{
				{Task: "chk", Slot: slot, RunID: slot + "1", Number: 1, State: store.Succeeded, StartedAt: was, EndedAt: &was},
				{Task: "chk", Slot: slot, RunID: slot, Number: 2, State: store.Succeeded, StartedAt: at, EndedAt: &at}}}
			d.Unmarked() // written without "hx", as an older once writes (its marks are put here)
			if _, err := kv.Save(ctx, d, 0, 0, ""); err != nil {
				t.Fatal(err)
			}
			docs = append(docs, d)
		}
		levelIn := func(ctx context.Context, want store.Level) string {
			t.Helper()
			fs := check.CheckHistory(ctx)
			if len(fs) != 1 || fs[0].Level != want {
				t.Fatalf("CheckHistory: %+v, want one %s finding", fs, want)
			}
			return fs[0].Message
		}
		level := func(want store.Level) string { t.Helper(); return levelIn(ctx, want) }
		hk := kv.(kvstore.HistoryKV)
		level(store.LevelOK)
		orphanCheck(t, kv, at, levelIn)
		ms := docs[0].Marks()
		if err := hk.Unmark(ctx, "chk", ms[len(ms)-1:]); err != nil { // "a"'s newest entry, not in the index
			t.Fatal(err)
		}
		if msg := level(store.LevelWarn); !strings.Contains(msg, "1 documents") || !strings.Contains(msg, "(tasks chk)") {
			t.Fatalf("CheckHistory: %s", msg)
		}
		if err := hk.Unmark(ctx, "chk", ms[len(ms)-1:]); err != nil {
			t.Fatal(err)
		}
		// A missed event whose mark is in the task's index and not in the index of its kind (an
		// older once's write of it, beside a once that keeps that index).
		d := &kvstore.Doc{Task: "chk2", Slot: "m", Events: []kvstore.Event{{Kind: store.Missed, At: at.Add(time.Second)}}}
		d.Unmarked()
		if _, err := kv.Save(ctx, d, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		if err := hk.Unmark(ctx, "chk2", d.KindMarks()); err != nil {
			t.Fatal(err)
		}
		if msg := level(store.LevelWarn); !strings.Contains(msg, "(tasks chk, chk2)") {
			t.Fatalf("CheckHistory: %s", msg)
		}
		if es, err := s.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: 1}); err != nil || len(es) != 0 {
			t.Fatalf("the missed event is in its index already (%d, %v): the test is wrong", len(es), err)
		}
	})
}

// walkPages: q's history walked in pages of 7 is q's history read at once, and a page after the
// oldest entry holds the ones before it.
func walkPages(t *testing.T, s store.Ledger, q store.HistoryQuery) {
	t.Helper()
	ctx := ctxT(t)
	all := cursors(t, s, q)
	var walked []string
	page := q
	page.Limit = 7
	for {
		es, err := s.History(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			walked = append(walked, e.Cursor)
		}
		if len(es) < page.Limit {
			break
		}
		page.Before = es[len(es)-1].Cursor
	}
	if !slices.Equal(walked, all) {
		t.Fatalf("history %+v walked in pages of 7: %d entries, want %d", q, len(walked), len(all))
	}
	back := q
	back.Limit, back.After = 5, all[len(all)-1]
	es, err := s.History(ctx, back)
	if err != nil || len(es) != min(5, len(all)-1) || es[len(es)-1].Cursor != all[len(all)-2] {
		t.Fatalf("history %+v after the oldest: %d entries, %v", q, len(es), err)
	}
}

func cursors(t *testing.T, s store.Ledger, q store.HistoryQuery) []string {
	t.Helper()
	es, err := s.History(ctxT(t), q)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Cursor
	}
	return out
}

// orphanCheck: a slot only an older once writes, none of its entries in the index. The window
// doctor reads by default does not read it, and its OK says so; once doctor --scan
// (store.WithFullCheck) reads every document and names its task.
func orphanCheck(t *testing.T, kv kvstore.KV, at time.Time, levelIn func(context.Context, store.Level) string) {
	t.Helper()
	ctx, hk := ctxT(t), kv.(kvstore.HistoryKV)
	o := &kvstore.Doc{Task: "chk3", Slot: "o", Attempts: []store.Attempt{{Task: "chk3", Slot: "o", RunID: "o", Number: 1, State: store.Succeeded, StartedAt: at, EndedAt: &at}}}
	o.Unmarked()
	if _, err := kv.Save(ctx, o, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := hk.Unmark(ctx, "chk3", append(o.Marks(), o.KindMarks()...)); err != nil {
		t.Fatal(err)
	}
	if msg := levelIn(ctx, store.LevelOK); !strings.Contains(msg, "window of the newest 16") || !strings.Contains(msg, "not read here") || !strings.Contains(msg, "once doctor --scan") {
		t.Fatalf("CheckHistory: %s, want it to say what it did not read and that --scan does", msg)
	}
	if msg := levelIn(store.WithFullCheck(ctx), store.LevelWarn); !strings.Contains(msg, "1 documents") || !strings.Contains(msg, "(tasks chk3)") || !strings.Contains(msg, "every document (4,") {
		t.Fatalf("CheckHistory --scan: %s", msg)
	}
}

// historySlot: history --slot S without --task, read through the index (each task's document of
// S and its archives), is the read of every document's: every task's attempts and events of S,
// archived ones included, in the same order and pages.
func historySlot(t *testing.T, dsnOf func(testing.TB) string) {
	t.Run("HistorySlot", func(t *testing.T) {
		t.Parallel()
		s := open(t, dsnOf(t))
		ctx := ctxT(t)
		code := 0
		for task, n := range map[string]int{"a": 3, "b": 45, "c": 1} { // "b"'s "s" archived past 40
			l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "seed", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			for i := range n + 2 {
				slot, run := "s", fmt.Sprintf("%s-%02d", task, i)
				if i >= n {
					slot = fmt.Sprintf("t%d", i) // other slots
				}
				if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: run, Holder: "h", Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Failed, ExitCode: &code}); err != nil {
					t.Fatal(err)
				}
				if i%7 == 0 {
					if err := s.Record(ctx, store.Event{Task: task, Slot: slot, Kind: store.Busy, RunID: "b" + run}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if _, err := s.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // builds the index
			t.Fatal(err)
		}
		scan := kvstore.Ledger{KV: struct{ kvstore.KV }{s.(interface{ Backend() kvstore.KV }).Backend()}}
		for _, q := range []store.HistoryQuery{{Slot: "s"}, {Slot: "s", Kind: store.Busy}, {Slot: "t3"}, {Slot: "none"}} {
			got, want := cursors(t, s, q), cursors(t, scan, q)
			if !slices.Equal(got, want) || q.Slot == "s" && q.Kind == "" && len(got) != 49+9 {
				t.Fatalf("history %+v: %d entries, the documents hold %d", q, len(got), len(want))
			}
			if len(want) > 1 {
				walkPages(t, s, q)
			}
		}
	})
}
