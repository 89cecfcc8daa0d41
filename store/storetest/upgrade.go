package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// WaitingLedger writes, through s, two slots waiting for review (job/a unknown, job/c failed
// with a review event about it) among slots that do not wait, and returns what Waiting lists.
func WaitingLedger(tb testing.TB, s store.Store) []store.SlotState {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	step := func(slot, run string, st store.State, review bool) {
		tb.Helper()
		if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: slot, RunID: run, Number: 1, Holder: "h", Token: l.Token}); err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: st}); err != nil {
			tb.Fatal(err)
		}
		if review {
			if err := s.Record(ctx, store.Event{Task: "job", Slot: slot, Kind: store.Review, Attempt: 1}); err != nil {
				tb.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	step("a", "ra", store.Unknown, false)
	step("b", "rb", store.Succeeded, false)
	step("c", "rc", store.Failed, true)
	step("d", "rd", store.Failed, false)
	w, err := s.Waiting(ctx)
	if err != nil || len(w) != 2 || w[0].Slot != "a" || w[1].Slot != "c" {
		tb.Fatalf("Waiting = %+v, %v; want job/a then job/c", w, err)
	}
	return w
}

// CheckUpgraded checks that s, opened on the ledger WaitingLedger wrote and then taken back to an
// older schema, lists the same slots waiting and its history.
func CheckUpgraded(tb testing.TB, s store.Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := s.Waiting(ctx)
	if err != nil || len(w) != 2 || w[0].Slot != "a" || w[1].Slot != "c" {
		tb.Fatalf("Waiting after the upgrade = %+v, %v; want job/a then job/c", w, err)
	}
	if h, err := s.History(ctx, store.HistoryQuery{Task: "job", Limit: 2}); err != nil || len(h) != 2 {
		tb.Fatalf("history after the upgrade: %d entries, %v", len(h), err)
	}
}
