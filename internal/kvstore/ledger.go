package kvstore

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/once-run/once/store"
)

// update loads (task, slot), applies f and saves, retrying when the document changed meanwhile.
// f returns whether there is anything to save. The first try starts from the memo's document when
// it has a fresh one (a wrong guess fails the save and is read again).
func (l Ledger) update(ctx context.Context, task, slot string, token int64, run string, f func(d *Doc, now time.Time) (bool, error)) error {
	return l.updateWith(ctx, task, slot, func(ctx context.Context, d *Doc, ver Version) (Version, error) {
		return l.KV.Save(ctx, d, ver, token, run)
	}, f)
}

// updateWith is update with the write save (KV.Save, or FinishKV.SaveRelease).
func (l Ledger) updateWith(ctx context.Context, task, slot string, save func(ctx context.Context, d *Doc, ver Version) (Version, error), f func(d *Doc, now time.Time) (bool, error)) error {
	for range maxRetries {
		d, ver, now, c, ok := l.memo.get(task, slot)
		if !ok {
			var err error
			if d, ver, now, err = l.KV.Load(ctx, task, slot); err != nil {
				return err
			}
			if err := l.counted(ctx, d); err != nil {
				return err
			}
			c.now, c.anchor = now, time.Now()
		}
		if d == nil {
			d = &Doc{Task: task, Slot: slot}
		}
		now = l.memo.clamp(now)
		changed, err := f(d, now)
		if err != nil || !changed {
			if ok {
				// Decided from the memo's document, which may have changed since: only a write's
				// compare-and-set confirms it. Decide again from a fresh read.
				l.memo.drop(task, slot)
				continue
			}
			return err
		}
		nv, err := save(ctx, d, ver)
		if err == nil {
			l.memo.put(task, slot, d, nv, c)
			return nil
		}
		l.memo.drop(task, slot)
		if !errors.Is(err, ErrStale) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%w: task %q slot %q: too many concurrent writers", store.ErrConflict, task, slot)
}

func notLatest(task string, token, latest int64) error {
	return fmt.Errorf("%w: token %d is not a current lease token of task %q (latest %d)", store.ErrNotHeld, token, task, latest)
}

// fence reads task's grants and refuses a token that is not current.
func (l Ledger) fence(ctx context.Context, task string, token int64) (Grants, error) {
	g, err := l.KV.Grants(ctx, task)
	if err != nil {
		return g, err
	}
	if !g.Current(token) {
		return g, notLatest(task, token, g.Latest)
	}
	return g, nil
}

// Begin: see store.Ledger.
func (l Ledger) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	if err := a.Check(); err != nil {
		return store.Attempt{}, err
	}
	if a.Token <= 0 {
		return store.Attempt{}, notLatest(a.Task, a.Token, -1)
	}
	if err := checkSlot(a.Slot); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := l.update(ctx, a.Task, a.Slot, a.Token, a.RunID, func(d *Doc, now time.Time) (bool, error) {
		last := 0
		if d.Archived != nil {
			last = d.Archived.Through
		}
		if n := len(d.Attempts); n > 0 {
			p := d.Attempts[n-1]
			last = p.Number
			if p.State == store.Running {
				return false, fmt.Errorf("%w: task %q slot %q already has a running attempt (run %s)", store.ErrConflict, a.Task, a.Slot, p.RunID)
			}
			if p.Resolution != nil && p.Resolution.As == store.Succeeded && a.Slot != "" { // slot "": no memory, every run runs
				return false, store.ResolvedDone(a.Task, a.Slot, p.Number)
			}
		}
		n := a.Number
		if n == 0 {
			n = last + 1
		}
		if n != last+1 {
			return false, fmt.Errorf("%w: task %q slot %q: attempt %d refused, the next attempt is %d", store.ErrConflict, a.Task, a.Slot, n, last+1)
		}
		for _, p := range d.Attempts {
			if p.RunID == a.RunID {
				return false, fmt.Errorf("%w: run id %q was already used in task %q slot %q", store.ErrConflict, a.RunID, a.Task, a.Slot)
			}
		}
		out = a
		out.Number, out.State, out.StartedAt = n, store.Running, now
		out.EndedAt, out.ExitCode, out.Resolution = nil, nil, nil
		l.archive(ctx, d)
		d.Attempts = append(d.Attempts, out)
		return true, nil
	})
	if err != nil {
		return store.Attempt{}, err
	}
	l.memo.began(a.RunID, a.Task, a.Slot)
	return out, nil
}

// running finds the attempt runID in d for a fenced write.
func running(d *Doc, runID string, token int64) (*store.Attempt, error) {
	for i := range d.Attempts {
		a := &d.Attempts[i]
		if a.RunID != runID {
			continue
		}
		if a.State != store.Running {
			return nil, fmt.Errorf("%w: run %s is %s, not running", store.ErrConflict, runID, a.State)
		}
		if a.Token != token {
			return nil, fmt.Errorf("%w: run %s began under token %d, not %d", store.ErrNotHeld, runID, a.Token, token)
		}
		return a, nil
	}
	return nil, fmt.Errorf("%w: no attempt with run id %q", store.ErrNotFound, runID)
}

// onRun applies f to the running attempt runID, fenced by token.
func (l Ledger) onRun(ctx context.Context, runID string, token int64, f func(a *store.Attempt, now time.Time)) (store.Attempt, error) {
	return l.onRunWith(ctx, runID, token, nil, f)
}

// onRunWith is onRun with the write save (nil: KV.Save fenced by token).
func (l Ledger) onRunWith(ctx context.Context, runID string, token int64, save func(ctx context.Context, d *Doc, ver Version) (Version, error), f func(a *store.Attempt, now time.Time)) (store.Attempt, error) {
	task, slot, ok := l.memo.run(runID)
	if !ok {
		var err error
		if task, slot, err = l.KV.Run(ctx, runID); err != nil {
			return store.Attempt{}, err
		}
	}
	if save == nil {
		save = func(ctx context.Context, d *Doc, ver Version) (Version, error) {
			return l.KV.Save(ctx, d, ver, token, "")
		}
	}
	var out store.Attempt
	err := l.updateWith(ctx, task, slot, save, func(d *Doc, now time.Time) (bool, error) {
		a, err := running(d, runID, token)
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				// A stale holder learns it is stale first.
				if _, ferr := l.fence(ctx, task, token); ferr != nil {
					return false, ferr
				}
			}
			return false, err
		}
		f(a, now)
		out = *a
		return true, nil
	})
	return out, err
}

// Finish: see store.Ledger.
func (l Ledger) Finish(ctx context.Context, runID string, token int64, o store.Outcome) (store.Attempt, error) {
	return l.finish(ctx, runID, token, o, nil)
}

// finish records o on the running attempt runID with the write save (nil: KV.Save).
func (l Ledger) finish(ctx context.Context, runID string, token int64, o store.Outcome, save func(ctx context.Context, d *Doc, ver Version) (Version, error)) (store.Attempt, error) {
	if !o.State.Finishable() {
		return store.Attempt{}, fmt.Errorf("%w: an attempt can only finish as succeeded, failed or unknown, not %q", store.ErrConflict, o.State)
	}
	if err := o.Check(); err != nil {
		return store.Attempt{}, err
	}
	a, err := l.onRunWith(ctx, runID, token, save, func(a *store.Attempt, now time.Time) {
		end := now
		if end.Before(a.StartedAt) {
			end = a.StartedAt
		}
		a.State, a.EndedAt, a.Note = o.State, &end, store.JoinNote(a.Note, o.Note)
		if o.ExitCode != nil {
			c := *o.ExitCode
			a.ExitCode = &c
		}
	})
	if err == nil {
		l.memo.ended(runID)
	}
	return a, err
}

// Report: see store.Ledger.
func (l Ledger) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	if err := r.Check(); err != nil {
		return err
	}
	_, err := l.onRun(ctx, runID, token, func(a *store.Attempt, _ time.Time) {
		r.Apply(a)
	})
	return err
}

// Abandon: see store.Ledger. Each slot is abandoned in its own fenced write. The running
// attempts of the task's other live seats are left alone. With a running index (RunningKV) it
// reads the slots that have a running attempt, not the task's history.
func (l Ledger) Abandon(ctx context.Context, task string, token int64) ([]store.Attempt, error) {
	return l.abandon(ctx, task, token, nil)
}

// abandon is Abandon, looking at the document also (an older once's attempt may be missing from
// the running index).
func (l Ledger) abandon(ctx context.Context, task string, token int64, also *Doc) ([]store.Attempt, error) {
	g, err := l.fence(ctx, task, token)
	if err != nil {
		return nil, err
	}
	docs, listed, err := l.runningDocs(ctx, task)
	if err != nil {
		return nil, err
	}
	if also != nil {
		docs = append(docs, also)
	}
	out := []store.Attempt{}
	done := map[string]bool{}
	for _, d0 := range docs {
		if done[d0.key()] {
			continue
		}
		done[d0.key()] = true
		if !hasStale(d0, token, g) {
			if listed[d0.key()] && !d0.Runs() {
				l.unindex(ctx, d0)
			}
			continue
		}
		var got []store.Attempt
		err := l.update(ctx, task, d0.Slot, token, "", func(d *Doc, now time.Time) (bool, error) {
			got = got[:0]
			for i := range d.Attempts {
				a := &d.Attempts[i]
				if stale(*a, token, g) {
					end := now
					a.State, a.EndedAt = store.Unknown, &end
					got = append(got, *a)
				}
			}
			return len(got) > 0, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// runningDocs returns the documents of task that may have a running attempt: those its running
// index lists (listed: by Doc.key) when the backend keeps one, and every document of the task when
// the backend keeps none or has not built it (which it then builds from them).
func (l Ledger) runningDocs(ctx context.Context, task string) (docs []*Doc, listed map[string]bool, err error) {
	rk, ok := l.KV.(RunningKV)
	if !ok {
		docs, err = l.KV.Docs(ctx, task)
		return docs, nil, err
	}
	docs, indexed, err := rk.Running(ctx, task)
	if err != nil {
		return nil, nil, err
	}
	listed = make(map[string]bool, len(docs))
	for _, d := range docs {
		listed[d.key()] = true
	}
	if indexed {
		return docs, listed, nil
	}
	all, err := l.KV.Docs(ctx, task)
	if err != nil {
		return nil, nil, err
	}
	if err := rk.IndexRunning(ctx, task, all); err != nil {
		return nil, nil, err
	}
	return append(all, docs...), listed, nil
}

// unindex takes a slot whose document has no running attempt out of the running index (an entry
// left by an index built while an attempt finished, or by an older once's write), by writing the
// document back unchanged: Save keeps the index. Best effort: the entry only costs a read.
func (l Ledger) unindex(ctx context.Context, d0 *Doc) {
	d1, ver, _, err := l.KV.Load(ctx, d0.Task, d0.Slot)
	if err != nil || d1 != nil && d1.Runs() {
		return
	}
	if d1 == nil { // gone (an older once's prune): Delete takes its index entries out
		_ = l.KV.Delete(ctx, &Doc{Task: d0.Task, Slot: d0.Slot}, 0)
		return
	}
	d1.ran = true // the index has it: the backend takes it out
	_, _ = l.KV.Save(ctx, d1, ver, 0, "")
}

func hasStale(d *Doc, token int64, g Grants) bool {
	for _, a := range d.Attempts {
		if stale(a, token, g) {
			return true
		}
	}
	return false
}

// stale is true for an attempt an Abandon with token marks unknown: running under an older
// token that is not a live seat's.
func stale(a store.Attempt, token int64, g Grants) bool {
	return a.State == store.Running && a.Token < token && !g.Live(a.Token)
}

// Resolve: see store.Ledger.
func (l Ledger) Resolve(ctx context.Context, r store.ResolveRequest) (store.Attempt, error) {
	if r.As != store.Succeeded && r.As != store.Failed {
		return store.Attempt{}, fmt.Errorf("%w: a slot can only be resolved as succeeded or failed, not %q", store.ErrConflict, r.As)
	}
	if err := r.Check(); err != nil {
		return store.Attempt{}, err
	}
	if err := checkSlot(r.Slot); err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err := l.update(ctx, r.Task, r.Slot, 0, "", func(d *Doc, now time.Time) (bool, error) {
		if len(d.Attempts) == 0 {
			return false, fmt.Errorf("%w: task %q slot %q has no attempt to resolve", store.ErrNotFound, r.Task, r.Slot)
		}
		a := &d.Attempts[len(d.Attempts)-1]
		if a.Resolution != nil {
			return false, fmt.Errorf("%w: task %q slot %q attempt %d was already resolved as %s by %s", store.ErrConflict, r.Task, r.Slot, a.Number, a.Resolution.As, a.Resolution.By)
		}
		if a.State != store.Failed && a.State != store.Unknown {
			return false, fmt.Errorf("%w: task %q slot %q attempt %d is %s; only failed or unknown attempts can be resolved", store.ErrConflict, r.Task, r.Slot, a.Number, a.State)
		}
		a.Resolution = &store.Resolution{As: r.As, By: r.By, At: now, Note: r.Note}
		out = *a
		return true, nil
	})
	return out, err
}

// Record: see store.Ledger.
func (l Ledger) Record(ctx context.Context, e store.Event) error {
	if err := store.CheckEvent(e); err != nil {
		return err
	}
	if err := checkSlot(e.Slot); err != nil {
		return err
	}
	return l.update(ctx, e.Task, e.Slot, 0, "", func(d *Doc, now time.Time) (bool, error) {
		l.archive(ctx, d)
		d.Events = append(d.Events, Event{Kind: e.Kind, RunID: e.RunID, Holder: e.Holder, Token: e.Token, Attempt: e.Attempt, Note: e.Note, At: now})
		return true, nil
	})
}

// Slot: see store.Ledger.
func (l Ledger) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	if err := checkSlot(slot); err != nil {
		return store.SlotState{}, err
	}
	d, _, _, err := l.KV.Load(ctx, task, slot)
	if err == nil {
		err = l.counted(ctx, d)
	}
	if err != nil {
		return store.SlotState{}, err
	}
	if d == nil {
		return store.SlotState{Task: task, Slot: slot}, nil
	}
	return d.State(), nil
}
