package store

import (
	"context"
	"fmt"
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
