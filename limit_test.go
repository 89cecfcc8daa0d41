package once_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// Options.Limit 2, with the local lock directory set: two calls without a slot run at once, each
// recorded under its own run-RUNID slot with its own token; a third is busy.
func TestLimitTwoAtOnce(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", Limit: 2, LockDir: filepath.Join(t.TempDir(), "locks"), TTL: 10 * time.Second}
	inA, release := make(chan *once.Run, 1), make(chan struct{})
	aDone := make(chan once.Result, 1)
	go func() {
		r, err := once.Do(context.Background(), o, func(ctx context.Context, run *once.Run) error {
			inA <- run
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		aDone <- r
	}()
	ra := <-inA
	var third once.Result
	rb := do(t, o, func(ctx context.Context, run *once.Run) error {
		if run.Token <= ra.Token || run.Slot == ra.Slot || !strings.HasPrefix(run.Slot, "run-"+run.RunID) {
			t.Errorf("second run: token %d slot %q (first: %d %q)", run.Token, run.Slot, ra.Token, ra.Slot)
		}
		third = do(t, o, func(context.Context, *once.Run) error { t.Error("a third ran"); return nil })
		return nil
	})
	close(release)
	if r := <-aDone; r.Decision != once.Ran || rb.Decision != once.Ran || third.Decision != once.Busy {
		t.Fatalf("decisions %s, %s, third %s; want ran, ran, busy", r.Decision, rb.Decision, third.Decision)
	}
}

func TestLimitInvalid(t *testing.T) {
	s, _ := newStore(t)
	for _, o := range []once.Options{{Limit: -1}, {Limit: 1001}, {Limit: 2, Replace: true}} {
		o.Store, o.Task = s, "t"
		if _, err := once.Do(context.Background(), o, func(context.Context, *once.Run) error { return nil }); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("Limit %d Replace %v: %v, want ErrInvalid", o.Limit, o.Replace, err)
		}
	}
}

// Options.Limit 2 and one slot: while one holder runs the slot, a second holder of the other seat
// is busy (the slot is running under a live seat), records no review, and runs nothing.
func TestLimitSameSlotBusy(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", Slot: "s1", Limit: 2, TTL: 10 * time.Second}
	inA, release := make(chan *once.Run, 1), make(chan struct{})
	aDone := make(chan once.Result, 1)
	go func() {
		oa := o
		oa.Holder = "a"
		r, err := once.Do(context.Background(), oa, func(ctx context.Context, run *once.Run) error {
			inA <- run
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		aDone <- r
	}()
	<-inA
	ob := o
	ob.Holder = "b"
	rb := do(t, ob, func(context.Context, *once.Run) error { t.Error("b ran the slot a runs"); return nil })
	close(release)
	ra := <-aDone
	if ra.Decision != once.Ran || rb.Decision != once.Busy || rb.Holder == nil || rb.Holder.Holder != "a" ||
		!strings.Contains(rb.Reason, "holds another seat") {
		t.Fatalf("decisions %s, %s (%s, holder %+v); want ran, busy naming a", ra.Decision, rb.Decision, rb.Reason, rb.Holder)
	}
	es, err := s.History(context.Background(), store.HistoryQuery{Task: "t"})
	kinds := map[store.State]int{}
	for _, e := range es {
		kinds[e.State]++
	}
	if err != nil || kinds[store.Busy] != 1 || kinds[store.Review] != 0 || kinds[store.Succeeded] != 1 {
		t.Fatalf("history %v (%v): want one succeeded attempt, one busy event, no review", kinds, err)
	}
}

// Options.Limit 2, one slot, two holders that both read the slot untried before either records
// its attempt (Prepare holds each until both got there): one runs it, the other is busy, not an
// error (the ledger's conflict on Begin).
func TestLimitSameSlotRace(t *testing.T) {
	s, _ := newStore(t)
	var both sync.WaitGroup
	both.Add(2)
	o := once.Options{Store: s, Task: "t", Slot: "s1", Limit: 2, TTL: 10 * time.Second,
		Prepare: func(context.Context, *once.Run) error { both.Done(); both.Wait(); return nil }}
	rs := make([]once.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, h := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oi := o
			oi.Holder = h
			rs[i], errs[i] = once.Do(context.Background(), oi, func(context.Context, *once.Run) error { return nil })
		}()
	}
	wg.Wait()
	ran, busy := 0, 0
	for i, r := range rs {
		if errs[i] != nil {
			t.Fatalf("holder %d: %v", i, errs[i])
		}
		switch {
		case r.Decision == once.Ran:
			ran++
		case r.Decision == once.Busy && strings.Contains(r.Reason, "began under another seat"):
			busy++
		}
	}
	if ran != 1 || busy != 1 {
		t.Fatalf("results %+v; want one ran and one busy", rs)
	}
}
