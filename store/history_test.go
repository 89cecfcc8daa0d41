package store_test

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestCursorOrder: history order is time (newest first), then events before attempts, then key
// and seq, both descending; it is total, and a cursor's text gives the same cursor back.
func TestCursorOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	cs := []store.Cursor{
		store.CursorOf(t0.Add(time.Second), false, "", 1),
		store.CursorOf(t0, true, "b", 2),
		store.CursorOf(t0, true, "b", 1),
		store.CursorOf(t0, true, "a", 9),
		store.CursorOf(t0, false, "z", 0),
		store.CursorOf(t0, false, "", 5),
		store.CursorOf(t0.Add(-time.Microsecond), true, "", 0),
	}
	for i := range cs {
		for j := range cs {
			if got, want := cs[i].Precedes(cs[j]), i < j; got != want {
				t.Errorf("%s precedes %s: %v, want %v", cs[i], cs[j], got, want)
			}
		}
		back, err := store.ParseCursor(cs[i].String())
		if err != nil || back.String() != cs[i].String() || back.Precedes(cs[i]) || cs[i].Precedes(back) {
			t.Errorf("ParseCursor(%s) = %v, %v", cs[i], back, err)
		}
	}
	shuffled := append([]store.Cursor{}, cs...)
	sort.Slice(shuffled, func(i, j int) bool { return shuffled[i].String() < shuffled[j].String() })
	sort.Slice(shuffled, func(i, j int) bool { return shuffled[i].Precedes(shuffled[j]) })
	for i := range cs {
		if shuffled[i].String() != cs[i].String() {
			t.Fatalf("sorted by Precedes: %v, want %v", shuffled, cs)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"1767323045123456.a.42", "0.e.0", "-5.a.1.YQ", "1.e.7.am9iAHNsb3Q", "", "1.a", "01.a.1",
		"1.x.1", "1.a.-1", "1.a.1.", "1.a.1.!!", "1.a.1.YQ.YQ", "9223372036854775808.a.1", strings.Repeat("1", 2000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := store.ParseCursor(s)
		if err != nil {
			if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseCursor(%q): %v: want one line wrapping ErrInvalid", s, err)
			}
			return
		}
		if c.String() != s || c.Seq < 0 {
			t.Fatalf("ParseCursor(%q) = %+v, which reads %q", s, c, c.String())
		}
	})
}

// TestPruneDecide: Prune's rule on each kind of entry (see store.Ledger).
func TestPruneDecide(t *testing.T) {
	cut := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old, recent := cut.Add(-time.Hour), cut.Add(time.Hour)
	ended := old.Add(time.Minute)
	late := recent
	att := func(n int, st store.State, res store.State) store.Attempt {
		a := store.Attempt{Number: n, State: st, StartedAt: old, EndedAt: &ended}
		if st == store.Running {
			a.EndedAt = nil
		}
		if res != "" {
			a.Resolution = &store.Resolution{As: res}
		}
		return a
	}
	r := store.PruneRequest{Before: cut}
	forget := store.PruneRequest{Before: cut, ForgetSlots: true}
	for _, c := range []struct {
		name string
		r    store.PruneRequest
		f    store.PruneFacts
		want store.PruneAction
	}{
		{"superseded attempt of a succeeded slot", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Succeeded, "")}, store.Drop},
		{"the last attempt", r, store.PruneFacts{Kind: store.Succeeded, Number: 2, At: old, Last: att(2, store.Succeeded, "")}, store.Keep},
		{"the checkpoint", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Succeeded, ""), Checkpoint: 1}, store.Keep},
		{"started since the cutoff", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: recent, Last: att(2, store.Succeeded, "")}, store.Keep},
		{"a failing slot's budget", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Failed, "")}, store.Keep},
		{"an unknown slot", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Unknown, "")}, store.Keep},
		{"a running slot", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Running, "")}, store.Keep},
		{"resolved as failed", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Failed, store.Failed)}, store.Drop},
		{"resolved as succeeded", r, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(2, store.Unknown, store.Succeeded)}, store.Drop},
		{"a busy event", r, store.PruneFacts{Event: true, Kind: store.Busy, At: old, Last: att(2, store.Failed, "")}, store.Drop},
		{"a recent event", r, store.PruneFacts{Event: true, Kind: store.Busy, At: recent, Last: att(2, store.Failed, "")}, store.Keep},
		{"the review that makes a slot wait", r, store.PruneFacts{Event: true, Kind: store.Review, Number: 2, At: old, Last: att(2, store.Failed, "")}, store.Keep},
		{"a review of an older attempt", r, store.PruneFacts{Event: true, Kind: store.Review, Number: 1, At: old, Last: att(2, store.Failed, "")}, store.Drop},
		{"a review someone resolved", r, store.PruneFacts{Event: true, Kind: store.Review, Number: 2, At: old, Last: att(2, store.Failed, store.Failed)}, store.Drop},
		{"an event of a slot never tried", r, store.PruneFacts{Event: true, Kind: store.Busy, At: old}, store.Drop},
		{"forget a done slot", forget, store.PruneFacts{Kind: store.Succeeded, Number: 2, At: old, Last: att(2, store.Succeeded, "")}, store.Forget},
		{"forget: resolved as succeeded", forget, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(1, store.Failed, store.Succeeded)}, store.Forget},
		{"forget: not a slot with an entry since", forget, store.PruneFacts{Kind: store.Succeeded, Number: 2, At: old, Last: att(2, store.Succeeded, ""), Recent: true}, store.Keep},
		{"forget: not a slot that ended since", forget, store.PruneFacts{Kind: store.Succeeded, Number: 2, At: old,
			Last: store.Attempt{Number: 2, State: store.Succeeded, StartedAt: old, EndedAt: &late}}, store.Keep},
		{"forget: not a slot resolved as failed", forget, store.PruneFacts{Kind: store.Failed, Number: 1, At: old, Last: att(1, store.Failed, store.Failed)}, store.Keep},
		{"forget: not a waiting slot", forget, store.PruneFacts{Event: true, Kind: store.Review, Number: 1, At: old, Last: att(1, store.Failed, "")}, store.Keep},
	} {
		if got := c.r.Decide(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
