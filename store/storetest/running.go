package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The running attempts case (store.RunningLister): what once status lists as RUNNING. Run leaves
// it out when the store does not implement RunningLister.

// running lists the running attempts through l with limit, checking the list against the
// contract, and returns them as "task/slot#n" with More.
func running(t *testing.T, s store.Store, limit int) ([]string, bool) {
	t.Helper()
	l, err := s.(store.RunningLister).RunningAttempts(ctxT(t), limit)
	if err != nil {
		t.Fatalf("RunningAttempts(%d): %v", limit, err)
	}
	if len(l.Attempts) > limit {
		t.Fatalf("RunningAttempts(%d) returned %d attempts", limit, len(l.Attempts))
	}
	if len(l.Unlisted) > 0 {
		t.Fatalf("RunningAttempts(%d): unlisted tasks %q in a store this once wrote", limit, l.Unlisted)
	}
	var out []string
	for _, a := range l.Attempts {
		if a.State != store.Running || a.EndedAt != nil || a.StartedAt.IsZero() {
			t.Fatalf("RunningAttempts(%d) listed %+v: not running", limit, a)
		}
		// As Slot's Last shows it.
		if last := slotState(t, s, a.Task, a.Slot).Last; last == nil || last.RunID != a.RunID || last.Number != a.Number ||
			last.Token != a.Token || last.Holder != a.Holder || !last.StartedAt.Equal(a.StartedAt) {
			t.Fatalf("RunningAttempts(%d) listed %+v; Slot's last attempt is %+v", limit, a, last)
		}
		k := fmt.Sprintf("%s/%s#%d", a.Task, a.Slot, a.Number)
		if slices.Contains(out, k) {
			t.Fatalf("RunningAttempts(%d) listed %s twice", limit, k)
		}
		out = append(out, k)
	}
	return out, l.More
}

// testRunningList: the attempts running in every task are listed, to another client too, with
// More when the limit cuts the list; an attempt that ended (finished, abandoned) is not; a slot
// with no attempt running is not, whatever its history.
func testRunningList(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	if _, err := o.(store.RunningLister).RunningAttempts(ctxT(t), 0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("RunningAttempts(0): %v; want ErrInvalid", err)
	}
	if got, more := running(t, o, store.MaxRunningList); len(got) != 0 || more {
		t.Fatalf("an empty store: running %q, more %v", got, more)
	}
	// A task known from an event alone (a daemon's missed slot of a job that never ran) was never
	// granted a lease: it has no attempt, so nothing of it is unlisted (running checks).
	if err := s.Record(ctxT(t), store.Event{Task: "missed-only", Slot: "m1", Kind: store.Missed, RunID: "m", Holder: "node"}); err != nil {
		t.Fatal(err)
	}
	if got, more := running(t, o, store.MaxRunningList); len(got) != 0 || more {
		t.Fatalf("a store with an event alone: running %q, more %v", got, more)
	}
	// a/b and a-b: their byte order and their escaped forms' differ ('/' is %2F in a key).
	la := acquire(t, s, "a/b", "h1", time.Minute)
	begin(t, s, la, "s1", "ra1", 1)
	finish(t, s, "ra1", la.Token, store.Failed, 1)
	begin(t, s, la, "s1", "ra2", 2) // the slot's second attempt runs
	begin(t, s, la, "s2", "ra3", 1)
	lb := acquire(t, s, "a-b", "h2", time.Minute)
	begin(t, s, lb, "", "rb1", 1)
	lc := acquire(t, s, "done", "h3", time.Minute)
	begin(t, s, lc, "s1", "rc1", 1)
	finish(t, s, "rc1", lc.Token, store.Succeeded, 0)
	want := []string{"a/b/s1#2", "a/b/s2#1", "a-b/#1"}
	got, more := running(t, o, store.MaxRunningList)
	if more || !sameSet(got, want) {
		t.Fatalf("running %q, more %v; want %q, more false", got, more, want)
	}
	if got, more := running(t, o, len(want)); more || !sameSet(got, want) {
		t.Fatalf("limit %d: running %q, more %v; want %q, more false", len(want), got, more, want)
	}
	for limit := 1; limit < len(want); limit++ {
		got, more := running(t, o, limit)
		if !more || len(got) != limit {
			t.Fatalf("limit %d: running %q, more %v; want %d of %q, more true", limit, got, more, limit, want)
		}
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Fatalf("limit %d: running %q: %s is not running", limit, got, g)
			}
		}
	}
	// An attempt that ends leaves the list: finished, or marked unknown by the next holder.
	finish(t, s, "rb1", lb.Token, store.Succeeded, 0)
	if err := s.Release(ctxT(t), la); err != nil {
		t.Fatal(err)
	}
	next := acquire(t, s, "a/b", "h4", time.Minute)
	if ab, err := s.Abandon(ctxT(t), "a/b", next.Token); err != nil || len(ab) != 2 {
		t.Fatalf("Abandon: %v, %v; want the two attempts of a/b", ab, err)
	}
	if got, more := running(t, o, store.MaxRunningList); len(got) != 0 || more {
		t.Fatalf("after Finish and Abandon: running %q, more %v; want none", got, more)
	}
	begin(t, s, next, "s2", "ra4", 2)
	if got, _ := running(t, o, store.MaxRunningList); !slices.Equal(got, []string{"a/b/s2#2"}) {
		t.Fatalf("running %q; want a/b/s2#2", got)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
