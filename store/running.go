package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// RunningLister is implemented by stores that can list the attempts still running across every
// task from an index, at a cost that does not grow with history: what once status shows as
// RUNNING, with whether each holder's lease is live (an attempt whose holder died and whose lease
// expired stays running until the task's next run marks it unknown).
//
// Contract: RunningAttempts(ctx, limit) returns at most limit attempts whose state is running, each
// as Slot's Last would show it, without repeats, in the order of the store's index (by task, then
// slot, in the store's collation on SQLite and PostgreSQL and in byte order on the key-value stores;
// by task on MySQL, and within a task in its index's order), and More when more attempts were running than it returned: the
// attempts left out are those after the last one in that order. Unlisted names the tasks whose running attempts the store could not
// read from its index (a key-value store's task whose running index was never built, because an
// older once ran it and it has not run since): none of their attempts is listed, whatever limit
// says. It costs the attempts running and, on MySQL and the key-value stores, the tasks, never the ledger's
// history; docs/store-contract.md says what each store reads. limit ≤ 0 is refused with ErrInvalid
// (CheckRunningLimit). The list is a snapshot of each attempt at its read: an attempt may end, or
// another begin, while it is read.
type RunningLister interface {
	RunningAttempts(ctx context.Context, limit int) (RunningList, error)
}

// RunningList is what RunningLister returns.
type RunningList struct {
	Attempts []Attempt `json:"attempts"`
	// More is true when more attempts were running than Attempts holds (limit reached).
	More bool `json:"more"`
	// Unlisted are the tasks whose running attempts are not listed (see RunningLister), sorted.
	Unlisted []string `json:"unlisted,omitempty"`
}

// Add appends a to the list, unless it holds limit attempts already: then it sets More. A backend
// reads one attempt more than limit and adds each it reads, so that More says whether any was left
// out (the contract's rule, written once).
func (l *RunningList) Add(a Attempt, limit int) {
	if len(l.Attempts) >= limit {
		l.More = true
		return
	}
	l.Attempts = append(l.Attempts, a)
}

// MaxRunningList bounds the list a RunningLister is asked for by once's own readers (once status).
const MaxRunningList = 100

// CheckRunningLimit is the one rule for RunningLister's limit, applied by every backend before it
// reads: at least 1. Its error wraps ErrInvalid.
func CheckRunningLimit(limit int) error {
	if limit <= 0 {
		return &invalidValue{fmt.Sprintf("running attempts: limit %d: give a limit of at least 1", limit)}
	}
	return nil
}

// Lease states of an attempt still running (RunningNow.Lease).
const (
	LeaseLive = "live" // its holder's grant (its token) is held now: the attempt runs
	LeaseGone = "gone" // expired or taken over: the holder died or was cut off
)

// RunningNow is an attempt still recorded as running with whether its holder's grant is live: what
// once status's RUNNING and once serve's overview show.
type RunningNow struct {
	Attempt
	// Lease is LeaseLive when the holder's grant (its token) is held now, LeaseGone otherwise.
	Lease string `json:"lease"`
	// HeldBy, when the lease is gone but another grant of the task is live (a seat of once run
	// --limit, a run that took the lease over), is that grant: once resolve refuses (75) while
	// one is live. Nil when no grant of the task is live: then once resolve settles the slot now
	// (it marks the attempt unknown first).
	HeldBy *Lease `json:"held_by,omitempty"`
}

// Settleable reports whether once resolve settles r's slot now: its holder's lease is gone and no
// grant of its task is live.
func (r RunningNow) Settleable() bool { return r.Lease == LeaseGone && r.HeldBy == nil }

// RunningRead is what ReadRunning returns.
type RunningRead struct {
	// Attempts are sorted by task, slot and attempt number, whatever the store's index order.
	Attempts []RunningNow
	More     bool     // the store had more running than the limit
	Unlisted []string // tasks whose running attempts the store could not list (RunningList)
	Listed   bool     // the store is a RunningLister that could list (false: nothing is listed)
}

// ReadRunning lists at most limit attempts still running (RunningLister) and reads the leases
// after them, so that an attempt's grant, live when it began, is in the leases when it still is.
// When an attempt's grant is not, it lists them again: an attempt in both lists was running
// before and after the leases were read (an attempt never runs again once it ended), so its
// holder's grant was gone while it ran; one missing from the second list ended between the reads,
// or, when more were running than limit, fell past it (More says so), and is left out. It returns
// the leases too. It costs two RunningAttempts and one Leases at most, whatever the number of
// attempts whose holder is gone (it read one Slot per such attempt before, one after another:
// seconds of round trips on a remote store with 100), never the ledger's history. A store that is
// no RunningLister, or whose RunningAttempts is ErrUnsupported (a ledger over a key-value store
// without the index), answers Listed false.
func ReadRunning(ctx context.Context, s Store, limit int) (RunningRead, []Lease, error) {
	out := RunningRead{Attempts: []RunningNow{}}
	list, err := listRunning(ctx, s, limit)
	switch {
	case errors.Is(err, ErrUnsupported):
	case err != nil:
		return out, nil, err
	default:
		out.Listed, out.More, out.Unlisted = true, list.More, list.Unlisted
	}
	leases, err := s.Leases(ctx)
	if err != nil {
		return out, nil, err
	}
	live := LiveTokens(leases)
	var gone []Attempt
	for _, at := range list.Attempts {
		if live[at.Task][at.Token] {
			out.Attempts = append(out.Attempts, RunningNow{Attempt: at, Lease: LeaseLive})
		} else {
			gone = append(gone, at)
		}
	}
	if len(gone) > 0 {
		again, err := listRunning(ctx, s, limit)
		if err != nil {
			return out, nil, err
		}
		out.More = out.More || again.More
		still := make(map[string]Attempt, len(again.Attempts))
		for _, at := range again.Attempts {
			still[at.Task+"\x00"+at.Slot+"\x00"+at.RunID] = at
		}
		for _, at := range gone {
			now, ok := still[at.Task+"\x00"+at.Slot+"\x00"+at.RunID]
			if !ok || now.Number != at.Number {
				continue // it ended since it was listed (or fell past the limit: More)
			}
			r := RunningNow{Attempt: now, Lease: LeaseGone}
			if i := slices.IndexFunc(leases, func(l Lease) bool { return l.Task == at.Task }); i >= 0 {
				r.HeldBy = &leases[i]
			}
			out.Attempts = append(out.Attempts, r)
		}
	}
	// By task and slot, whatever the order of the store's index (MySQL's is by slot).
	slices.SortStableFunc(out.Attempts, func(x, y RunningNow) int {
		return cmp.Or(strings.Compare(x.Task, y.Task), strings.Compare(x.Slot, y.Slot), x.Number-y.Number)
	})
	return out, leases, nil
}

// listRunning is s's RunningAttempts, ErrUnsupported when s is no RunningLister.
func listRunning(ctx context.Context, s Store, limit int) (RunningList, error) {
	rl, ok := s.(RunningLister)
	if !ok {
		return RunningList{}, ErrUnsupported
	}
	return rl.RunningAttempts(ctx, limit)
}

// LiveTokens are the tokens of the live grants of each task: its exclusive lease's, or its seats'.
func LiveTokens(ls []Lease) map[string]map[int64]bool {
	out := map[string]map[int64]bool{}
	for _, l := range ls {
		if out[l.Task] == nil {
			out[l.Task] = map[int64]bool{}
		}
		out[l.Task][l.Token] = true
	}
	return out
}
