package cli

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// retainFromEnv reads ONCE_RETAIN when --retain is not given.
func retainFromEnv(c *cobra.Command, f *runFlags) error {
	v, set := os.LookupEnv("ONCE_RETAIN")
	if c.Flags().Changed("retain") || !set {
		return nil
	}
	if err := (ageFlag{&f.retain}).Set(v); err != nil {
		return usage("ONCE_RETAIN: %v", err)
	}
	return nil
}

// retainMargin widens the window a run prunes, for clocks that disagree a little.
const retainMargin = time.Minute

// retainEvery is how often a store that prunes the whole task for --retain (store.Retainer: the
// key-value stores) does: a 24th of the age, from a minute to an hour. What it keeps beyond the age
// is at most that.
func retainEvery(age time.Duration) time.Duration {
	return min(time.Hour, max(time.Minute, age/24))
}

// retain prunes the task's history older than --retain after a run that made an attempt, by the
// rule of once prune (never a slot's last attempt, nothing a decision reads), and only what
// crossed the cutoff since the task's previous launch: the window (previous launch − retain −
// margin, now − retain). So a run costs what aged out since the last one, not the ledger. A store
// without an index by time (store.Retainer: the key-value stores) prunes the whole task instead,
// at most once per retainEvery. Entries
// a failed or skipped prune left behind are left to once prune. A prune that fails is logged and
// changes nothing of the run's outcome or exit status.
func (rn *runner) retain(ctx context.Context, s store.Store, rs []once.Result) {
	f := rn.f
	if f.retain <= 0 {
		return
	}
	ran := false
	for _, r := range rs {
		ran = ran || r.Decision == once.Ran
	}
	if !ran || ctx.Err() != nil {
		return
	}
	now, err := storeNow(ctx, s)
	if err != nil {
		rn.log.Warn("retain: could not read the store's clock; nothing pruned", "error", err)
		return
	}
	before := now.Add(-f.retain)
	var res store.PruneResult
	if rt, ok := s.(store.Retainer); ok { // a key-value store: the whole task, now and then
		res, _, err = rt.Retain(ctx, f.task, before, retainEvery(f.retain))
	} else {
		var since time.Time
		if since, err = rn.previousLaunch(ctx, s, rs); err != nil || since.IsZero() {
			if err != nil {
				rn.log.Warn("retain: could not read the task's history; nothing pruned", "error", err)
			}
			return
		}
		r := store.PruneRequest{Task: f.task, Before: before, Since: since.Add(-f.retain - retainMargin)}
		if !r.Since.Before(r.Before) {
			return
		}
		res, err = s.Prune(ctx, r)
	}
	if err != nil {
		rn.log.Warn("retain: prune failed; the run's outcome is recorded", "error", err)
		return
	}
	if res.Attempts+res.Events > 0 {
		rn.log.Debug("retain: pruned", "attempts", res.Attempts, "events", res.Events, "older_than", before.UTC().Format(time.RFC3339))
	}
}

// previousLaunch is when the task's launch before this one (whose results are rs) started: the
// newest entry of the task's history that started before this launch's first attempt, zero when
// there is none. Entries newer than that are this launch's, or other launches' that found the task
// busy or the slot done meanwhile (taking the n+1-th newest entry read one of those, and the
// window then began at this launch: nothing was pruned). A short page is read first; the rest only
// when this run overlapped many launches.
func (rn *runner) previousLaunch(ctx context.Context, s store.Store, rs []once.Result) (time.Time, error) {
	var first time.Time
	for _, r := range rs {
		if r.Decision == once.Ran && r.Attempt != nil && (first.IsZero() || r.Attempt.StartedAt.Before(first)) {
			first = r.Attempt.StartedAt
		}
	}
	if first.IsZero() {
		return time.Time{}, nil
	}
	q := store.HistoryQuery{Task: rn.f.task, Limit: len(rs) + 8}
	for {
		es, err := s.History(ctx, q)
		if err != nil {
			return time.Time{}, err
		}
		for _, e := range es {
			if e.StartedAt.Before(first) {
				return e.StartedAt, nil
			}
		}
		if len(es) < q.Limit {
			return time.Time{}, nil
		}
		q.Before, q.Limit = es[len(es)-1].Cursor, 200
	}
}
