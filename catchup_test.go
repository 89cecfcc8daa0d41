package once_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

// clock is an injectable clock: tests move it to simulate a machine that was down.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestCatchUpAfterDowntime(t *testing.T) {
	s, _ := newStore(t)
	spec, err := slot.New("day", "", "", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 20, 2, 0, 0, 0, time.UTC)}
	o := once.Options{Store: s, Task: "nightly", TTL: time.Second, Now: clk.now}
	var ran []string
	fail := map[string]bool{}
	work := func(_ context.Context, r *once.Run) error {
		ran = append(ran, r.Slot)
		if fail[r.Slot] {
			return errors.New("boom")
		}
		return nil
	}
	catchUp := func() []once.Result {
		t.Helper()
		ran = nil
		rs, err := once.CatchUp(context.Background(), o, spec, 7*24*time.Hour, 100, work)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	// The job ran on the 20th; the machine is down until the 25th at 02:00.
	catchUp()
	if strings.Join(ran, ",") != "2026-11-14,2026-11-15,2026-11-16,2026-11-17,2026-11-18,2026-11-19,2026-11-20" {
		t.Fatalf("first run (empty ledger, 7d window) ran %v", ran)
	}
	clk.t = time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)
	fail["2026-11-22"] = true
	rs := catchUp()
	if got := strings.Join(ran, ","); got != "2026-11-21,2026-11-22" {
		t.Fatalf("after downtime ran %s, want 21,22 then stop at the failure", got)
	}
	if last := rs[len(rs)-1]; last.Slot != "2026-11-22" || last.Decision != once.Ran || last.Attempt.State != store.Failed {
		t.Fatalf("last result %+v", last)
	}
	// The failed slot is retried first next time, not marked done; then the rest, in order.
	delete(fail, "2026-11-22")
	catchUp()
	if got := strings.Join(ran, ","); got != "2026-11-22,2026-11-23,2026-11-24,2026-11-25" {
		t.Fatalf("second invocation ran %s", got)
	}
	st, _ := s.Slot(context.Background(), "nightly", "2026-11-22")
	if st.Last.Number != 2 || st.Last.State != store.Succeeded {
		t.Fatalf("slot 22: %+v", st.Last)
	}
	// Nothing left: a third invocation runs nothing and skips the current slot.
	rs = catchUp()
	if len(ran) != 0 || len(rs) != 1 || rs[0].Decision != once.Skipped || rs[0].Slot != "2026-11-25" {
		t.Fatalf("third invocation ran %v, results %+v", ran, rs)
	}
	// Only the current slot leaves a skipped event: done slots of the window stay quiet.
	h, _ := s.History(context.Background(), store.HistoryQuery{Task: "nightly", Limit: 0})
	skips := 0
	for _, e := range h {
		if e.State == store.Skipped {
			skips++
		}
	}
	if skips != 1 {
		t.Fatalf("%d skipped events, want 1", skips)
	}
	// One lease for the whole sequence: every attempt of one catch-up shares a token.
	tok := map[int64]int{}
	for _, e := range h {
		if e.State == store.Succeeded && e.Slot >= "2026-11-22" {
			tok[e.Token]++
		}
	}
	if len(tok) != 1 {
		t.Fatalf("tokens of the last catch-up: %v, want one", tok)
	}
}

func TestCatchUpStopsAtUnknownAndRefusesTooMany(t *testing.T) {
	s, _ := newStore(t)
	spec, _ := slot.New("hour", "", "", "UTC")
	clk := &clock{t: time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)}
	o := once.Options{Store: s, Task: "hourly", TTL: time.Second, Now: clk.now}
	ctx := context.Background()
	// An attempt for 08:00 whose holder vanished: forge it with a lease that is then taken over.
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "hourly", Holder: "ghost", RunID: "r-ghost", TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "hourly", Slot: "2026-11-29T08", RunID: "r-ghost", Number: 1, Holder: "ghost", Token: l.Token, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	var ran []string
	work := func(_ context.Context, r *once.Run) error { ran = append(ran, r.Slot); return nil }
	rs, err := once.CatchUp(ctx, o, spec, 3*time.Hour, 100, work)
	if err != nil {
		t.Fatal(err)
	}
	last := rs[len(rs)-1]
	if strings.Join(ran, ",") != "" || last.Decision != once.Review || last.Slot != "2026-11-29T08" || len(rs[0].Abandoned) != 1 {
		t.Fatalf("ran %v, results %+v", ran, rs)
	}
	var we *once.WindowError
	if _, err := once.CatchUp(ctx, o, spec, 300*time.Hour, 100, work); !errors.Is(err, once.ErrInvalid) || !errors.As(err, &we) || we.Spans || we.Due != 299 || we.Max != 100 {
		t.Fatalf("300 hourly slots with max 100: %v", err)
	}
	if _, err := once.CatchUp(ctx, o, spec, 20000*time.Hour, 100, work); !errors.As(err, &we) || !we.Spans {
		t.Fatalf("20,000 hourly slots: %v", err)
	}
	nospec, _ := slot.New("", "", "b-1", "")
	if _, err := once.CatchUp(ctx, o, nospec, time.Hour, 100, work); !errors.Is(err, once.ErrInvalid) {
		t.Fatalf("--slot with catch-up: %v", err)
	}
	o.OnUnknown = once.PolicySkip
	ran = nil
	if _, err := once.CatchUp(ctx, o, spec, 3*time.Hour, 100, work); err != nil || strings.Join(ran, ",") != "2026-11-29T09,2026-11-29T10" {
		t.Fatalf("skip policy ran %v, %v", ran, err)
	}
}
