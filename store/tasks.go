package store

import (
	"context"
	"fmt"
	"sort"
)

// TaskLister is implemented by stores that can list the tasks they know from an index, a page at
// a time, at a cost that does not grow with history (the overview of once serve at 10,000 tasks
// and 1,000,000 attempts).
//
// Contract: Tasks(ctx, after, limit) returns at most limit task names, each greater than after
// (byte order; "" starts at the beginning), in increasing byte order, without repeats. A task is
// known once it has been granted a lease (Acquire or Start), whether or not the lease is still
// held, and stays known for good: Prune does not forget it, and neither does a released or an
// expired lease. limit ≤ 0 is refused with ErrInvalid.
type TaskLister interface {
	Tasks(ctx context.Context, after string, limit int) ([]string, error)
}

// MaxTasksPage bounds the page a TaskLister is asked for by once's own readers.
const MaxTasksPage = 1000

// CheckTasksPage is the one rule for the limit of a page of tasks (TaskLister, ListTasks), applied
// by every backend before it reads: at least 1. Its error wraps ErrInvalid.
func CheckTasksPage(limit int) error {
	if limit <= 0 {
		return &invalidValue{fmt.Sprintf("tasks page: limit %d: give a limit of at least 1", limit)}
	}
	return nil
}

// TasksPage is a page of names as TaskLister returns it, cut from names in any order, with or
// without repeats: the names greater than after, in increasing byte order, without repeats, at
// most limit of them. For a store whose index cannot be read from a name on (a ZooKeeper node's
// children); it sorts names in place.
func TasksPage(names []string, after string, limit int) []string {
	sort.Strings(names)
	out := make([]string, 0, min(limit, len(names)))
	for _, n := range names {
		if len(out) == limit {
			break
		}
		if n > after && (len(out) == 0 || out[len(out)-1] != n) {
			out = append(out, n)
		}
	}
	return out
}

// ListTasks returns a page of task names as TaskLister does, from l's index when it has one. On
// other ledgers it walks the whole history (its cost grows with history: the store's docs say so)
// and also names the tasks known only from events (a daemon's missed slots).
func ListTasks(ctx context.Context, l Ledger, after string, limit int) ([]string, error) {
	if err := CheckTasksPage(limit); err != nil {
		return nil, err
	}
	if tl, ok := l.(TaskLister); ok {
		return tl.Tasks(ctx, after, limit)
	}
	var names []string
	seen := map[string]struct{}{}
	err := EachHistory(ctx, l, HistoryQuery{}, func(e Entry) error {
		if _, ok := seen[e.Task]; !ok && e.Task > after {
			seen[e.Task] = struct{}{}
			names = append(names, e.Task)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return TasksPage(names, after, limit), nil
}
