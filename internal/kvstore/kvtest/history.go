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
// unindex removes the prefix's history index and the mark that says it was built.
func HistoryIndex(t *testing.T, dsnOf func(testing.TB) string, unindex func(t *testing.T, dsn string)) {
	historyCheck(t, dsnOf)
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
			}
		}
		want := cursors(t, s, store.HistoryQuery{})
		// The index's history is the read of every document's (a KV without HistoryKV).
		scan := kvstore.Ledger{KV: struct{ kvstore.KV }{s.(interface{ Backend() kvstore.KV }).Backend()}}
		if all := cursors(t, scan, store.HistoryQuery{}); !slices.Equal(all, want) {
			t.Fatalf("history read from the index: %d entries, the documents hold %d", len(want), len(all))
		}
		unindex(t, dsn)
		s2 := open(t, dsn)
		if got := cursors(t, s2, store.HistoryQuery{}); !slices.Equal(got, want) {
			t.Fatalf("history after the index was built from the documents: %d entries, want %d", len(got), len(want))
		}
		for _, q := range []store.HistoryQuery{{}, {Task: "a"}, {Task: "b", Kind: store.Busy}} {
			all := cursors(t, s2, q)
			var walked []string
			page := q
			page.Limit = 7
			for {
				es, err := s2.History(ctx, page)
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
			es, err := s2.History(ctx, back)
			if err != nil || len(es) != min(5, len(all)-1) || es[len(es)-1].Cursor != all[len(all)-2] {
				t.Fatalf("history %+v after the oldest: %d entries, %v", q, len(es), err)
			}
		}
	})
}

// historyCheck: doctor's history-index check (kvstore.CheckHistory) looks a document's newest
// entry up in the index on this store: a document written without "hx" whose marks are in is OK,
// one whose newest mark is not (an older once's write after the build) a warning naming its task.
func historyCheck(t *testing.T, dsnOf func(testing.TB) string) {
	t.Run("HistoryCheck", func(t *testing.T) {
		t.Parallel()
		s := open(t, dsnOf(t))
		ctx := ctxT(t)
		kv := s.(interface{ Backend() kvstore.KV }).Backend()
		check := s.(interface {
			CheckHistory(context.Context) []store.Finding
		})
		if _, err := s.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // builds the index
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Minute)
		var docs []*kvstore.Doc
		for _, slot := range []string{"a", "ab", "b"} { // "a"'s marks a prefix of "ab"'s, at one instant
			d := &kvstore.Doc{Task: "chk", Slot: slot, Attempts: []store.Attempt{{Task: "chk", Slot: slot, RunID: slot, Number: 1, State: store.Succeeded, StartedAt: at, EndedAt: &at}}}
			d.Unmarked() // written without "hx", as an older once writes (its marks are put here)
			if _, err := kv.Save(ctx, d, 0, 0, ""); err != nil {
				t.Fatal(err)
			}
			docs = append(docs, d)
		}
		level := func(want store.Level) string {
			t.Helper()
			fs := check.CheckHistory(ctx)
			if len(fs) != 1 || fs[0].Level != want {
				t.Fatalf("CheckHistory: %+v, want one %s finding", fs, want)
			}
			return fs[0].Message
		}
		level(store.LevelOK)
		hk := kv.(kvstore.HistoryKV)
		ms := docs[0].Marks()
		if err := hk.Unmark(ctx, "chk", ms[len(ms)-1:]); err != nil { // "a"'s newest entry, not in the index
			t.Fatal(err)
		}
		if msg := level(store.LevelWarn); !strings.Contains(msg, "1 documents") || !strings.Contains(msg, "(tasks chk)") {
			t.Fatalf("CheckHistory: %s", msg)
		}
	})
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
