package redis

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestTasksIndexBuilt: tasks an older once knew (in the set of tasks, not in the sorted set of
// names: a prefix from before the index, or a host still running an older once) are listed; the
// first Tasks adds them to the sorted set.
func TestTasksIndexBuilt(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
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
	names := s.key("task-names")
	acquire("b", "a/c", "B", "a-c")
	if err := s.c.Del(ctx, names).Err(); err != nil { // a prefix from before the index
		t.Fatal(err)
	}
	storetest.WantTasks(t, s, "tasks from before the index", "b", "a/c", "B", "a-c")
	if n, err := s.c.ZCard(ctx, names).Result(); err != nil || n != 4 {
		t.Fatalf("index after the first Tasks: %d names, %v; want 4", n, err)
	}
	acquire("late")
	if err := s.c.ZRem(ctx, names, "late").Err(); err != nil { // acquired by an older once
		t.Fatal(err)
	}
	storetest.WantTasks(t, s, "a task an older once added", "b", "a/c", "B", "a-c", "late")
}
