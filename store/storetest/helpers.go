package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// Helpers shared by the cases: a client per simulated process, calls that fail the test on an
// unexpected error, and comparisons with the suite's tolerances.

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// client opens a separate client on dsn, closed when the test ends.
func client(t *testing.T, dsn string) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("store.Open(%s): %v", store.Redact(dsn), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func acquire(t *testing.T, s store.Store, task, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + holder, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", task, holder, err)
	}
	if l.Task != task || l.Holder != holder || l.RunID != "run-"+holder || l.Token <= 0 {
		t.Fatalf("Acquire(%s by %s) returned %+v", task, holder, l)
	}
	checkTTL(t, l, ttl)
	return l
}

// checkTTL: an acquire's expires - acquired is the TTL, possibly rounded up to the store's
// granularity, or at most store.ShortGrant less (and a millisecond, for stores that keep times in
// milliseconds).
func checkTTL(t *testing.T, l store.Lease, ttl time.Duration) {
	t.Helper()
	d := l.Expires.Sub(l.Acquired)
	if d < ttl-store.ShortGrant-time.Millisecond || d > ttl+granularity+timeSlack {
		t.Errorf("lease %s: expires-acquired = %s, want %s (rounded up by at most %s, or at most %s less)", l.Task, d, ttl, granularity, store.ShortGrant)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func wantBusy(t *testing.T, what string, err error, holder store.Lease) {
	t.Helper()
	var be *store.BusyError
	if !errors.As(err, &be) || !errors.Is(err, store.ErrBusy) {
		t.Fatalf("%s: got %v, want *store.BusyError", what, err)
	}
	if be.Lease.Holder != holder.Holder || be.Lease.Token != holder.Token || be.Lease.RunID != holder.RunID {
		t.Fatalf("%s: BusyError names %+v, want holder %q token %d run %q", what, be.Lease, holder.Holder, holder.Token, holder.RunID)
	}
	if err.Error() == "" || strings.Contains(err.Error(), "\n") {
		t.Errorf("%s: busy error message %q is not one line", what, err.Error())
	}
}

// leaseOf returns task's lease as Leases lists it, or nil.
func leaseOf(t *testing.T, s store.Store, task string) *store.Lease {
	t.Helper()
	ls, err := s.Leases(ctxT(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	var found *store.Lease
	for i := range ls {
		if ls[i].Task == task {
			if found != nil {
				t.Fatalf("Leases lists task %s twice: %+v", task, ls)
			}
			found = &ls[i]
		}
	}
	return found
}

func sameLease(a, b store.Lease) bool {
	return a.Task == b.Task && a.Holder == b.Holder && a.RunID == b.RunID && a.Token == b.Token &&
		absDur(a.Acquired.Sub(b.Acquired)) <= timeSlack && absDur(a.Expires.Sub(b.Expires)) <= timeSlack
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func wantLease(t *testing.T, s store.Store, want store.Lease) {
	t.Helper()
	got := leaseOf(t, s, want.Task)
	if got == nil {
		t.Fatalf("Leases does not list %s, want %+v", want.Task, want)
	}
	if !sameLease(*got, want) {
		t.Fatalf("Leases lists %+v, want %+v", *got, want)
	}
}

// --- lease tests ---

func begin(t *testing.T, s store.Store, l store.Lease, slot, runID string, n int) store.Attempt {
	t.Helper()
	a, err := s.Begin(ctxT(t), store.Attempt{Task: l.Task, Slot: slot, RunID: runID, Number: n, Holder: l.Holder, Token: l.Token,
		Limit: l.Limit})
	if err != nil {
		t.Fatalf("Begin(%s/%s #%d run %s): %v", l.Task, slot, n, runID, err)
	}
	if a.State != store.Running || a.Number != n || a.RunID != runID || a.Task != l.Task || a.Slot != slot ||
		a.Token != l.Token || a.StartedAt.IsZero() || a.EndedAt != nil || a.Limit != l.Limit {
		t.Fatalf("Begin returned %+v", a)
	}
	return a
}

func finish(t *testing.T, s store.Store, runID string, token int64, st store.State, code int) store.Attempt {
	t.Helper()
	a, err := s.Finish(ctxT(t), runID, token, store.Outcome{State: st, ExitCode: &code})
	if err != nil {
		t.Fatalf("Finish(%s, %s): %v", runID, st, err)
	}
	if a.State != st || a.EndedAt == nil || a.ExitCode == nil || *a.ExitCode != code || a.RunID != runID {
		t.Fatalf("Finish returned %+v", a)
	}
	return a
}

func slotState(t *testing.T, s store.Store, task, slot string) store.SlotState {
	t.Helper()
	st, err := s.Slot(ctxT(t), task, slot)
	if err != nil {
		t.Fatalf("Slot(%s, %s): %v", task, slot, err)
	}
	return st
}

func history(t *testing.T, s store.Store, q store.HistoryQuery) []store.Entry {
	t.Helper()
	es, err := s.History(ctxT(t), q)
	if err != nil {
		t.Fatalf("History(%+v): %v", q, err)
	}
	return es
}

func entryRuns(es []store.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s:%s:%s", e.Task, e.Slot, e.State, e.RunID)
	}
	return b.String()
}

func toEntries(as []store.Attempt) []store.Entry {
	es := make([]store.Entry, len(as))
	for i, a := range as {
		es[i] = store.Entry{Attempt: a}
	}
	return es
}

// pause separates history timestamps for backends with coarse clocks.
func pause() { time.Sleep(5 * time.Millisecond) }
