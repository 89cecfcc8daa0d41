package once

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/once-run/once/flock"
	"github.com/once-run/once/lease"
	"github.com/once-run/once/store"
)

// localWaitAfterExpiry bounds how long a replacing run waits for the replaced holder's local lock
// once that holder's grant has expired: by then its work is dead (Run.StopBy), and the process
// only records what it can and exits.
const localWaitAfterExpiry = 30 * time.Second

// awaitReplaced is step 2b of a run with Options.Replace: when the lease was taken over from a
// live holder, wait until that grant's expiry by the store's clock — the replaced holder learns
// at its next renewal (or at once, from a store.LossNotifier) that the grant is gone, and its work
// is dead by its Run.StopBy, a sixth of the TTL before that expiry — then, with pendingLock, take
// the local lock that holder's process held on this machine. got is a local instant after the
// grant taken was received. It returns the local lock's unlock, or a Busy result when the lease was
// taken over in turn while waiting or the local lock stayed held.
func (g *guard) awaitReplaced(ctx context.Context, ls *lease.Lease, taken store.Lease, got time.Time, pendingLock bool) (unlock func(), busy *Result, err error) {
	unlock = func() {}
	info := taken
	if r := info.Replaced; r != nil {
		until := got.Add(r.Expires.Sub(info.Acquired))
		g.log.Warn("replacing the running holder: waiting until its grant expires, by when its work has stopped",
			"token", info.Token, "prev_holder", r.Holder, "prev_run_id", r.RunID, "prev_token", r.Token, "prev_grants", len(r.Tokens),
			"wait", time.Until(until).Round(time.Millisecond).String())
		t := time.NewTimer(time.Until(until))
		select {
		case <-t.C:
		case <-ls.Lost():
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("interrupted while waiting for the replaced holder to stop: %w", context.Cause(ctx))
		}
		if err := ls.Err(); err != nil {
			reason := fmt.Sprintf("replaced in turn while waiting for holder %s to stop: %v", r.Holder, err)
			g.log.Info("busy", "reason", reason)
			return nil, &Result{Decision: Busy, Reason: reason}, nil
		}
	}
	if !pendingLock {
		return unlock, nil, nil
	}
	lk, err := flock.Acquire(ctx, g.o.LockDir, g.o.Task, localWaitAfterExpiry)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("interrupted while waiting for the local lock: %w", context.Cause(ctx))
	case errors.Is(err, flock.ErrBusy):
		reason := fmt.Sprintf("another once on this machine still holds the task's lock %s after the replaced grant expired", localWaitAfterExpiry)
		g.busyEvent(ctx, reason, nil)
		return nil, &Result{Decision: Busy, Reason: reason}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("local lock: %w", err)
	}
	return func() { _ = lk.Release() }, nil, nil
}

// wasReplaced reports whether an attempt begun under token was the work of a live grant that the
// takeover which gave the grant taken ended (store.Replacement.Tokens). Replaced.Token alone is
// not enough: over seats it may be a seat that had expired (a vanished holder) or was released.
func wasReplaced(taken store.Lease, token int64) bool {
	r := taken.Replaced
	return r != nil && slices.Contains(r.Tokens, token)
}

// resolveReplaced settles the attempts the replaced holder left running (just marked unknown by
// abandon) under the grant taken: each is resolved as failed, by this holder, with a note naming this run, so that its
// slot runs again at once — this run's slot now — instead of waiting for a person. Whether its
// work's effects happened is still unknown; the attempt keeps that state, and the next attempt
// of the slot is told so (ONCE_PREVIOUS=unknown).
func (g *guard) resolveReplaced(ctx context.Context, taken store.Lease, abandoned []store.Attempt) {
	if taken.Replaced == nil {
		return
	}
	for _, a := range abandoned {
		if !wasReplaced(taken, a.Token) {
			continue
		}
		note := fmt.Sprintf("replaced by run %s of %s (token %d, --replace): its work was stopped", g.runID, g.o.Holder, taken.Token)
		_, err := g.o.Store.Resolve(ctx, store.ResolveRequest{Task: a.Task, Slot: a.Slot, As: store.Failed, By: g.o.Holder, Note: note})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			g.log.Warn("could not record the replaced attempt as resolved; it waits for review", "prev_slot", a.Slot,
				"prev_run_id", a.RunID, "err", err)
			continue
		}
		g.log.Warn("replaced attempt recorded unknown and resolved as failed", "prev_slot", a.Slot, "prev_run_id", a.RunID,
			"prev_holder", a.Holder, "prev_token", a.Token, "prev_attempt", a.Number)
	}
}
