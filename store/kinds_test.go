package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// TestKinds: the event kinds Record keeps, the attempt states, and the Kind a history query may
// filter by, in the one rule every backend applies.
func TestKinds(t *testing.T) {
	for _, k := range []store.State{store.Skipped, store.Busy, store.Review, store.Missed} {
		if !k.IsEvent() || k.IsAttempt() || store.CheckEvent(store.Event{Task: "job", Kind: k}) != nil || store.CheckKind(k) != nil {
			t.Errorf("event kind %s refused", k)
		}
	}
	for _, st := range []store.State{store.Running, store.Succeeded, store.Failed, store.Unknown} {
		if st.IsEvent() || !st.IsAttempt() || store.CheckKind(st) != nil {
			t.Errorf("attempt state %s: IsEvent %v, IsAttempt %v", st, st.IsEvent(), st.IsAttempt())
		}
		if err := store.CheckEvent(store.Event{Kind: st}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("CheckEvent(%s) = %v, want ErrConflict", st, err)
		}
	}
	if store.CheckKind("") != nil {
		t.Error(`CheckKind("") refused: "" keeps every entry`)
	}
	for _, bad := range []store.State{"Missed", "missed ", "done", "x\ny"} {
		err := store.CheckKind(bad)
		if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "\n") {
			t.Errorf("CheckKind(%q) = %v, want one line wrapping ErrInvalid", bad, err)
		}
		if _, _, err := (store.HistoryQuery{Kind: bad}).Cursors(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Cursors of Kind %q = %v, want ErrInvalid", bad, err)
		}
		if err := store.CheckEvent(store.Event{Kind: bad}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("CheckEvent(%q) = %v, want ErrConflict", bad, err)
		}
	}
	q := store.HistoryQuery{Kind: store.Missed}
	if !q.Selects(store.Missed) || q.Selects(store.Busy) || q.ReadsAttempts() || !q.ReadsEvents() {
		t.Errorf("%+v selects the wrong entries", q)
	}
	q.Kind = store.Failed
	if q.Selects(store.Missed) || !q.ReadsAttempts() || q.ReadsEvents() {
		t.Errorf("%+v selects the wrong entries", q)
	}
	if q := (store.HistoryQuery{}); !q.Selects(store.Missed) || !q.ReadsAttempts() || !q.ReadsEvents() {
		t.Error("an empty Kind does not select every entry")
	}
}
