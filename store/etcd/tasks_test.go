package etcd

import (
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestTasksIndexBuilt: tasks an older once granted leases of (a fence key, no entry in the task
// index: a prefix from before the index, or a host still running an older once) are listed; the
// first Tasks puts their entries.
func TestTasksIndexBuilt(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acquire := func(tasks ...string) {
		t.Helper()
		for _, task := range tasks {
			if _, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
	}
	unindex := func(tasks ...string) {
		t.Helper()
		var ops []op
		for _, task := range tasks {
			ops = append(ops, opDel(s.taskKey(task), false))
		}
		if _, err := s.c.txn(ctx, txnReq{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
	acquire("b", "a/c", "B", "a-c")
	unindex("b", "a/c", "B", "a-c") // a prefix from before the index
	storetest.WantTasks(t, s, "tasks from before the index", "b", "a/c", "B", "a-c")
	if gr, err := s.c.getPrefix(ctx, s.p+"t/"); err != nil || len(gr.Kvs) != 4 {
		t.Fatalf("index after the first Tasks: %d entries, %v; want 4", len(gr.Kvs), err)
	}
	acquire("late")
	unindex("late") // acquired by an older once
	storetest.WantTasks(t, s, "a task an older once added", "b", "a/c", "B", "a-c", "late")
}
