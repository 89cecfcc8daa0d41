package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

// retainSlot names a task's retain document: the time its last Retain pruned up to. It holds no
// attempt and no event, so history, prune and the indexes pass over it as over an empty slot; the
// control character keeps it from every real slot (checkSlot).
const retainSlot = "\x1fretain"

var _ store.Retainer = Ledger{}

// retainMargin widens the window a Retain prunes, for clocks that disagree a little (as once run
// --retain's on the SQL stores).
const retainMargin = time.Minute

// Retain: see store.Retainer. A run with --retain prunes once per every, and otherwise reads one
// small document. The first Retain of a task prunes the whole task; the next ones prune what crossed
// the cutoff since the previous one (its time less retainMargin), walking the history index from
// there: an entry older than that which a later write made prunable (a slot settled long after) is
// left to once prune, as on the SQL stores.
func (l Ledger) Retain(ctx context.Context, task string, before time.Time, every time.Duration) (store.PruneResult, bool, error) {
	if err := store.CheckPrune(store.PruneRequest{Task: task, Before: before}); err != nil {
		return store.PruneResult{}, false, err
	}
	if task == "" {
		return store.PruneResult{}, false, fmt.Errorf("%w: retain: a task is required", store.ErrInvalid)
	}
	m, ver, _, err := l.KV.Load(ctx, task, retainSlot)
	if err != nil {
		return store.PruneResult{}, false, err
	}
	// Not when the last prune went up to within every before this one; when it went past it (a
	// clock ahead, then set right), this one prunes and writes its own time over it.
	if m != nil && m.Retained != nil && !before.Before(*m.Retained) && before.Sub(*m.Retained) < every {
		return store.PruneResult{}, false, nil
	}
	r := store.PruneRequest{Task: task, Before: before}
	if m != nil && m.Retained != nil && m.Retained.Before(before) {
		// What crossed the cutoff since the last prune, as on the SQL stores (PruneRequest.Since):
		// a walk of the history index from there, so a prune costs what aged out since, not every
		// slot's last attempt kept before it (one a minute: 525,600 a year).
		r.Since = m.Retained.Add(-retainMargin)
	}
	res, err := l.Prune(ctx, r)
	if err != nil {
		return res, true, err
	}
	if m == nil {
		m = &Doc{Task: task, Slot: retainSlot}
	}
	m.Retained = &before
	if _, err := l.KV.Save(ctx, m, ver, 0, ""); err != nil && !errors.Is(err, ErrStale) {
		return res, true, err // the prune is done; the next run prunes again
	}
	return res, true, nil // a stale save: another run's Retain recorded its own
}
