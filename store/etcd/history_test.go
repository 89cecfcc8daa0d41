package etcd

import (
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestForgetDropsHistoryTask: a task's last document's delete (once prune --forget-slots) takes
// the task out of the list of tasks with a history index (y/), its index of missed events with it,
// so that a page across tasks no longer reads its empty ranges; another task's stays.
func TestForgetDropsHistoryTask(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, e := range []store.Event{
		{Task: "gone", Slot: "a", Kind: store.Missed, Holder: "n"}, {Task: "gone", Slot: "b", Kind: store.Busy, Holder: "n"},
		{Task: "kept", Slot: "a", Kind: store.Busy, Holder: "n"},
	} {
		if err := s.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	k := kv{s}
	tasks := func() []string {
		t.Helper()
		ts, err := k.HistoryTasks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ts)
		return ts
	}
	if got := tasks(); !slices.Equal(got, []string{"gone", "kept"}) {
		t.Fatalf("HistoryTasks: %v", got)
	}
	for _, slot := range []string{"a", "b"} {
		d, ver, _, err := k.Load(ctx, "gone", slot)
		if err != nil || d == nil {
			t.Fatal(d, err)
		}
		if err := k.Delete(ctx, d, ver); err != nil {
			t.Fatal(err)
		}
		if got, want := tasks(), map[string][]string{"a": {"gone", "kept"}, "b": {"kept"}}[slot]; !slices.Equal(got, want) {
			t.Fatalf("HistoryTasks after the delete of slot %s: %v, want %v", slot, got, want)
		}
	}
	gr, err := s.c.getPrefix(ctx, s.p+"z/")
	if err != nil || len(gr.Kvs) != 0 {
		t.Fatalf("index of missed events after the task's last document went: %d keys, %v", len(gr.Kvs), err)
	}
}
