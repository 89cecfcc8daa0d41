package storetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// badNames are holders, run ids, tasks and slots no store may take (store.AcquireRequest.Check and
// the rules beside it): each would be read back changed (invalid UTF-8 becomes U+FFFD in JSON,
// PostgreSQL refuses it) or print as something else, and later calls compare them byte for byte.
var badNames = map[string]string{
	"invalid UTF-8":   "host\xff:1",
	"a lone lead":     "host\xc3",
	"a newline":       "host\n:1",
	"a tab":           "host\t1",
	"an escape":       "host\x1b]0;pwned\x07",
	"a NUL":           "host\x00",
	"a bidi override": "host\u202e1",
	"too long":        strings.Repeat("h", 256),
}

// wide says whether an int holds the numbers past store.MaxNumber and 32-bit exit codes that
// the checks below hand a store; on a 32-bit platform no caller can, and those cases are left out.
var wide = strconv.IntSize == 64

// past is store.MaxNumber+1, an int64 so that this file compiles where an int has 32 bits.
var past = int64(store.MaxNumber + 1)

// exit40 is an exit code of 2^40, beyond the 32 bits every store keeps.
var exit40 = int64(1) << 40

// testRefusedValues: what a library caller hands a store that no once writes (a negative or huge
// attempt number, a holder or run id that is not printable UTF-8, an exit code beyond 32 bits, a
// note with a NUL) is refused by every write with store.ErrInvalid, and nothing is written: the
// same values on every store, so that none takes what another refuses, or reads back what it
// took changed.
func testRefusedValues(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	for what, bad := range badNames {
		for field, req := range map[string]store.AcquireRequest{
			"holder": {Task: "job", Holder: bad, RunID: "r", TTL: time.Minute},
			"run id": {Task: "job", Holder: "h", RunID: bad, TTL: time.Minute},
			"task":   {Task: "job" + bad, Holder: "h", RunID: "r", TTL: time.Minute},
		} {
			_, err := s.Acquire(ctx, req)
			wantInvalid(t, "Acquire with a "+field+" with "+what, err, field)
			if st, ok := s.(store.Starter); ok {
				_, err := st.Start(ctx, req, "d1")
				wantInvalid(t, "Start with a "+field+" with "+what, err, field)
			}
		}
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("Leases after refused acquires: %v, %v (want none)", ls, err)
	}
	l := acquire(t, s, "job", "a", time.Minute)
	refusedLedgerWrites(t, s, l)
	if es := history(t, s, store.HistoryQuery{}); len(es) != 1 || es[0].RunID != "r1" || es[0].State != store.Running {
		t.Fatalf("history after refused writes: %s, want r1 alone, running", entryRuns(es))
	}
	a := finish(t, s, "r1", l.Token, store.Failed, 1)
	if a.Note != "" || a.Progress != "" || a.Checkpoint != "" || a.Holder != "a" {
		t.Fatalf("r1 after refused writes: %+v", a)
	}
	for what, bad := range badNames {
		_, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d1", As: store.Failed, By: bad})
		wantInvalid(t, "Resolve by a name with "+what, err, "resolved by")
	}
	_, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "d1", As: store.Failed, By: "b", Note: "a\x00b"})
	wantInvalid(t, "Resolve with a note with a NUL", err, "note")
	if st := slotState(t, s, "job", "d1"); st.Last == nil || st.Last.Resolution != nil {
		t.Fatalf("slot after refused resolutions: %+v", st.Last)
	}
	takenValues(t, s)
}

// takenValues: what once itself writes at the edges of the rule is taken, so that the rule
// refuses no run of once: default holders (user@host:pid, alice(root)@host:pid, a user name with
// a space or an '@' from a directory, an older once's host:pid), a slot of printable text, an
// event with no run, no lease (token 0) and no attempt (0), exit codes -1 and 128+signal, and
// notes at their limits.
func takenValues(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for i, h := range []string{"alice(root)@build-01.example:4242", "Jane Doe@host:1", "a@corp@höst:2", "host:3",
		strings.Repeat("h", store.MaxHolderLen)} {
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "taken", Holder: h, RunID: "t" + string(rune('a'+i)), TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire by holder %q: %v", h, err)
		}
		sl := "2026-12-0" + string(rune('1'+i)) + " batch #7 (€, 日本)"
		code := []int{-1, 137, 255, 0, 1}[i]
		begin(t, s, l, sl, l.RunID, 1)
		for _, e := range []store.Event{
			{Task: "taken", Slot: sl, Kind: store.Busy, Holder: h, Note: strings.Repeat("n", store.MaxNoteLen)},
			{Task: "taken", Slot: "", Kind: store.Missed, Holder: h},
			{Task: "taken", Slot: sl, Kind: store.Skipped},
		} {
			if err := s.Record(ctx, e); err != nil {
				t.Fatalf("Record of %s by %q: %v", e.Kind, h, err)
			}
		}
		if err := s.Report(ctx, l.RunID, l.Token, store.Report{Progress: strings.Repeat("9", store.MaxProgressLen),
			Checkpoint: strings.Repeat("c", store.MaxCheckpointLen), Note: strings.Repeat("r", store.MaxNoteLen)}); err != nil {
			t.Fatalf("Report at the limits: %v", err)
		}
		st := store.Failed
		if code == 0 {
			st = store.Succeeded
		}
		if _, err := s.Finish(ctx, l.RunID, l.Token, store.Outcome{State: st, ExitCode: &code, Note: strings.Repeat("o", store.MaxNoteLen)}); err != nil {
			t.Fatalf("Finish with exit code %d and a note at the limit: %v", code, err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

// refusedLedgerWrites: Begin, Record, Report and Finish with a value no once writes, each refused
// with ErrInvalid; l's attempt r1 of slot d1 is left running as begun.
func refusedLedgerWrites(t *testing.T, s store.Store, l store.Lease) {
	ctx := ctxT(t)
	at := func(f func(a *store.Attempt)) store.Attempt {
		a := store.Attempt{Task: "job", Slot: "d1", RunID: "r0", Holder: "a", Token: l.Token}
		f(&a)
		return a
	}
	begins := map[string]store.Attempt{
		"attempt number -1":    at(func(a *store.Attempt) { a.Number = -1 }),
		"a seat's limit -1":    at(func(a *store.Attempt) { a.Limit = -1 }),
		"an empty run id":      at(func(a *store.Attempt) { a.RunID = "" }),
		"a note with a NUL":    at(func(a *store.Attempt) { a.Note = "a\x00b" }),
		"a progress too long":  at(func(a *store.Attempt) { a.Progress = strings.Repeat("1", store.MaxProgressLen+1) }),
		"a checkpoint not UTF": at(func(a *store.Attempt) { a.Checkpoint = "\xff" }),
	}
	if wide {
		begins["attempt number 2^53"] = at(func(a *store.Attempt) { a.Number = int(past) })
	}
	for what, bad := range badNames {
		begins["a holder with "+what] = at(func(a *store.Attempt) { a.Holder = bad })
		begins["a run id with "+what] = at(func(a *store.Attempt) { a.RunID = bad })
		begins["a slot with "+what] = at(func(a *store.Attempt) { a.Slot = bad })
	}
	for what, a := range begins {
		_, err := s.Begin(ctx, a)
		wantInvalid(t, "Begin with "+what, err, "")
	}
	ev := func(f func(e *store.Event)) store.Event {
		e := store.Event{Task: "job", Slot: "d1", Kind: store.Review, RunID: "r0", Holder: "a", Attempt: 1}
		f(&e)
		return e
	}
	events := map[string]store.Event{
		"attempt -1":        ev(func(e *store.Event) { e.Attempt = -1 }),
		"token -1":          ev(func(e *store.Event) { e.Token = -1 }),
		"an empty task":     ev(func(e *store.Event) { e.Task = "" }),
		"a note with a NUL": ev(func(e *store.Event) { e.Note = "a\x00b" }),
		"a note not UTF-8":  ev(func(e *store.Event) { e.Note = "\xff" }),
		"a note too long":   ev(func(e *store.Event) { e.Note = strings.Repeat("n", store.MaxNoteLen+1) }),
		"a busy event, -1":  ev(func(e *store.Event) { e.Kind, e.Attempt = store.Busy, -1 }),
	}
	if wide {
		events["attempt 2^53"] = ev(func(e *store.Event) { e.Attempt = int(past) })
		events["a missed event, big"] = ev(func(e *store.Event) { e.Kind, e.Attempt = store.Missed, int(past<<9) })
	}
	for what, bad := range badNames {
		events["a holder with "+what] = ev(func(e *store.Event) { e.Holder = bad })
		events["a run id with "+what] = ev(func(e *store.Event) { e.RunID = bad })
		events["a slot with "+what] = ev(func(e *store.Event) { e.Slot = bad })
	}
	lr, lazy := s.(store.LazyRecorder)
	for what, e := range events {
		wantInvalid(t, "Record of an event with "+what, s.Record(ctx, e), "")
		if lazy {
			wantInvalid(t, "RecordLazy of an event with "+what, lr.RecordLazy(ctx, e), "")
		}
	}
	begin(t, s, l, "d1", "r1", 1)
	refusedEndWrites(t, s, l)
}

// refusedEndWrites: Report and Finish (and FinishRelease) of l's running attempt r1 with a value
// no once writes, each refused with ErrInvalid; the attempt stays running and l held.
func refusedEndWrites(t *testing.T, s store.Store, l store.Lease) {
	ctx := ctxT(t)
	minus, huge := int64(-1), int64(store.MaxNumber+1)
	reports := map[string]store.Report{
		"a progress too long": {Progress: strings.Repeat("1", store.MaxProgressLen+1)},
		"a checkpoint NUL":    {Checkpoint: "a\x00"},
		"a note not UTF-8":    {Note: "\xc3"},
		"a negative count":    {Records: &minus},
		"a count past 2^53-1": {Records: &huge},
	}
	for what, r := range reports {
		wantInvalid(t, "Report of "+what, s.Report(ctx, "r1", l.Token, r), "")
	}
	outcomes := map[string]store.Outcome{
		"a note with a NUL": {State: store.Succeeded, Note: "a\x00b"},
		"a note too long":   {State: store.Succeeded, Note: strings.Repeat("n", store.MaxNoteLen+1)},
	}
	if wide {
		big, small := int(exit40), int(-exit40)
		outcomes["exit code 2^40"] = store.Outcome{State: store.Failed, ExitCode: &big}
		outcomes["exit code -2^40"] = store.Outcome{State: store.Failed, ExitCode: &small}
	}
	fr, finisher := s.(store.Finisher)
	for what, o := range outcomes {
		_, err := s.Finish(ctx, "r1", l.Token, o)
		wantInvalid(t, "Finish with "+what, err, "")
		if finisher {
			_, err := fr.FinishRelease(ctx, "r1", l, o)
			wantInvalid(t, "FinishRelease with "+what, err, "")
		}
	}
	wantLease(t, s, l) // no FinishRelease released it
}

// wantInvalid: err wraps store.ErrInvalid, is one line, and names field (when given).
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	switch {
	case !errors.Is(err, store.ErrInvalid):
		t.Errorf("%s: got %v, want store.ErrInvalid", what, err)
	case strings.Contains(err.Error(), "\n"):
		t.Errorf("%s: the message is not one line: %q", what, err.Error())
	case field != "" && !strings.Contains(err.Error(), field):
		t.Errorf("%s: the message %q does not name the %s", what, err.Error(), field)
	}
}
