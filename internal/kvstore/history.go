package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"time"

	"github.com/once-run/once/store"
)

// Waiting: see store.Ledger. It reads the backend's index of waiting slots, so it costs the slots
// waiting (and, on Redis, the tasks); the first call on a ledger of an older once builds the index
// from every document, once.
func (l Ledger) Waiting(ctx context.Context) ([]store.SlotState, error) {
	docs, indexed, err := l.KV.Waiting(ctx)
	if err != nil {
		return nil, err
	}
	if !indexed {
		if docs, err = l.KV.Docs(ctx, ""); err != nil {
			return nil, err
		}
		if err := l.KV.Index(ctx, docs); err != nil {
			return nil, err
		}
	}
	type waiting struct {
		st    store.SlotState
		since time.Time
	}
	var ws []waiting
	for _, d := range docs {
		if since, ok := d.Waits(); ok {
			ws = append(ws, waiting{d.State(), since})
		}
	}
	sort.Slice(ws, func(i, j int) bool {
		a, b := ws[i], ws[j]
		if !a.since.Equal(b.since) {
			return a.since.Before(b.since)
		}
		if a.st.Task != b.st.Task {
			return a.st.Task < b.st.Task
		}
		return a.st.Slot < b.st.Slot
	})
	out := make([]store.SlotState, len(ws))
	for i, w := range ws {
		out[i] = w.st
	}
	return out, nil
}

// History: see store.Ledger. Every page reads the documents of the task (or of every task) and
// sorts their entries of q's Kind: a page costs the task's history, not the page. A cursor's Seq is an
// attempt's number or an event's place among its slot's events.
func (l Ledger) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	before, after, err := q.Cursors()
	if err != nil {
		return nil, err
	}
	docs, err := l.KV.Docs(ctx, q.Task)
	if err != nil {
		return nil, err
	}
	type item struct {
		e store.Entry
		c store.Cursor
	}
	var items []item
	keep := func(e store.Entry, c store.Cursor) {
		if store.InPage(c, before, after) {
			e.Cursor = c.String()
			items = append(items, item{e, c})
		}
	}
	for _, d := range docs {
		if q.Task != "" && d.Task != q.Task || q.Slot != "" && d.Slot != q.Slot {
			continue
		}
		for _, a := range d.Attempts {
			if q.Selects(a.State) {
				keep(store.Entry{Attempt: a}, store.CursorOf(a.StartedAt, false, d.key(), int64(a.Number)))
			}
		}
		for i, e := range d.Events {
			if q.Selects(e.Kind) {
				keep(store.Entry{Attempt: store.Attempt{Task: d.Task, Slot: d.Slot, RunID: e.RunID, Number: e.Attempt, State: e.Kind,
					Holder: e.Holder, Token: e.Token, StartedAt: e.At, Note: e.Note}}, store.CursorOf(e.At, true, d.key(), int64(i)))
			}
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].c.Precedes(items[j].c) })
	if q.Limit > 0 && len(items) > q.Limit {
		if after != nil {
			items = items[len(items)-q.Limit:] // the page nearest the cursor
		} else {
			items = items[:q.Limit]
		}
	}
	out := make([]store.Entry, len(items))
	for i, it := range items {
		out[i] = it.e
	}
	return out, nil
}

// Prune: see store.Ledger. It reads the documents of the task (or of every task), applies
// store.PruneRequest.Decide to each entry and rewrites a document only when something in it goes,
// with the same compare-and-set as every write (unfenced: it never touches what a run decides by).
func (l Ledger) Prune(ctx context.Context, r store.PruneRequest) (store.PruneResult, error) {
	var res store.PruneResult
	if err := store.CheckPrune(r); err != nil {
		return res, err
	}
	docs, err := l.KV.Docs(ctx, r.Task)
	if err != nil {
		return res, err
	}
	for _, d0 := range docs {
		if r.Task != "" && d0.Task != r.Task {
			continue
		}
		if r.DryRun {
			got, _, _ := prune(d0, r)
			res.Add(got)
			continue
		}
		got, err := l.pruneDoc(ctx, d0.Task, d0.Slot, r)
		if err != nil {
			return res, err
		}
		res.Add(got)
	}
	return res, nil
}

// pruneDoc prunes one document, again from a fresh read after a concurrent write.
func (l Ledger) pruneDoc(ctx context.Context, task, slot string, r store.PruneRequest) (store.PruneResult, error) {
	for range maxRetries {
		d, ver, _, err := l.KV.Load(ctx, task, slot)
		if err != nil || d == nil {
			return store.PruneResult{}, err
		}
		got, forget, runs := prune(d, r)
		if got == (store.PruneResult{}) {
			return got, nil
		}
		if forget {
			err = l.KV.Delete(ctx, d, ver)
		} else {
			_, err = l.KV.Save(ctx, d, ver, 0, "")
		}
		l.memo.drop(task, slot) // a removed document's version may be given again (Redis, ZooKeeper)
		if errors.Is(err, ErrStale) {
			continue
		}
		if err != nil {
			return store.PruneResult{}, err
		}
		_ = l.KV.Unrun(ctx, runs) // best effort: see KV.Unrun
		return got, nil
	}
	return store.PruneResult{}, fmt.Errorf("%w: task %q slot %q: too many concurrent writers to prune it", store.ErrConflict, task, slot)
}

// prune applies the rule to d in place: it returns what goes, whether the whole slot goes, and the
// run ids of the attempts that go.
func prune(d *Doc, r store.PruneRequest) (res store.PruneResult, forget bool, runs []string) {
	f := store.PruneFacts{}
	if n := len(d.Attempts); n > 0 {
		f.Last = d.Attempts[n-1]
	}
	for _, a := range d.Attempts {
		if a.Checkpoint != "" {
			f.Checkpoint = a.Number
		}
		if !a.StartedAt.Before(r.Before) {
			f.Recent = true
		}
	}
	for _, e := range d.Events {
		if !e.At.Before(r.Before) {
			f.Recent = true
		}
	}
	var keepA []store.Attempt
	for _, a := range d.Attempts {
		fa := f
		fa.Kind, fa.Number, fa.At = a.State, a.Number, a.StartedAt
		switch r.Decide(fa) {
		case store.Forget:
			forget = true
		case store.Drop:
			res.Attempts++
			runs = append(runs, a.RunID)
			continue
		}
		keepA = append(keepA, a)
	}
	if forget { // the slot goes whole, together
		res = store.PruneResult{Attempts: int64(len(d.Attempts)), Events: int64(len(d.Events)), Slots: 1}
		runs = runs[:0]
		for _, a := range d.Attempts {
			runs = append(runs, a.RunID)
		}
		return res, true, runs
	}
	var keepE []Event
	for _, e := range d.Events {
		fe := f
		fe.Event, fe.Kind, fe.Number, fe.At, fe.Recent = true, e.Kind, e.Attempt, e.At, true
		if r.Decide(fe) != store.Keep {
			res.Events++
			continue
		}
		keepE = append(keepE, e)
	}
	d.Attempts, d.Events = keepA, keepE
	return res, false, runs
}
