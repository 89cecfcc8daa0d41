package kvtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// HistoryKVStore is what ForgetRacesNewDocument reaches of a backend: its documents and its
// history index (a backend's kv).
type HistoryKVStore interface {
	kvstore.KV
	kvstore.HistoryKV
}

// ForgetRacesNewDocument deletes a task's last document while a new document of the same task is
// written, at the same time, in tasks t00… (rounds of them): whichever order the store puts them
// in, the task stays in HistoryTasks and, once between (a backend's check of the order it guards,
// or nil) has run, history across tasks shows each task's new document, not the deleted one.
func ForgetRacesNewDocument(t *testing.T, ctx context.Context, s store.Store, k HistoryKVStore, rounds int, between func()) {
	t.Helper()
	for i := range rounds {
		task := fmt.Sprintf("t%02d", i)
		if err := s.Record(ctx, store.Event{Task: task, Slot: "old", Kind: store.Missed, Holder: "n"}); err != nil {
			t.Fatal(err)
		}
		d, ver, _, err := k.Load(ctx, task, "old")
		if err != nil || d == nil {
			t.Fatal(d, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = k.Delete(ctx, d, ver) })
		wg.Go(func() {
			errs[1] = s.Record(ctx, store.Event{Task: task, Slot: "new", Kind: store.Missed, Holder: "n"})
		})
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: delete: %v; write: %v", i, errs[0], errs[1])
		}
		ts, err := k.HistoryTasks(ctx)
		if err != nil || !slices.Contains(ts, task) {
			t.Fatalf("round %d: HistoryTasks %v (%v) lacks %s, whose new document has an entry", i, ts, err, task)
		}
	}
	if between != nil {
		between()
	}
	for _, kind := range []store.State{"", store.Missed} {
		got, err := s.History(ctx, store.HistoryQuery{Kind: kind})
		if err != nil || len(got) != rounds {
			t.Fatalf("history across tasks (kind %q): %d entries, %v; want %d (each task's new slot)", kind, len(got), err, rounds)
		}
		for _, e := range got {
			if e.Slot != "new" {
				t.Fatalf("history across tasks (kind %q) shows %s/%s, which was deleted", kind, e.Task, e.Slot)
			}
		}
	}
}
