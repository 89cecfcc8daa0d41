package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// fill returns exactly n bytes: as many copies of unit (a multi-byte character) as fit, then
// ASCII 'x' to make up the rest.
func fill(unit string, n int) string {
	s := strings.Repeat(unit, n/len(unit))
	return s + strings.Repeat("x", n-len(s))
}

// testLimits: every value at exactly its limit (store.Max*, in bytes) round-trips through the
// lease, the attempt, a report, an outcome, an event and a resolution unchanged, so that what the
// CLI accepts no store refuses: once in ASCII (the most characters, for columns that count
// characters) and once in multi-byte characters (for columns that count bytes). A task name is at
// its limit too (once.MaxTaskLen, ASCII) and so is a slot value (slot.MaxValueLen).
func testLimits(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ascii := [...]string{"a", "b", "c", "d", "e", "f", "g", "h\n"}
	wide := [...]string{"ス", "€", "ü", "日", "é", "😀", "進", "ñ\n"}
	for i, u := range [][8]string{ascii, wide} {
		limitsRoundTrip(t, s, strings.Repeat(string(rune('s'+i)), 200), u)
	}
}

func limitsRoundTrip(t *testing.T, s store.Store, task string, u [8]string) {
	ctx := ctxT(t)
	slot := fill(u[0], 200) // slot.MaxValueLen
	holder := fill(u[1], store.MaxHolderLen)
	by := fill(u[2], store.MaxByLen)
	note := fill(u[3], store.MaxNoteLen)
	outNote := fill(u[4], store.MaxNoteLen)
	checkpoint := fill(u[5], store.MaxCheckpointLen)
	progress := fill(u[6], store.MaxProgressLen)
	resNote := fill(u[7], store.MaxNoteLen)
	evNote := fill(u[5], store.MaxNoteLen)

	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: holder, RunID: task[:1] + "r1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire with a holder of %d bytes: %v", len(holder), err)
	}
	if got := leaseOf(t, s, task); got == nil || got.Holder != holder {
		t.Fatalf("Leases: the holder did not round-trip: %+v", got)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: task[:1] + "r1", Number: 1, Holder: holder, Token: l.Token}); err != nil {
		t.Fatalf("Begin at the limits: %v", err)
	}
	if err := s.Report(ctx, task[:1]+"r1", l.Token, store.Report{Progress: progress, Checkpoint: checkpoint, Note: note}); err != nil {
		t.Fatalf("Report at the limits: %v", err)
	}
	code := 1
	fin, err := s.Finish(ctx, task[:1]+"r1", l.Token, store.Outcome{State: store.Failed, ExitCode: &code, Note: outNote})
	if err != nil {
		t.Fatalf("Finish with a note of %d bytes after a reported one of %d: %v", len(outNote), len(note), err)
	}
	wantNote := note + "; " + outNote
	if fin.Note != wantNote {
		t.Fatalf("Finish: the joined note did not round-trip (%d bytes, want %d)", len(fin.Note), len(wantNote))
	}
	if err := s.Record(ctx, store.Event{Task: task, Slot: slot, Kind: store.Review, RunID: task[:1] + "r2", Holder: holder, Token: l.Token, Attempt: 1, Note: evNote}); err != nil {
		t.Fatalf("Record at the limits: %v", err)
	}
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: task, Slot: slot, As: store.Failed, By: by, Note: resNote}); err != nil {
		t.Fatalf("Resolve at the limits: %v", err)
	}
	st := slotState(t, s, task, slot)
	if st.Checkpoint != checkpoint || st.Last == nil || st.Last.Checkpoint != checkpoint || st.Last.Progress != progress ||
		st.Last.Holder != holder || st.Last.Note != wantNote {
		t.Fatalf("Slot: a value at its limit did not round-trip (holder %d, note %d, checkpoint %d, progress %d bytes)",
			len(st.Last.Holder), len(st.Last.Note), len(st.Last.Checkpoint), len(st.Last.Progress))
	}
	es := history(t, s, store.HistoryQuery{Task: task})
	var att, ev *store.Entry
	for i := range es {
		switch es[i].State {
		case store.Failed:
			att = &es[i]
		case store.Review:
			ev = &es[i]
		}
	}
	if att == nil || ev == nil {
		t.Fatalf("History: want the attempt and the event, got %s", entryRuns(es))
	}
	if att.Slot != slot || att.Holder != holder || att.Note != wantNote || att.Checkpoint != checkpoint || att.Progress != progress {
		t.Fatalf("History: the attempt's values did not round-trip")
	}
	if r := att.Resolution; r == nil || r.By != by || r.Note != resNote {
		t.Fatalf("History: the resolution did not round-trip: %+v", r)
	}
	if ev.Holder != holder || ev.Note != evNote || ev.Slot != slot {
		t.Fatalf("History: the event did not round-trip (holder %d, note %d bytes)", len(ev.Holder), len(ev.Note))
	}
}
