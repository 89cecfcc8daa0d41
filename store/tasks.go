package store

import (
	"context"
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

// ListTasks returns a page of task names as TaskLister does, from l's index when it has one. On
// other ledgers it walks the whole history (its cost grows with history: the store's docs say so)
// and also names the tasks known only from events (a daemon's missed slots).
func ListTasks(ctx context.Context, l Ledger, after string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, &invalidValue{"tasks page: give a limit of at least 1"}
	}
	if tl, ok := l.(TaskLister); ok {
		return tl.Tasks(ctx, after, limit)
	}
	seen := map[string]struct{}{}
	err := EachHistory(ctx, l, HistoryQuery{}, func(e Entry) error {
		if e.Task > after {
			seen[e.Task] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
