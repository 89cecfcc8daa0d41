package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// WaitingLedger writes, through s, two slots waiting for review (job/a unknown, job/c failed
// with a review event about it) among slots that do not wait, and returns what Waiting lists.
func WaitingLedger(tb testing.TB, s store.Store) []store.SlotState {
	tb.Helper()
	ctx, l, cancel := leased(tb, s, "job")
	defer cancel()
	step := func(slot, run string, st store.State, review bool) {
		tb.Helper()
		firstAttempt(ctx, tb, s, l, slot, run, st)
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

// leased takes task's lease through s for a minute, and a context for as long.
func leased(tb testing.TB, s store.Store, task string) (context.Context, store.Lease, context.CancelFunc) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	return ctx, l, cancel
}

// firstAttempt records, through s under l, attempt 1 of l's task and slot as run, ended as st.
func firstAttempt(ctx context.Context, tb testing.TB, s store.Store, l store.Lease, slot, run string, st store.State) {
	tb.Helper()
	if _, err := s.Begin(ctx, store.Attempt{Task: l.Task, Slot: slot, RunID: run, Number: 1, Holder: l.Holder, Token: l.Token}); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: st}); err != nil {
		tb.Fatal(err)
	}
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

// EventsLedger writes, through s, events of every kind a schema before missed events knew
// (skipped, busy, review) about task "ev", among attempts, and returns its history: give it to
// CheckEventsUpgraded after taking the store back to that schema and opening it again.
func EventsLedger(tb testing.TB, s store.Store) []store.Entry {
	tb.Helper()
	ctx, l, cancel := leased(tb, s, "ev")
	defer cancel()
	for i, st := range []store.State{store.Succeeded, store.Failed} {
		run := fmt.Sprintf("ev%d", i)
		firstAttempt(ctx, tb, s, l, "d"+run, run, st)
	}
	for _, e := range []store.Event{
		{Task: "ev", Slot: "dev0", Kind: store.Skipped, RunID: "s1", Holder: "h", Token: l.Token, Attempt: 1, Note: "already succeeded"},
		{Task: "ev", Slot: "dev1", Kind: store.Busy, RunID: "b1", Holder: "other", Note: "held by h"},
		{Task: "ev", Slot: "dev1", Kind: store.Review, RunID: "v1", Holder: "h", Token: l.Token, Attempt: 1, Note: "attempts used up"},
	} {
		if err := s.Record(ctx, e); err != nil {
			tb.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	h, err := s.History(ctx, store.HistoryQuery{Task: "ev"})
	if err != nil || len(h) != 5 {
		tb.Fatalf("history of the events ledger: %d entries, %v", len(h), err)
	}
	return h
}

// CheckEventsUpgraded checks that s, opened on the ledger EventsLedger wrote (whose history was
// before) and then taken back to a schema without missed events, kept every entry as it was, its
// cursor included, and the slot waiting for review (the only one: give it a ledger of its own);
// and that it now keeps a missed event, lists it by Kind, and decides as before.
func CheckEventsUpgraded(tb testing.TB, s store.Store, before []store.Entry) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	after, err := s.History(ctx, store.HistoryQuery{Task: "ev"})
	if err != nil || !reflect.DeepEqual(after, before) {
		tb.Fatalf("history after the upgrade (%v):\n got %+v\nwant %+v", err, after, before)
	}
	slot0, err := s.Slot(ctx, "ev", "dev1")
	if err != nil || !slot0.Waiting || slot0.Failures != 1 {
		tb.Fatalf("slot ev/dev1 after the upgrade: %+v, %v; want it waiting for review", slot0, err)
	}
	waiting := func() []store.SlotState {
		tb.Helper()
		w, err := s.Waiting(ctx)
		if err != nil || len(w) != 1 || w[0].Task != "ev" || w[0].Slot != "dev1" {
			tb.Fatalf("Waiting after the upgrade = %+v, %v; want ev/dev1", w, err)
		}
		return w
	}
	waiting()
	if err := s.Record(ctx, store.Event{Task: "ev", Slot: "dev1", Kind: store.Missed, Holder: "node-1", Note: "no node ran it"}); err != nil {
		tb.Fatalf("Record of a missed event after the upgrade: %v", err)
	}
	missed, err := s.History(ctx, store.HistoryQuery{Kind: store.Missed})
	if err != nil || len(missed) != 1 || missed[0].State != store.Missed || missed[0].Holder != "node-1" || missed[0].Slot != "dev1" {
		tb.Fatalf("missed events after the upgrade: %+v, %v", missed, err)
	}
	if st, err := s.Slot(ctx, "ev", "dev1"); err != nil || !reflect.DeepEqual(st, slot0) {
		tb.Fatalf("a missed event changed slot ev/dev1: %+v, %v; was %+v", st, err, slot0)
	}
	waiting()
	// The waiting table is still kept: a resolve ends the wait.
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "ev", Slot: "dev1", As: store.Failed, By: "p"}); err != nil {
		tb.Fatal(err)
	}
	if w, err := s.Waiting(ctx); err != nil || len(w) != 0 {
		tb.Fatalf("Waiting after a resolve = %+v, %v; want none", w, err)
	}
	for _, k := range []store.State{store.Skipped, store.Busy, store.Review} {
		if es, err := s.History(ctx, store.HistoryQuery{Task: "ev", Kind: k}); err != nil || len(es) != 1 || es[0].State != k {
			tb.Fatalf("%s events after the upgrade: %+v, %v", k, es, err)
		}
	}
}
