package once_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
	_ "github.com/once-run/once/store/sqlite"
)

func newStore(t *testing.T) (store.Store, string) {
	t.Helper()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "once.db")
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}

func do(t *testing.T, o once.Options, work func(context.Context, *once.Run) error) once.Result {
	t.Helper()
	res, err := once.Do(context.Background(), o, work)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return res
}

func ok(context.Context, *once.Run) error { return nil }

func TestSlotPolicy(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", Slot: "2026-11-29", TTL: 10 * time.Second}
	boom := errors.New("boom")
	var runs []*once.Run
	record := func(err error) func(context.Context, *once.Run) error {
		return func(_ context.Context, r *once.Run) error { runs = append(runs, r); return err }
	}
	if r := do(t, o, record(boom)); r.Decision != once.Ran || r.Attempt.State != store.Failed || r.Attempt.Note != "boom" {
		t.Fatalf("first: %+v %+v", r, r.Attempt)
	}
	if r := do(t, o, record(nil)); r.Decision != once.Ran || r.Attempt.State != store.Succeeded {
		t.Fatalf("second: %+v", r)
	}
	if r := do(t, o, record(nil)); r.Decision != once.Skipped {
		t.Fatalf("third: %+v", r)
	}
	if len(runs) != 2 || runs[1].Attempt != 2 || runs[1].Previous != store.Failed || runs[1].IdempotencyKey != "t/2026-11-29" {
		t.Fatalf("runs: %+v", runs)
	}
	if runs[0].Token >= runs[1].Token {
		t.Errorf("tokens not increasing: %d, %d", runs[0].Token, runs[1].Token)
	}
}

func TestNoSlotAlwaysRuns(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", TTL: 10 * time.Second}
	var keys []string
	for i := 0; i < 3; i++ {
		do(t, o, func(_ context.Context, r *once.Run) error { keys = append(keys, r.IdempotencyKey); return nil })
	}
	if len(keys) != 3 || keys[0] == keys[1] {
		t.Fatalf("keys %v: want 3 runs with distinct run-id keys", keys)
	}
}

func TestMaxAttempts(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", Slot: "s", TTL: 10 * time.Second, MaxAttempts: 2}
	fail := func(context.Context, *once.Run) error { return errors.New("no") }
	do(t, o, fail)
	do(t, o, fail)
	r := do(t, o, ok)
	if r.Decision != once.Review || !strings.Contains(r.Reason, "--max-attempts") {
		t.Fatalf("%+v", r)
	}
	ws, _ := s.Waiting(context.Background())
	if len(ws) != 1 || ws[0].Slot != "s" {
		t.Fatalf("waiting: %+v", ws)
	}
	if _, err := s.Resolve(context.Background(), store.ResolveRequest{Task: "t", Slot: "s", As: store.Failed, By: "me"}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, o, ok); r.Decision != once.Ran || r.Attempt.Number != 3 {
		t.Fatalf("after resolve: %+v", r)
	}
}

// vanish leaves a running attempt behind whose lease expires, as a kill -9 would.
func vanish(t *testing.T, s store.Store, task, slot string) {
	t.Helper()
	ctx := context.Background()
	g, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "ghost", RunID: "ghost-run", TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: "ghost-run", Number: 1, Holder: "ghost", Token: g.Token, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
}

func TestUnknownPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy once.Policy
		want   once.Decision
	}{{once.PolicyReview, once.Review}, {once.PolicySkip, once.Skipped}, {once.PolicyRerun, once.Ran}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			s, _ := newStore(t)
			vanish(t, s, "t", "s")
			var prev store.State
			r := do(t, once.Options{Store: s, Task: "t", Slot: "s", TTL: 10 * time.Second, OnUnknown: tc.policy},
				func(_ context.Context, r *once.Run) error { prev = r.Previous; return nil })
			if r.Decision != tc.want {
				t.Fatalf("decision %s, want %s (%s)", r.Decision, tc.want, r.Reason)
			}
			if tc.want == once.Ran && (prev != store.Unknown || r.Attempt.Number != 2) {
				t.Errorf("rerun: previous %q attempt %d", prev, r.Attempt.Number)
			}
			h, _ := s.History(context.Background(), store.HistoryQuery{Task: "t"})
			if h[len(h)-1].State != store.Unknown {
				t.Errorf("the ghost's attempt is %s, want unknown", h[len(h)-1].State)
			}
		})
	}
}

// holdElsewhere runs o's task on a second connection to the store (holder A) until the returned
// release is called; release waits for that run to end.
func holdElsewhere(t *testing.T, dsn string, o once.Options) (release func()) {
	t.Helper()
	other, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	o.Store, o.Holder, o.TTL = other, "A", 2*time.Second
	go func() {
		defer close(done)
		once.Do(context.Background(), o, func(context.Context, *once.Run) error {
			close(started)
			<-stop
			return nil
		})
	}()
	<-started
	return func() {
		close(stop)
		<-done
		other.Close()
	}
}

func TestBusyWhileHeldElsewhere(t *testing.T) {
	s, dsn := newStore(t)
	release := holdElsewhere(t, dsn, once.Options{Task: "t"})
	r := do(t, once.Options{Store: s, Task: "t", Holder: "B", TTL: time.Second}, ok)
	release()
	if r.Decision != once.Busy || r.Holder == nil || r.Holder.Holder != "A" {
		t.Fatalf("%+v", r)
	}
}

func TestLocalLockMakesConcurrentCallsBusy(t *testing.T) {
	s, _ := newStore(t)
	dir := filepath.Join(t.TempDir(), "locks")
	var ran, busy atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := once.Do(context.Background(), once.Options{Store: s, Task: "t", LockDir: dir, TTL: time.Second}, func(context.Context, *once.Run) error {
				time.Sleep(300 * time.Millisecond)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			switch r.Decision {
			case once.Ran:
				ran.Add(1)
			case once.Busy:
				busy.Add(1)
			}
		}()
	}
	wg.Wait()
	if ran.Load() != 1 || busy.Load() != 7 {
		t.Fatalf("ran %d busy %d", ran.Load(), busy.Load())
	}
}

func TestMinHold(t *testing.T) {
	s, _ := newStore(t)
	start := time.Now()
	do(t, once.Options{Store: s, Task: "t", TTL: time.Second, MinHold: 700 * time.Millisecond}, ok)
	if d := time.Since(start); d < 700*time.Millisecond {
		t.Fatalf("returned after %s, before --min-hold", d)
	}
}

// A call stopped while it waits out MinHold (once run's SIGTERM) keeps the lease to the hold's
// end instead of releasing it: another run could start at once otherwise.
func TestMinHoldStoppedKeepsTheLease(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	r, err := once.Do(ctx, once.Options{Store: s, Task: "t", TTL: 10 * time.Second, MinHold: 3 * time.Second},
		func(context.Context, *once.Run) error { time.AfterFunc(200*time.Millisecond, cancel); return nil })
	if err != nil || r.Decision != once.Ran || time.Since(start) > 2*time.Second {
		t.Fatalf("%+v %v after %s: want the run over, stopped early", r, err, time.Since(start))
	}
	r2, err := once.Do(context.Background(), once.Options{Store: s, Task: "t", TTL: time.Second}, ok)
	if err != nil || r2.Decision != once.Busy {
		t.Fatalf("a run during the hold: %+v %v, want busy", r2, err)
	}
	ls, err := s.Leases(context.Background())
	if err != nil || len(ls) != 1 || ls[0].Expires.After(start.Add(3500*time.Millisecond)) || ls[0].Expires.Before(start.Add(2500*time.Millisecond)) {
		t.Fatalf("leases %+v %v: want the one held to the hold's end (%s)", ls, err, start.Add(3*time.Second))
	}
}

func TestExitCoderAndBadOptions(t *testing.T) {
	s, _ := newStore(t)
	r := do(t, once.Options{Store: s, Task: "t", TTL: 10 * time.Second}, func(context.Context, *once.Run) error { return exitErr(3) })
	if r.Attempt.State != store.Failed || *r.Attempt.ExitCode != 3 {
		t.Fatalf("%+v", r.Attempt)
	}
	for _, o := range []once.Options{{Task: "t"}, {Store: s, Task: "bad task"}, {Store: s, Task: "t", OnUnknown: "maybe"}, {Store: s, Task: "t", TTL: time.Millisecond}} {
		if _, err := once.Do(context.Background(), o, ok); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", o, err)
		}
	}
}

type exitErr int

func (e exitErr) Error() string { return "exit" }
func (e exitErr) ExitCode() int { return int(e) }

func TestValidateTask(t *testing.T) {
	for _, name := range []string{"a", "nightly-sync", "team/app:job@eu-1.v2_x", strings.Repeat("x", 200)} {
		if err := once.ValidateTask(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", " ", "a b", "ä", "a\nb", "a\x00", strings.Repeat("x", 201), "a;rm", "$(x)"} {
		if err := once.ValidateTask(name); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("%q accepted", name)
		}
	}
}

func FuzzValidateTask(f *testing.F) {
	for _, s := range []string{"a", "a b", "team/app:job@eu", "ä", "\x00", strings.Repeat("y", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := once.ValidateTask(name)
		if err != nil {
			if !errors.Is(err, once.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("bad error for %q: %v", name, err)
			}
			return
		}
		if len(name) == 0 || len(name) > once.MaxTaskLen {
			t.Fatalf("accepted %q", name)
		}
		if strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-") != "" {
			t.Fatalf("accepted %q: a task name never needs shell quoting", name)
		}
	})
}

// The work's context is cancelled, with lease.ErrLost as its cause, when the lease is lost; the
// outcome then cannot be recorded and the next holder will see the attempt as unknown.
func TestWorkCancelledWhenLeaseLost(t *testing.T) {
	s, dsn := newStore(t)
	other, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var cause error
	r := do(t, once.Options{Store: s, Task: "t", Slot: "s", TTL: 900 * time.Millisecond}, func(ctx context.Context, run *once.Run) error {
		// Forge a takeover behind the keeper's back, as if this process had been paused past the TTL.
		if err := other.Release(ctx, store.Lease{Task: "t", Holder: run.Holder, Token: run.Token}); err != nil {
			return err
		}
		if _, err := other.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "thief", TTL: time.Minute}); err != nil {
			return err
		}
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("cause %v, want lease.ErrLost", cause)
	}
	if r.RecordErr == nil || !errors.Is(r.RecordErr, store.ErrNotHeld) {
		t.Fatalf("RecordErr %v: a stale holder's outcome must be refused", r.RecordErr)
	}
}

// A fleet's losers record nothing: busy while another node runs the slot, skipped once it
// succeeded. Only the winner's attempt is in history.
func TestFleetLosersRecordNoEvents(t *testing.T) {
	s, dsn := newStore(t)
	release := holdElsewhere(t, dsn, once.Options{Task: "t", Slot: "s1", Fleet: true})
	if r := do(t, once.Options{Store: s, Task: "t", Slot: "s1", Holder: "B", TTL: time.Second, Fleet: true}, ok); r.Decision != once.Busy {
		t.Fatalf("while held: %+v", r)
	}
	release()
	if r := do(t, once.Options{Store: s, Task: "t", Slot: "s1", Holder: "B", TTL: time.Second, Fleet: true}, ok); r.Decision != once.Skipped {
		t.Fatalf("after: %+v", r)
	}
	h, err := s.History(context.Background(), store.HistoryQuery{Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].State != store.Succeeded || h[0].Holder != "A" {
		t.Fatalf("history %+v, want only A's attempt", h)
	}
}

// Untried runs a slot only while nobody has tried it: a late node finds the failed attempt of
// another and skips it quietly instead of retrying; a call without Untried retries as always.
func TestUntriedSkipsATriedSlot(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "t", Slot: "s1", TTL: 10 * time.Second, Untried: true}
	boom := func(context.Context, *once.Run) error { return errors.New("boom") }
	if r := do(t, o, boom); r.Decision != once.Ran || r.Attempt.State != store.Failed {
		t.Fatalf("first: %+v", r)
	}
	r := do(t, o, ok)
	if r.Decision != once.Skipped || !strings.Contains(r.Reason, "already tried") {
		t.Fatalf("late node: %+v, want skipped as already tried", r)
	}
	o.Untried = false
	if r := do(t, o, ok); r.Decision != once.Ran || r.Attempt.Number != 2 {
		t.Fatalf("retry: %+v", r)
	}
	h, err := s.History(context.Background(), store.HistoryQuery{Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 {
		t.Fatalf("history %+v, want the two attempts and no skipped event", h)
	}
}

// A panic in the work is recorded as a failed attempt, the lease and the local lock are given
// back, and the panic reaches Do's caller with its own value: the slot was neither left running
// (nor shown later as an attempt whose holder vanished) nor the task held until the TTL ran out.
func TestWorkPanicRecorded(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "panics", Slot: "s1", LockDir: t.TempDir()}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("recovered %v, want the work's own panic value", v)
			}
		}()
		_, _ = once.Do(context.Background(), o, func(context.Context, *once.Run) error { panic("boom") })
		t.Fatal("Do returned after the work panicked")
	}()
	st, err := s.Slot(context.Background(), "panics", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Last; a == nil || a.State != store.Failed || a.ExitCode == nil || *a.ExitCode != 1 || !strings.Contains(a.Note, "the work panicked: boom") {
		t.Fatalf("last attempt %+v, want failed with exit code 1 and the panic as note", st.Last)
	}
	if ls, err := s.Leases(context.Background()); err != nil || len(ls) != 0 {
		t.Fatalf("leases after the panic: %+v, %v; want none", ls, err)
	}
	res := do(t, o, ok) // the lock and the lease are free; the failed slot is tried again
	if res.Decision != once.Ran || res.Attempt.Number != 2 || res.Attempt.State != store.Succeeded {
		t.Fatalf("next run: %+v, want attempt 2 ran and succeeded", res)
	}
}

// runtime.Goexit in the work (t.FailNow inside it) is recorded as a failed attempt noting it, the
// lease and the local lock are given back, and the goroutine that called Do still exits: the
// attempt was left running, read as unknown (review) by the next holder only.
func TestWorkGoexitRecorded(t *testing.T) {
	s, _ := newStore(t)
	o := once.Options{Store: s, Task: "goexits", Slot: "s1", LockDir: t.TempDir()}
	returned := make(chan bool, 1)
	go func() {
		exited := true
		defer func() { returned <- exited }()
		_, _ = once.Do(context.Background(), o, func(context.Context, *once.Run) error { runtime.Goexit(); return nil })
		exited = false
	}()
	if ok := <-returned; !ok {
		t.Fatal("Do returned after the work called runtime.Goexit; the goroutine must go on exiting")
	}
	st, err := s.Slot(context.Background(), "goexits", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Last; a == nil || a.State != store.Failed || a.ExitCode == nil || *a.ExitCode != 1 || a.Note != once.GoexitNote {
		t.Fatalf("last attempt %+v, want failed with exit code 1 and note %q", st.Last, once.GoexitNote)
	}
	if ls, err := s.Leases(context.Background()); err != nil || len(ls) != 0 {
		t.Fatalf("leases after the Goexit: %+v, %v; want none", ls, err)
	}
	res := do(t, o, ok) // the lock and the lease are free; the failed slot is tried again
	if res.Decision != once.Ran || res.Attempt.Number != 2 || res.Attempt.State != store.Succeeded {
		t.Fatalf("next run: %+v, want attempt 2 ran and succeeded", res)
	}
}

// A slot value is held to the rule of --slot (slot.CheckValue) before anything is taken or run, by
// Do, Sequence and SequenceStream alike: a 300-byte slot ran on SQLite and failed on MySQL only
// once the lease was taken, and a '/' made TASK/SLOT, the idempotency key, ambiguous.
func TestSlotValueChecked(t *testing.T) {
	s, _ := newStore(t)
	never := func(context.Context, *once.Run) error { t.Fatal("work ran"); return nil }
	ctx := context.Background()
	for _, sl := range []string{"2026/12/06", strings.Repeat("x", 201), "a\nb", " a", "\xff", "cafe\u0301"} {
		o := once.Options{Store: s, Task: "slots", Slot: sl}
		if _, err := once.Do(ctx, o, never); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("Do with slot %q: %v, want ErrInvalid", sl, err)
		}
		o.Slot = ""
		if _, err := once.Sequence(ctx, o, []string{"ok", sl}, once.SeqOptions{}, never); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("Sequence with slot %q: %v, want ErrInvalid", sl, err)
		}
		stream := func(yield func(string) bool) { yield(sl) }
		if err := once.SequenceStream(ctx, o, stream, "ok", once.SeqOptions{OnResult: func(once.Result) {}}, never); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("SequenceStream with slot %q: %v, want ErrInvalid", sl, err)
		}
		none := func(func(string) bool) {}
		if err := once.SequenceStream(ctx, o, none, sl, once.SeqOptions{OnResult: func(once.Result) {}}, never); !errors.Is(err, once.ErrInvalid) {
			t.Errorf("SequenceStream with busy slot %q: %v, want ErrInvalid", sl, err)
		}
	}
	if h, err := s.History(ctx, store.HistoryQuery{Task: "slots"}); err != nil || len(h) != 0 {
		t.Fatalf("history: %+v, %v; want nothing recorded", h, err)
	}
}

// A slot value has one encoding, Unicode NFC: "café" written e + U+0301 (NFD, as macOS names
// files) looks like the slot "café" that already ran, and was another slot that ran the work again.
func TestSlotNotNFCRefused(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	ran := 0
	work := func(context.Context, *once.Run) error { ran++; return nil }
	if r := do(t, once.Options{Store: s, Task: "t", Slot: "caf\u00e9"}, work); r.Decision != once.Ran || ran != 1 {
		t.Fatalf("NFC slot: %+v, ran %d; want it run", r, ran)
	}
	_, err := once.Do(ctx, once.Options{Store: s, Task: "t", Slot: "cafe\u0301"}, work)
	want := `--slot "cafe\u0301" is not in Unicode NFC form: write it as "café"`
	if !errors.Is(err, once.ErrInvalid) || !strings.Contains(err.Error(), want) || ran != 1 {
		t.Fatalf("NFD slot: %v, ran %d; want ErrInvalid saying %s, not run", err, ran, want)
	}
	if h, err := s.History(ctx, store.HistoryQuery{Task: "t"}); err != nil || len(h) != 1 {
		t.Fatalf("history: %+v, %v; want the NFC slot's one attempt", h, err)
	}
}

// noRenew is a store whose renewals fail as if it could not be reached: the lease runs out.
type noRenew struct{ store.Store }

func (noRenew) Renew(context.Context, store.Lease, time.Duration) (store.Lease, error) {
	return store.Lease{}, fmt.Errorf("%w: renewals refused by the test", store.ErrUnavailable)
}

// An outcome whose lease ran out before it could be recorded (the process stopped or starved past
// its TTL) says so, not "unavailable: context deadline exceeded" of a store that answers.
func TestOutcomeAfterTheLeaseExpiredSaysSo(t *testing.T) {
	s, _ := newStore(t)
	r, err := once.Do(context.Background(), once.Options{Store: noRenew{s}, Task: "t", TTL: time.Second},
		func(ctx context.Context, _ *once.Run) error {
			<-ctx.Done()                        // the lease is lost: it could not be renewed
			time.Sleep(1100 * time.Millisecond) // and the process lingers past the grant's expiry
			return ctx.Err()
		})
	if err != nil || r.RecordErr == nil || !errors.Is(r.RecordErr, lease.ErrLost) || !strings.Contains(r.RecordErr.Error(), "the lease expired at") ||
		!strings.Contains(r.RecordErr.Error(), "the work did not stop when its context was cancelled") {
		t.Fatalf("%+v %v: want the outcome not recorded because the lease expired", r, err)
	}
}
