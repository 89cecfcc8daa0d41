package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testBeginAfterResolvedDone: a slot whose last attempt a person resolved as succeeded is done,
// and Begin refuses a new attempt there (ErrConflict) even under the task's current token: the
// resolve lands between a run's read of the slot and its Begin (the command's preparation), and
// the run must not run a slot just marked done. A resolve as failed leaves the slot open, and the
// slot "" of a task without slots is run by every run whatever was decided.
func testBeginAfterResolvedDone(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	ctx := ctxT(t)
	l := acquire(t, s, "job", "a", time.Minute)
	begin(t, s, l, "done", "r1", 1)
	finish(t, s, "r1", l.Token, store.Failed, 1)
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "done", As: store.Succeeded, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 0} {
		_, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "done", RunID: fmt.Sprintf("r2-%d", n), Number: n, Holder: "a", Token: l.Token})
		wantErr(t, fmt.Sprintf("begin (number %d) after a resolve as succeeded", n), err, store.ErrConflict)
	}
	if st := slotState(t, s, "job", "done"); st.Last == nil || st.Last.Number != 1 || st.Last.Resolution == nil {
		t.Fatalf("the refused begin changed the slot: %+v", st.Last)
	}
	begin(t, s, l, "open", "o1", 1)
	finish(t, s, "o1", l.Token, store.Failed, 1)
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "open", As: store.Failed, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, l, "open", "o2", 2)
	// The slot "" (a task without slots) has no memory: every run runs, after any decision too.
	begin(t, s, l, "", "e1", 1)
	finish(t, s, "e1", l.Token, store.Failed, 1)
	if _, err := s.Resolve(ctx, store.ResolveRequest{Task: "job", Slot: "", As: store.Succeeded, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, l, "", "e2", 2)
}

// testBeginResolveRace: a run's Begin and a person's resolve as succeeded race on a slot whose last
// attempt failed; never both: either the resolve is refused (a new attempt runs) or the begin is.
func testBeginResolveRace(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	c := [2]store.Store{client(t, dsn), client(t, dsn)}
	ctx := ctxT(t)
	l := acquire(t, c[0], "job", "a", time.Minute)
	const rounds = 15
	begun, resolved := 0, 0
	for r := range rounds {
		slot := fmt.Sprintf("s%d", r)
		begin(t, c[0], l, slot, slot+"-1", 1)
		finish(t, c[0], slot+"-1", l.Token, store.Failed, 1)
		var berr, rerr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, berr = c[0].Begin(ctx, store.Attempt{Task: "job", Slot: slot, RunID: slot + "-2", Number: 2, Holder: "a", Token: l.Token})
		}()
		go func() {
			defer wg.Done()
			<-start
			_, rerr = c[1].Resolve(ctx, store.ResolveRequest{Task: "job", Slot: slot, As: store.Succeeded, By: "alice"})
		}()
		close(start)
		wg.Wait()
		switch {
		case berr == nil && rerr == nil:
			t.Fatalf("round %d: the resolve as succeeded and a new attempt both went through: the slot marked done runs", r)
		case berr == nil && errors.Is(rerr, store.ErrConflict):
			begun++
		case rerr == nil && errors.Is(berr, store.ErrConflict):
			resolved++
		default:
			t.Fatalf("round %d: begin %v, resolve %v: want one of them ErrConflict", r, berr, rerr)
		}
	}
	t.Logf("%d rounds: the attempt began first in %d, the resolve in %d", rounds, begun, resolved)
}
