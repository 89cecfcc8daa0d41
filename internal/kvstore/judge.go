package kvstore

import (
	"context"
	"errors"
	"sync"

	"github.com/once-run/once/store"
)

// Judging claimants: whether a pending key's claimant is gone (store.Claimant), the one rule every
// operation of Keys but Claim and Complete decides by.

// judge tells, for the pending records among recs, whether their claimant is gone now.
type judge struct {
	now  int64
	live map[grant]bool // the live grants: exclusive or seats
	over map[run]bool   // the runs under a live grant whose attempt is recorded and no longer running
}

// judge reads what deciding about recs needs: the store's clock (always when withNow) and the
// live leases, each only when some pending record depends on it.
func (k *Keys) judge(ctx context.Context, recs map[string]StoredKey, withNow bool) (judge, error) {
	j := judge{}
	needNow, needLeases := withNow, false
	for _, r := range recs {
		if r.Rec.State == store.KeyPending {
			needNow = needNow || r.Rec.TTL > 0
			needLeases = needLeases || r.Rec.Token > 0
		}
	}
	if needNow {
		t, err := k.KV.Now(ctx)
		if err != nil {
			return j, err
		}
		j.now = t.UnixMicro()
	}
	if needLeases {
		ls, err := k.KV.Leases(ctx)
		if err != nil {
			return j, err
		}
		j.live = make(map[grant]bool, len(ls))
		for _, l := range ls {
			j.live[grant{l.Task, l.Token}] = true
		}
		if j.over, err = k.runsOver(ctx, recs, j); err != nil {
			return j, err
		}
	}
	return j, nil
}

func (j judge) gone(r KeyRec) bool {
	if r.State != store.KeyPending {
		return false
	}
	if r.TTL > 0 && r.Claimed+r.TTL <= j.now {
		return true
	}
	return r.Token > 0 && (!j.live[grant{r.Task, r.Token}] || j.over[run{r.Task, r.RunID}])
}

// run names a run claimant's run.
type run struct{ task, id string }

// runsOver reads, for the pending records whose claimant is a run under a live grant (not gone by
// j without it), whether the run's attempt is recorded and no longer running: the run index, then
// the slot's document, per run (at most claimParallel at once). A run the ledger does not know
// (ErrNotFound, or another task's) is not over: its grant decides.
func (k *Keys) runsOver(ctx context.Context, recs map[string]StoredKey, j judge) (map[run]bool, error) {
	if k.Runs == nil {
		return nil, nil
	}
	var runs []run
	seen := map[run]bool{}
	for _, r := range recs {
		x := run{r.Rec.Task, r.Rec.RunID}
		// Pending only: a done key keeps its claimant's task, run and token, and its run is
		// no business of the judge (each distinct run of a batch of done keys would cost reads).
		if r.Rec.State == store.KeyPending && r.Rec.Token > 0 && !seen[x] && !j.gone(r.Rec) {
			seen[x] = true
			runs = append(runs, x)
		}
	}
	over := make([]bool, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, claimParallel)
	var wg sync.WaitGroup
	for i, x := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			over[i], errs[i] = k.runOver(ctx, x)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := map[run]bool{}
	for i, x := range runs {
		if over[i] {
			out[x] = true
		}
	}
	return out, nil
}

// runOver reports whether the ledger records x's attempt and it is no longer running.
func (k *Keys) runOver(ctx context.Context, x run) (bool, error) {
	if _, ok := k.ended.Load(x); ok {
		return true, nil
	}
	over, err := k.readRunOver(ctx, x)
	if over && k.nEnded.Add(1) <= maxEnded {
		k.ended.Store(x, true)
	}
	return over, err
}

// readRunOver is runOver read from the ledger: the run index, then the slot's document.
func (k *Keys) readRunOver(ctx context.Context, x run) (bool, error) {
	task, slot, err := k.Runs.Run(ctx, x.id)
	if errors.Is(err, store.ErrNotFound) || err == nil && task != x.task {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d, _, _, err := k.Runs.Load(ctx, task, slot)
	if err != nil || d == nil {
		return false, err
	}
	for _, a := range d.Attempts {
		if a.RunID == x.id {
			return a.State != store.Running, nil
		}
	}
	return false, nil
}

// grant names a live grant of a task by its token.
type grant struct {
	task  string
	token int64
}
