package kvstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// olderWrite rewrites task "t" slot "s" as a once before archives does: it decodes the document
// into the fields it knows and writes them back, dropping the count of archives and the
// history-index fields.
func olderWrite(t *testing.T, m *memKV) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[memKey("t", "s")]
	var old struct {
		Task     string          `json:"task"`
		Slot     string          `json:"slot"`
		Attempts []store.Attempt `json:"attempts,omitempty"`
		Events   []Event         `json:"events,omitempty"`
	}
	if err := json.Unmarshal(e.b, &old); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	m.n++
	m.m[memKey("t", "s")] = ent{b, m.n}
}

// A slot archived by this once, then rewritten by an older once that does not know archives (a
// fleet upgraded one host at a time): its state still counts the archived failures, and its
// history still shows the archived entries.
func TestOlderOnceDroppedArchiveCount(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	t.Run("failures", func(t *testing.T) {
		m := newMem()
		l := Ledger{KV: m}
		d := &Doc{Task: "t", Slot: "s"}
		for n := 1; n <= archiveAt+5; n++ {
			a := att(n, now, store.Failed)
			a.Slot = "s"
			d.Attempts = append(d.Attempts, a)
		}
		l.archive(ctx, d)
		if d.Archived == nil {
			t.Fatal("not archived")
		}
		if _, err := m.Save(ctx, d, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		olderWrite(t, m)
		st, err := l.Slot(ctx, "t", "s")
		if err != nil {
			t.Fatal(err)
		}
		if st.Failures != archiveAt+5 {
			t.Fatalf("failures after an older once's write: %d, want %d", st.Failures, archiveAt+5)
		}
	})
	t.Run("events", func(t *testing.T) {
		m := newMem()
		l := Ledger{KV: m}
		a := att(1, now, store.Succeeded)
		a.Slot = "s"
		d := &Doc{Task: "t", Slot: "s", Attempts: []store.Attempt{a}}
		for i := 0; i < archiveAt+5; i++ {
			d.Events = append(d.Events, Event{Kind: store.Skipped, At: now.Add(time.Duration(i) * time.Second)})
		}
		l.archive(ctx, d)
		if _, err := m.Save(ctx, d, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		olderWrite(t, m)
		if err := l.Record(ctx, store.Event{Task: "t", Slot: "s", Kind: store.Skipped}); err != nil {
			t.Fatal(err)
		}
		es, err := l.History(ctx, store.HistoryQuery{Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 + archiveAt + 5 + 1; len(es) != want {
			t.Fatalf("history after an older once's write: %d entries, want %d", len(es), want)
		}
	})
}
