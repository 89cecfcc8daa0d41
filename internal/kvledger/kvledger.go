// Package kvledger is the run ledger shared by the key-value stores (Redis, etcd, ZooKeeper).
//
// The ledger of one (task, slot) is one document (Doc): its attempts and events. Every transition
// is read → decide in Go → compare-and-set of that one document, fenced by the task's latest lease
// token in the same atomic write (an etcd transaction, a ZooKeeper multi, a Redis Lua script).
// A backend supplies the KV: load a document with a version, save it if the version (and the
// fence) still hold, map a run id to its slot, and list documents. Everything else — the legal
// transitions, failures, waiting, history order — lives here once.
package kvledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"time"

	"github.com/once-run/once/store"
)

// ErrStale is returned by KV.Save when the document changed since it was loaded. The ledger
// reloads and decides again.
var ErrStale = errors.New("kvledger: document changed since it was read")

// Event is a recorded event inside a Doc.
type Event struct {
	Kind    store.State `json:"kind"`
	RunID   string      `json:"run_id,omitempty"`
	Holder  string      `json:"holder,omitempty"`
	Token   int64       `json:"token,omitempty"`
	Attempt int         `json:"attempt,omitempty"`
	Note    string      `json:"note,omitempty"`
	At      time.Time   `json:"at"`
}

// Doc is everything the ledger keeps about one (task, slot), attempts in number order.
type Doc struct {
	Task     string          `json:"task"`
	Slot     string          `json:"slot"`
	Attempts []store.Attempt `json:"attempts,omitempty"`
	Events   []Event         `json:"events,omitempty"`

	waited bool // as read (Unmarshal): the slot waited for a person
}

// Waited reports whether the document waited for a person as it was read from the store (false
// for a new one): a backend whose index needs to know whether an entry exists reads it here.
func (d *Doc) Waited() bool { return d.waited }

// Marshal encodes d for storage.
func (d *Doc) Marshal() []byte {
	b, err := json.Marshal(d)
	if err != nil { // only plain data: cannot fail
		panic(err)
	}
	return b
}

// Unmarshal decodes a stored document; a corrupt one is ErrUnavailable (nothing can be decided).
func Unmarshal(b []byte) (*Doc, error) {
	var d Doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: corrupt ledger document: %v", store.ErrUnavailable, err)
	}
	_, d.waited = d.Waits()
	return &d, nil
}

// Version is a backend's opaque version of a loaded document (a mod revision, a znode version).
type Version = int64

// KV is what a backend provides. All methods return store sentinels (ErrUnavailable, ErrNotHeld)
// or ErrStale.
type KV interface {
	// Load returns the document of (task, slot) or nil when there is none, its version (meaningful
	// to Save only) and the time to stamp transitions with (the store's clock when it has one).
	Load(ctx context.Context, task, slot string) (*Doc, Version, time.Time, error)
	// Save writes d when its version is still ver (ver of a missing document means "create") and,
	// when token > 0, task's latest lease token is still token (ErrNotHeld otherwise). When run is
	// not empty it also records that run id belongs to (d.Task, d.Slot).
	Save(ctx context.Context, d *Doc, ver Version, token int64, run string) error
	// Run returns the task and slot run id began in; ErrNotFound when unknown.
	Run(ctx context.Context, runID string) (task, slot string, err error)
	// Latest returns task's latest lease token, 0 when none was ever issued.
	Latest(ctx context.Context, task string) (int64, error)
	// Docs lists the documents of task, or of every task when task is "".
	Docs(ctx context.Context, task string) ([]*Doc, error)
	// Waiting lists the documents in the backend's index of waiting slots. Save keeps that index
	// in the same atomic write as the document: the document's slot is in it when d.Waits().
	// indexed is false when the index was never built (a ledger of an older once): the ledger
	// then builds it once with Index.
	Waiting(ctx context.Context) (docs []*Doc, indexed bool, err error)
	// Index adds the waiting documents of docs to the index and marks it built.
	Index(ctx context.Context, docs []*Doc) error
	// Delete removes the document (and its index entries) when its version is still ver.
	Delete(ctx context.Context, d *Doc, ver Version) error
	// Unrun removes run ids from the run index (their attempts were pruned). Best effort: a left
	// entry points at a slot without that attempt, which reads as ErrNotFound.
	Unrun(ctx context.Context, runs []string) error
}

// Ledger implements store.Ledger over a KV.
type Ledger struct{ KV KV }

// maxRetries bounds compare-and-set retries when writers race on one document.
const maxRetries = 64

// update loads (task, slot), applies f and saves, retrying when the document changed meanwhile.
// f returns whether there is anything to save.
func (l Ledger) update(ctx context.Context, task, slot string, token int64, run string, f func(d *Doc, now time.Time) (bool, error)) error {
	for range maxRetries {
		d, ver, now, err := l.KV.Load(ctx, task, slot)
		if err != nil {
			return err
		}
		if d == nil {
			d = &Doc{Task: task, Slot: slot}
		}
		changed, err := f(d, now)
		if err != nil || !changed {
			return err
		}
		err = l.KV.Save(ctx, d, ver, token, run)
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
	return fmt.Errorf("%w: token %d is not the latest lease token of task %q (latest %d)", store.ErrNotHeld, token, task, latest)
}

func (l Ledger) fence(ctx context.Context, task string, token int64) error {
	latest, err := l.KV.Latest(ctx, task)
	if err != nil {
		return err
	}
	if latest != token {
		return notLatest(task, token, latest)
	}
	return nil
}

// Begin: see store.Ledger.
func (l Ledger) Begin(ctx context.Context, a store.Attempt) (store.Attempt, error) {
	if a.Task == "" || a.RunID == "" {
		return store.Attempt{}, fmt.Errorf("%w: begin needs a task and a run id", store.ErrConflict)
	}
	if a.Token <= 0 {
		return store.Attempt{}, notLatest(a.Task, a.Token, -1)
	}
	var out store.Attempt
	err := l.update(ctx, a.Task, a.Slot, a.Token, a.RunID, func(d *Doc, now time.Time) (bool, error) {
		last := 0
		if n := len(d.Attempts); n > 0 {
			p := d.Attempts[n-1]
			last = p.Number
			if p.State == store.Running {
				return false, fmt.Errorf("%w: task %q slot %q already has a running attempt (run %s)", store.ErrConflict, a.Task, a.Slot, p.RunID)
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
		d.Attempts = append(d.Attempts, out)
		return true, nil
	})
	if err != nil {
		return store.Attempt{}, err
	}
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
	task, slot, err := l.KV.Run(ctx, runID)
	if err != nil {
		return store.Attempt{}, err
	}
	var out store.Attempt
	err = l.update(ctx, task, slot, token, "", func(d *Doc, now time.Time) (bool, error) {
		a, err := running(d, runID, token)
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				// A stale holder learns it is stale first.
				if ferr := l.fence(ctx, task, token); ferr != nil {
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
	if !o.State.Finishable() {
		return store.Attempt{}, fmt.Errorf("%w: an attempt can only finish as succeeded, failed or unknown, not %q", store.ErrConflict, o.State)
	}
	return l.onRun(ctx, runID, token, func(a *store.Attempt, now time.Time) {
		end := now
		if end.Before(a.StartedAt) {
			end = a.StartedAt
		}
		a.State, a.EndedAt, a.Note = o.State, &end, joinNote(a.Note, o.Note)
		if o.ExitCode != nil {
			c := *o.ExitCode
			a.ExitCode = &c
		}
	})
}

func joinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Report: see store.Ledger.
func (l Ledger) Report(ctx context.Context, runID string, token int64, r store.Report) error {
	_, err := l.onRun(ctx, runID, token, func(a *store.Attempt, _ time.Time) {
		if r.Records != nil {
			a.Records = *r.Records
		}
		if r.Progress != "" {
			a.Progress = r.Progress
		}
		if r.Checkpoint != "" {
			a.Checkpoint = r.Checkpoint
		}
		if r.Note != "" {
			a.Note = r.Note
		}
	})
	return err
}

// Abandon: see store.Ledger. Each slot is abandoned in its own fenced write.
func (l Ledger) Abandon(ctx context.Context, task string, token int64) ([]store.Attempt, error) {
	if err := l.fence(ctx, task, token); err != nil {
		return nil, err
	}
	docs, err := l.KV.Docs(ctx, task)
	if err != nil {
		return nil, err
	}
	out := []store.Attempt{}
	for _, d0 := range docs {
		if !hasStale(d0, token) {
			continue
		}
		var got []store.Attempt
		err := l.update(ctx, task, d0.Slot, token, "", func(d *Doc, now time.Time) (bool, error) {
			got = got[:0]
			for i := range d.Attempts {
				a := &d.Attempts[i]
				if a.State == store.Running && a.Token < token {
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

func hasStale(d *Doc, token int64) bool {
	for _, a := range d.Attempts {
		if a.State == store.Running && a.Token < token {
			return true
		}
	}
	return false
}

// Resolve: see store.Ledger.
func (l Ledger) Resolve(ctx context.Context, r store.ResolveRequest) (store.Attempt, error) {
	if r.As != store.Succeeded && r.As != store.Failed {
		return store.Attempt{}, fmt.Errorf("%w: a slot can only be resolved as succeeded or failed, not %q", store.ErrConflict, r.As)
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
	switch e.Kind {
	case store.Skipped, store.Busy, store.Review:
	default:
		return fmt.Errorf("%w: event kind %q is not skipped, busy or review", store.ErrConflict, e.Kind)
	}
	return l.update(ctx, e.Task, e.Slot, 0, "", func(d *Doc, now time.Time) (bool, error) {
		d.Events = append(d.Events, Event{Kind: e.Kind, RunID: e.RunID, Holder: e.Holder, Token: e.Token, Attempt: e.Attempt, Note: e.Note, At: now})
		return true, nil
	})
}

// State computes the slot state of d.
func (d *Doc) State() store.SlotState {
	st := store.SlotState{Task: d.Task, Slot: d.Slot}
	n := len(d.Attempts)
	if n == 0 {
		return st
	}
	last := d.Attempts[n-1]
	st.Last = &last
	for i := n - 1; i >= 0; i-- {
		a := d.Attempts[i]
		if st.Checkpoint == "" && a.Checkpoint != "" {
			st.Checkpoint = a.Checkpoint
		}
	}
	resolved := 0
	for _, a := range d.Attempts {
		if a.Resolution != nil {
			resolved = a.Number
		}
	}
	for _, a := range d.Attempts {
		if a.Number > resolved && (a.State == store.Failed || a.State == store.Unknown) {
			st.Failures++
		}
	}
	review := false
	for _, e := range d.Events {
		if e.Kind == store.Review && e.Attempt == last.Number {
			review = true
		}
	}
	st.Waiting = last.Resolution == nil && (last.State == store.Unknown || review)
	return st
}

// Slot: see store.Ledger.
func (l Ledger) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	d, _, _, err := l.KV.Load(ctx, task, slot)
	if err != nil {
		return store.SlotState{}, err
	}
	if d == nil {
		return store.SlotState{Task: task, Slot: slot}, nil
	}
	return d.State(), nil
}

// Waits reports whether the slot waits for a person (store.SlotState.Waiting) and since when:
// its last attempt's end, or start when it has none (the order of Waiting).
func (d *Doc) Waits() (time.Time, bool) {
	st := d.State()
	if !st.Waiting {
		return time.Time{}, false
	}
	if st.Last.EndedAt != nil {
		return *st.Last.EndedAt, true
	}
	return st.Last.StartedAt, true
}

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

// key is the cursor key of a document's entries: its task and slot.
func (d *Doc) key() string { return d.Task + "\x00" + d.Slot }

// History: see store.Ledger. Every page reads the documents of the task (or of every task) and
// sorts their entries: a page costs the task's history, not the page. A cursor's Seq is an
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
			keep(store.Entry{Attempt: a}, store.CursorOf(a.StartedAt, false, d.key(), int64(a.Number)))
		}
		for i, e := range d.Events {
			keep(store.Entry{Attempt: store.Attempt{Task: d.Task, Slot: d.Slot, RunID: e.RunID, Number: e.Attempt, State: e.Kind,
				Holder: e.Holder, Token: e.Token, StartedAt: e.At, Note: e.Note}}, store.CursorOf(e.At, true, d.key(), int64(i)))
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
			err = l.KV.Save(ctx, d, ver, 0, "")
		}
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
