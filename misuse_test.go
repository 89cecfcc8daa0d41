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

// A nil work is ErrInvalid before anything is taken: it used to be called once its attempt was
// recorded, and panicked there, recorded as a failed attempt that used up one of MaxAttempts.
func TestNilWorkRefused(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	o := once.Options{Store: s, Task: "t", Slot: "s"}
	day, _ := slot.New("day", "", "", "UTC")
	calls := map[string]func() error{
		"Do":       func() error { _, err := once.Do(ctx, o, nil); return err },
		"Sequence": func() error { _, err := once.Sequence(ctx, o, []string{"s"}, once.SeqOptions{}, nil); return err },
		"SequenceStream": func() error {
			return once.SequenceStream(ctx, o, func(y func(string) bool) { y("s") }, "s", once.SeqOptions{OnResult: func(once.Result) {}}, nil)
		},
		"CatchUp": func() error { _, err := once.CatchUp(ctx, o, day, 48*time.Hour, 3, nil); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("panicked: %v", v)
				}
			}()
			if err := call(); !errors.Is(err, once.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
	if h, err := s.History(ctx, store.HistoryQuery{Task: "t"}); err != nil || len(h) != 0 {
		t.Fatalf("history %+v %v: want nothing recorded", h, err)
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("leases %+v %v: want none", ls, err)
	}
}

// An empty slot in a sequence is ErrInvalid: it has no per-slot memory, so it ran on every call
// (a slot list split at a trailing newline ends with "").
func TestSequenceRefusesEmptySlot(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	o := once.Options{Store: s, Task: "t"}
	ran := 0
	w := func(context.Context, *once.Run) error { ran++; return nil }
	if _, err := once.Sequence(ctx, o, []string{"a", ""}, once.SeqOptions{}, w); !errors.Is(err, once.ErrInvalid) || ran != 0 {
		t.Fatalf("Sequence: %v, ran %d; want ErrInvalid and nothing run", err, ran)
	}
	var rs []once.Result
	stream := func(y func(string) bool) { _ = y("a") && y("") }
	err := once.SequenceStream(ctx, o, stream, "a", once.SeqOptions{OnResult: func(r once.Result) { rs = append(rs, r) }}, w)
	if !errors.Is(err, once.ErrInvalid) || ran != 1 || len(rs) != 1 || rs[0].Slot != "a" {
		t.Fatalf("SequenceStream: %v, ran %d, results %+v; want slot a run, then ErrInvalid", err, ran, rs)
	}
	if r := do(t, once.Options{Store: s, Task: "t"}, w); r.Decision != once.Ran || ran != 2 {
		t.Fatalf("Do without a slot: %+v", r)
	}
}

// A panic in Options.Locked gives the local lock back: it was taken before the unlock was
// deferred, so the task stayed busy on this machine for the life of the process.
func TestLockedPanicReleasesTheLock(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	func() {
		defer func() {
			if v := recover(); v != "in Locked" {
				t.Fatalf("recovered %v, want the panic of Locked", v)
			}
		}()
		o := once.Options{Store: s, Task: "t", LockDir: dir, Locked: func() { panic("in Locked") }}
		_, _ = once.Do(context.Background(), o, ok)
	}()
	if r := do(t, once.Options{Store: s, Task: "t", LockDir: dir}, ok); r.Decision != once.Ran {
		t.Fatalf("next call: %s (%s), want ran: the local lock was kept", r.Decision, r.Reason)
	}
}

// An Options.Open that returns neither a store nor an error is ErrInvalid, not a nil-pointer
// panic inside the guard.
func TestOpenReturningNilRefused(t *testing.T) {
	o := once.Options{Task: "t", Open: func(context.Context) (store.Store, error) { return nil, nil }}
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("panicked: %v", v)
		}
	}()
	if _, err := once.Do(context.Background(), o, ok); !errors.Is(err, once.ErrInvalid) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
}

// A Run made by hand (a unit test of a Work) answers its lease methods as a Run never lost.
func TestZeroRunMethods(t *testing.T) {
	r := &once.Run{}
	if r.Lost() != nil || r.LostErr() != nil || !r.StopBy().IsZero() || r.TTL() != 0 || r.Released() {
		t.Fatalf("zero Run: Lost %v LostErr %v StopBy %v TTL %v Released %v", r.Lost(), r.LostErr(), r.StopBy(), r.TTL(), r.Released())
	}
}

// SequenceStream without OnResult is ErrInvalid before anything is taken (its results went
// nowhere: a failed slot under KeepGoing was said only in history); Sequence and SequenceStream
// ignore o.Slot as they say (a bad one was refused); Decide needs no store (it reads nothing).
func TestSequenceOptionsAndDecide(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	ran := 0
	w := func(context.Context, *once.Run) error { ran++; return nil }
	o := once.Options{Store: s, Task: "t"}
	if err := once.SequenceStream(ctx, o, func(y func(string) bool) { y("a") }, "a", once.SeqOptions{}, w); !errors.Is(err, once.ErrInvalid) || ran != 0 {
		t.Fatalf("SequenceStream without OnResult: %v, ran %d; want ErrInvalid and nothing run", err, ran)
	}
	o.Slot = " bad/slot "
	if rs, err := once.Sequence(ctx, o, []string{"a"}, once.SeqOptions{}, w); err != nil || len(rs) != 1 || ran != 1 {
		t.Fatalf("Sequence with a bad o.Slot (ignored): %+v %v, ran %d", rs, err, ran)
	}
	n := 0
	err := once.SequenceStream(ctx, o, func(y func(string) bool) { y("b") }, "b", once.SeqOptions{OnResult: func(once.Result) { n++ }}, w)
	if err != nil || n != 1 || ran != 2 {
		t.Fatalf("SequenceStream with a bad o.Slot (ignored): %v, %d results, ran %d", err, n, ran)
	}
	d, why, err := once.Decide(once.Options{Task: "t", Slot: "a"}, store.SlotState{})
	if err != nil || d != once.Ran {
		t.Fatalf("Decide without a store: %s %q %v, want ran", d, why, err)
	}
	if _, _, err := once.Decide(once.Options{Task: "t", Slot: " bad"}, store.SlotState{}); !errors.Is(err, once.ErrInvalid) {
		t.Fatalf("Decide with a bad slot: %v, want ErrInvalid", err)
	}
}

// An attempt left unknown without a note is not said to be a vanished holder's only: a holder that
// ran the work and could not record its outcome (a full disk) leaves the same record.
func TestDecideUnknownSaysBothCauses(t *testing.T) {
	last := store.Attempt{Task: "t", Slot: "a", Number: 1, Holder: "root@vm:1", State: store.Unknown}
	d, why, err := once.Decide(once.Options{Task: "t", Slot: "a"}, store.SlotState{Last: &last})
	if err != nil || d != once.Review || !strings.Contains(why, "vanished, or could not record its outcome") {
		t.Fatalf("Decide on an unknown attempt: %s %q %v", d, why, err)
	}
}
