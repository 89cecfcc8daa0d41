package storetest

import (
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testLastSuccess: store.ReadLastSuccessWithin finds a task's newest success among its newest
// attempts (through store.SuccessFinder, or History), says "never" for a task whose attempts it
// read to the first without a success, and "unknown" when it stopped short of older attempts.
func testLastSuccess(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	ctx := ctxT(t)
	read := func(task string, within int) store.LastSuccess {
		t.Helper()
		ls, err := store.ReadLastSuccessWithin(ctx, s, task, within)
		if err != nil {
			t.Fatalf("ReadLastSuccessWithin(%s, %d): %v", task, within, err)
		}
		return ls
	}
	if ls := read("none", 3); ls.Attempt != nil || ls.Unknown {
		t.Fatalf("a task without attempts: %+v, want never", ls)
	}
	if _, err := store.ReadLastSuccessWithin(ctx, s, "none", 0); err == nil {
		t.Fatal("within 0: no error")
	}
	l := acquire(t, s, "ls", "a", time.Minute)
	run := func(slot, runID string, st store.State) {
		t.Helper()
		begin(t, s, l, slot, runID, 1)
		pause()
		finish(t, s, runID, l.Token, st, 0)
		pause()
	}
	run("d1", "ok1", store.Succeeded)
	run("d2", "ok2", store.Succeeded)
	run("d3", "f1", store.Failed)
	if err := s.Record(ctx, store.Event{Task: "ls", Slot: "d4", Kind: store.Busy, Holder: "b", RunID: "busy"}); err != nil {
		t.Fatal(err)
	}
	pause()
	run("d5", "f2", store.Failed)
	run("d6", "f3", store.Failed)
	for _, within := range []int{4, 5, 100} {
		if ls := read("ls", within); ls.Attempt == nil || ls.Attempt.RunID != "ok2" || ls.Unknown ||
			ls.Attempt.State != store.Succeeded || ls.Attempt.EndedAt == nil {
			t.Fatalf("within %d: %+v, want the newest success ok2", within, ls)
		}
	}
	if ls := read("ls", 3); ls.Attempt != nil || !ls.Unknown || ls.Looked != 3 {
		t.Fatalf("within 3 (three failures, then successes): %+v, want unknown after 3", ls)
	}
	l2 := acquire(t, s, "ls-never", "a", time.Minute)
	for _, r := range []string{"n1", "n2", "n3"} {
		begin(t, s, l2, r, r, 1)
		pause()
		finish(t, s, r, l2.Token, store.Failed, 1)
		pause()
	}
	if ls := read("ls-never", 3); ls.Attempt != nil || ls.Unknown {
		t.Fatalf("three failures, within 3: %+v, want never", ls)
	}
	if ls := read("ls-never", 2); ls.Attempt != nil || !ls.Unknown || ls.Looked != 2 {
		t.Fatalf("three failures, within 2: %+v, want unknown after 2", ls)
	}
	// A failed attempt a person resolved as succeeded is not a succeeded attempt, as for the read
	// ReadLastSuccess replaced (History with Kind succeeded reads the attempt's state).
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "ls-never", Slot: "n3", As: store.Succeeded, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if ls := read("ls-never", 3); ls.Attempt != nil || ls.Unknown {
		t.Fatalf("three failures, the last resolved as succeeded: %+v, want never", ls)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "ls-never", Kind: store.Succeeded, Limit: 1}); err != nil || len(es) != 0 {
		t.Fatalf("the kind read of a resolved failure: %v, %v: want none", es, err)
	}
	if f, ok := s.(store.SuccessFinder); ok {
		if _, _, err := f.NewestSuccess(ctx, "ls", 0); err == nil {
			t.Fatal("NewestSuccess within 0: no error")
		}
	}
}

// historyOnly hides a store's SuccessFinder: store.ReadLastSuccessWithin reads its History.
type historyOnly struct{ store.Ledger }

// CompareLastSuccess checks store.ReadLastSuccessWithin on task against the task's whole history
// (History{Task}) and the read it replaced (History{Task, Kind: succeeded, Limit: 1}), for several
// within, through l's SuccessFinder when it has one and through History: the newest success when
// it is among the newest within attempts (the same attempt the old read gives), "never" when the
// task has at most within attempts and none succeeded, "not known" otherwise (Looked = within:
// the task's history is seeded without events). For the SQL stores' seeded, randomised histories.
func CompareLastSuccess(tb testing.TB, l store.Ledger, task string) {
	tb.Helper()
	ctx := tb.Context()
	all, err := l.History(ctx, store.HistoryQuery{Task: task})
	if err != nil {
		tb.Fatal(err)
	}
	var attempts []store.Attempt
	for _, e := range all {
		if e.State.IsAttempt() {
			attempts = append(attempts, e.Attempt)
		}
	}
	old, err := l.History(ctx, store.HistoryQuery{Task: task, Kind: store.Succeeded, Limit: 1})
	if err != nil {
		tb.Fatal(err)
	}
	n := len(attempts)
	for _, within := range []int{1, 2, 3, n/2 + 1, n - 1, n, n + 1, store.SuccessScan} {
		if within < 1 {
			continue
		}
		newest := -1 // the newest success among the newest within attempts
		for i := 0; i < n && i < within; i++ {
			if attempts[i].State == store.Succeeded {
				newest = i
				break
			}
		}
		for _, r := range []store.Ledger{l, historyOnly{l}} {
			_, finder := r.(store.SuccessFinder)
			ls, err := store.ReadLastSuccessWithin(ctx, r, task, within)
			if err != nil {
				tb.Fatalf("%s within %d (finder %v): %v", task, within, finder, err)
			}
			switch {
			case newest >= 0:
				if ls.Attempt == nil || ls.Unknown || ls.Attempt.RunID != attempts[newest].RunID ||
					len(old) != 1 || old[0].RunID != ls.Attempt.RunID || !ls.Attempt.StartedAt.Equal(old[0].StartedAt) {
					tb.Fatalf("%s within %d (finder %v): %+v, want %s, as the kind read (%v)", task, within, finder, ls, attempts[newest].RunID, old)
				}
			case n > within:
				if ls.Attempt != nil || !ls.Unknown || ls.Looked != within {
					tb.Fatalf("%s within %d of %d attempts (finder %v): %+v, want not known after %d", task, within, n, finder, ls, within)
				}
			default:
				if ls.Attempt != nil || ls.Unknown || len(old) != 0 {
					tb.Fatalf("%s within %d of %d attempts (finder %v): %+v, want never (the kind read: %v)", task, within, n, finder, ls, old)
				}
			}
		}
	}
}
