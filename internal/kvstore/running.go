package kvstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/once-run/once/store"
)

// AllRunningKV is an optional KV capability, with RunningKV: every task's running index read at
// once, for store.RunningLister (once status). Its cost is the tasks and the slots running, never
// the documents' history.
type AllRunningKV interface {
	// AllRunning returns the documents of the slots in every task's running index (a slot listed
	// without a document is left out), and the tasks granted a lease whose running index was never
	// built (an older once ran them, and none has run since: the first run of this once builds it,
	// Ledger.Abandon).
	AllRunning(ctx context.Context) (docs []*Doc, unindexed []string, err error)
}

var _ store.RunningLister = Ledger{}

// RunningAttempts lists the attempts still running (store.RunningLister) from the backend's
// running indexes, in (task, slot) byte order. A KV without AllRunningKV is refused with
// ErrUnsupported.
func (l Ledger) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	if err := store.CheckRunningLimit(limit); err != nil {
		return store.RunningList{}, err
	}
	ak, ok := l.KV.(AllRunningKV)
	if !ok {
		return store.RunningList{}, fmt.Errorf("%w: this store keeps no index of running attempts", store.ErrUnsupported)
	}
	docs, unindexed, err := ak.AllRunning(ctx)
	if err != nil {
		return store.RunningList{}, err
	}
	var as []store.Attempt
	for _, d := range docs {
		for _, a := range d.Attempts {
			if a.State == store.Running {
				as = append(as, a)
			}
		}
	}
	slices.SortFunc(as, func(a, b store.Attempt) int {
		if c := strings.Compare(a.Task, b.Task); c != 0 {
			return c
		}
		if c := strings.Compare(a.Slot, b.Slot); c != 0 {
			return c
		}
		return a.Number - b.Number
	})
	as = slices.CompactFunc(as, func(a, b store.Attempt) bool { return a.Task == b.Task && a.Slot == b.Slot && a.Number == b.Number })
	out := store.RunningList{Unlisted: unindexed}
	for _, a := range as {
		out.Add(a, limit)
	}
	slices.Sort(out.Unlisted)
	return out, nil
}
