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

// History: see store.Ledger. With a history index (HistoryKV) a page reads the marks from its
// cursor on and the documents they name: it costs the page (historyPage); a query for a slot
// without a task reads each task's document of that slot (slotDocsAll). Without one, every page
// reads the documents of the task (or of every task) and sorts their entries of q's Kind. A query
// for one task's slot reads that slot's documents only (slotDocs). A cursor's Seq is an attempt's
// number or an event's place among its document's events.
func (l Ledger) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	before, after, err := q.Cursors()
	if err != nil {
		return nil, err
	}
	var docs []*Doc
	hk, indexed := l.KV.(HistoryKV)
	switch {
	case q.Task != "" && q.Slot != "":
		docs, err = l.slotDocs(ctx, q.Task, q.Slot)
	case q.Slot != "" && indexed:
		docs, err = l.slotDocsAll(ctx, hk, q.Slot)
	case indexed:
		return l.historyPage(ctx, hk, q, before, after)
	default:
		docs, err = l.KV.Docs(ctx, q.Task)
	}
	if err != nil {
		return nil, err
	}
	var items []item
	keep := func(e store.Entry, c store.Cursor) { items = append(items, item{e, c}) }
	_, counts := acknowledged(docs)
	for _, d := range docs {
		slot, _, _ := splitArchive(d.Slot)
		if q.Task != "" && d.Task != q.Task || q.Slot != "" && slot != q.Slot || !counts(d) {
			continue
		}
		entries(d, q, before, after, nil, keep)
	}
	return page(items, q.Limit, after != nil), nil
}

// page sorts items in history order and keeps limit of them (0: all), those nearest the cursor:
// the newest, or with up (a page After a cursor) the oldest.
func page(items []item, limit int, up bool) []store.Entry {
	sort.Slice(items, func(i, j int) bool { return items[i].c.Precedes(items[j].c) })
	if limit > 0 && len(items) > limit {
		if up {
			items = items[len(items)-limit:]
		} else {
			items = items[:limit]
		}
	}
	out := make([]store.Entry, len(items))
	for i, it := range items {
		out[i] = it.e
	}
	return out
}

// Prune: see store.Ledger. It reads the documents that may hold something to remove (pruneDocs),
// applies store.PruneRequest.Decide to each entry and rewrites a document only when something in it
// goes, with the same compare-and-set as every write (unfenced: it never touches what a run decides by).
func (l Ledger) Prune(ctx context.Context, r store.PruneRequest) (store.PruneResult, error) {
	var res store.PruneResult
	if err := store.CheckPrune(r); err != nil {
		return res, err
	}
	docs, err := l.pruneDocs(ctx, r)
	if err != nil {
		return res, err
	}
	slots, counts := acknowledged(docs)
	failed := map[string]int{}        // per slot: archived failures pruned, which its document still counts
	held := map[string]map[int]bool{} // per slot: its archives, and whether each holds anything after the prune
	// A slot's archives before its document: a prune that stops half way never leaves archives
	// whose document it deleted.
	sort.SliceStable(docs, func(i, j int) bool { return docs[i].IsArchive() && !docs[j].IsArchive() })
	for _, d0 := range docs {
		if r.Task != "" && d0.Task != r.Task {
			continue
		}
		// An archive is pruned by its slot's facts (its last attempt, its checkpoint), as
		// read now; one its slot does not acknowledge is left to the archiving that wrote it,
		// or deleted when the slot passed over it.
		var of *Doc
		base, seq, arc := splitArchive(d0.Slot)
		if arc {
			of = slots[docKey(d0.Task, base)]
			if !counts(d0) {
				// Passed over or gone, or left by a forget that stopped half way: deleted.
				// Not yet acknowledged: left to the archiving that wrote it.
				if (of == nil || of.Archived != nil && seq <= of.Archived.Docs) && !r.DryRun {
					_, _, _ = l.deleteArchive(ctx, d0.Task, d0.Slot) // best effort: found again next time
				}
				continue
			}
		}
		if r.DryRun {
			got, forget, _, _ := prune(d0, r, of)
			if forget { // its archives go with it (pruneDoc): count what they hold
				for _, a := range docs {
					if base, _, arc := splitArchive(a.Slot); arc && a.Task == d0.Task && base == d0.Slot && counts(a) {
						got.Attempts, got.Events = got.Attempts+int64(len(a.Attempts)), got.Events+int64(len(a.Events))
					}
				}
			}
			res.Add(got)
			continue
		}
		got, nf, left, err := l.pruneDoc(ctx, d0.Task, d0.Slot, r, of)
		if err != nil {
			return res, err
		}
		res.Add(got)
		if nf > 0 {
			failed[docKey(of.Task, of.Slot)] += nf
		}
		if arc {
			k := docKey(of.Task, of.Slot)
			if held[k] == nil {
				held[k] = map[int]bool{}
			}
			held[k][seq] = left
		}
	}
	for _, d0 := range slots {
		if n := failed[docKey(d0.Task, d0.Slot)]; n > 0 {
			if err := l.uncount(ctx, d0, n); err != nil {
				return res, err
			}
		}
	}
	for k, h := range held {
		if err := l.dropEmptied(ctx, slots[k], h); err != nil {
			return res, err
		}
	}
	return res, nil
}

// pruneDocs returns the documents Prune reads. With a history index (HistoryKV, built) those with an
// entry before r.Before — Decide keeps every other entry —, found by walking the task's marks (every
// task's) oldest first (from r.Since when set) up to it, and the slot documents of their archives (an archive is pruned by
// its slot's facts): a prune costs what it may remove, not the task's history. Without one, every
// document of the task (or of every task). An entry an older once wrote after the index was built
// and that the index lacks (doctor's history-index check) is left, as history does not show it.
func (l Ledger) pruneDocs(ctx context.Context, r store.PruneRequest) ([]*Doc, error) {
	hk, ok := l.KV.(HistoryKV)
	if ok {
		built, err := hk.HistoryIndexed(ctx)
		if err != nil {
			return nil, err
		}
		ok = built
	}
	if !ok {
		return l.KV.Docs(ctx, r.Task)
	}
	tasks := []string{r.Task}
	if r.Task == "" {
		var err error
		if tasks, err = hk.HistoryTasks(ctx); err != nil {
			return nil, err
		}
	}
	cut := r.Before.Truncate(time.Microsecond).UnixMicro() // an entry before Before is at or before its microsecond
	seen := map[string]bool{}
	var want [][2]string
	add := func(task, slot string) {
		if k := docKey(task, slot); !seen[k] {
			seen[k] = true
			want = append(want, [2]string{task, slot})
		}
	}
	start := ""            // the oldest
	if !r.Since.IsZero() { // Decide keeps what is older than Since: the walk starts there
		start = Mark{At: r.Since.Truncate(time.Microsecond).UnixMicro() - 1}.head() + "~" // past every key of the microsecond before
	}
	err := scanMarks(ctx, hk, tasks, start, true, func(m Mark) bool {
		if m.At > cut {
			return false
		}
		add(m.Task, m.Slot)
		if base, _, arc := splitArchive(m.Slot); arc {
			add(m.Task, base)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return l.loadAll(ctx, want)
}

// uncount takes n archived failures a prune removed off the count of the slot read as d0.
func (l Ledger) uncount(ctx context.Context, d0 *Doc, n int) error {
	return l.update(ctx, d0.Task, d0.Slot, 0, "", func(d *Doc, _ time.Time) (bool, error) {
		// Not when an archiving since counted a later resolution: its count starts there.
		if d.Archived == nil || d0.Archived == nil || d.Archived.Resolved != d0.Archived.Resolved {
			return false, nil
		}
		d.Archived.Failures = max(0, d.Archived.Failures-n)
		return true, nil
	})
}

// dropEmptied records in the slot's Archived.Gone the archives that hold nothing now (emptied
// by this prune or an earlier one, or deleted), then deletes them: the document first, so that one
// written again under such a name by a writer that read the slot long ago (archive) is never shown,
// and the next prune deletes it. held maps the slot's archives, as Prune listed them, to whether
// each still holds something; a name it did not list is read again, since the listing is not one
// snapshot on every store and an archive is always written before its slot's document counts it.
// Gone is kept as spans of names, so it stays small when prunes empty the oldest first.
func (l Ledger) dropEmptied(ctx context.Context, of *Doc, held map[int]bool) error {
	if of == nil || of.Archived == nil {
		return nil
	}
	a := of.Archived
	var drop []int
	found := map[int]bool{}
	for seq := 1; seq <= a.Docs; seq++ {
		if !a.shows(seq) {
			continue
		}
		left, listed := held[seq]
		found[seq] = listed
		if !listed {
			x, _, _, err := l.KV.Load(ctx, of.Task, ArchiveSlot(of.Slot, seq))
			if err != nil {
				return err
			}
			left, found[seq] = x != nil && !empty(x), x != nil
		}
		if !left {
			drop = append(drop, seq)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	applied := false
	err := l.update(ctx, of.Task, of.Slot, 0, "", func(d *Doc, _ time.Time) (bool, error) {
		// Not when the slot was forgotten and begun again since it was read: its names are new.
		applied = d.Archived != nil && d.Archived.Docs >= a.Docs && d.Archived.Through >= a.Through
		if applied {
			d.Archived.Gone = d.Archived.withGone(drop)
		}
		return applied, nil
	})
	if err != nil || !applied {
		return err
	}
	for _, seq := range drop {
		if found[seq] { // best effort: a name gone is deleted by the next prune
			_, _, _ = l.deleteArchive(ctx, of.Task, ArchiveSlot(of.Slot, seq))
		}
	}
	return nil
}

// pruneDoc prunes one document, again from a fresh read after a concurrent write; of is the slot's
// document when this one is an archive of it (nil: the slot's own facts, or the slot is gone).
// It also returns how many of the attempts it removed from an archive its slot's document counts
// as failures (Archived.Failures), and whether the document still holds anything.
func (l Ledger) pruneDoc(ctx context.Context, task, slot string, r store.PruneRequest, of *Doc) (store.PruneResult, int, bool, error) {
	for range maxRetries {
		d, ver, _, err := l.KV.Load(ctx, task, slot)
		if err != nil || d == nil {
			return store.PruneResult{}, 0, false, err
		}
		got, forget, runs, nf := prune(d, r, of)
		if got == (store.PruneResult{}) {
			return got, 0, !empty(d), nil
		}
		switch {
		case forget: // a slot's own document (an archive is forgotten with it: prune)
			if err = l.KV.Delete(ctx, d, ver); err == nil && d.Archived != nil {
				// Its archives after it: a forget that stops half way leaves archives without a
				// document, which are not shown and which the next prune deletes. Past the last
				// it counts, what an archiving that did not finish may have left.
				for i, misses := 1, 0; i <= d.Archived.Docs || misses <= maxSkips; i++ {
					if d.Archived.gone(i) {
						continue
					}
					gone, found, derr := l.deleteArchive(ctx, task, ArchiveSlot(slot, i))
					if derr != nil { // the rest is not shown (its document is gone) and goes at the next prune
						break
					}
					if !found && i > d.Archived.Docs {
						misses++
					}
					got.Attempts, got.Events = got.Attempts+int64(len(gone.Attempts)), got.Events+int64(len(gone.Events))
					for _, a := range gone.Attempts {
						runs = append(runs, a.RunID)
					}
				}
			}
		default:
			_, err = l.KV.Save(ctx, d, ver, 0, "")
		}
		l.memo.drop(task, slot) // a removed document's version may be given again (Redis, ZooKeeper)
		if errors.Is(err, ErrStale) {
			continue
		}
		if err != nil {
			return store.PruneResult{}, 0, false, err
		}
		_ = l.KV.Unrun(ctx, runs) // best effort: see KV.Unrun
		return got, nf, !forget && !empty(d), nil
	}
	return store.PruneResult{}, 0, false, fmt.Errorf("%w: task %q slot %q: too many concurrent writers to prune it", store.ErrConflict, task, slot)
}

// prune applies the rule to d in place: it returns what goes, whether the whole slot goes (for an
// archive: the whole archive), the run ids of the attempts that go and, for an archive, how many
// of them its slot's document counts as failures. The slot's facts are those of of when d is an
// archive of it (nil: d's own).
func prune(d *Doc, r store.PruneRequest, of *Doc) (res store.PruneResult, forget bool, runs []string, failed int) {
	f := pruneFacts(d, r)
	if of != nil {
		f = pruneFacts(of, r)
	}
	counted := func(a store.Attempt) bool { // one of of's Archived.Failures
		return of != nil && of.Archived != nil && a.Number > of.Archived.Resolved && a.Resolution == nil &&
			(a.State == store.Failed || a.State == store.Unknown)
	}
	var keepA []store.Attempt
	for _, a := range d.Attempts {
		fa := f
		fa.Kind, fa.Number, fa.At = a.State, a.Number, a.StartedAt
		switch r.Decide(fa) {
		case store.Forget:
			forget = !d.IsArchive() // an archive goes when its slot's document does (pruneDoc)
		case store.Drop:
			res.Attempts++
			runs = append(runs, a.RunID)
			if counted(a) {
				failed++
			}
			continue
		}
		keepA = append(keepA, a)
	}
	if forget { // the slot goes whole, together
		res = store.PruneResult{Attempts: int64(len(d.Attempts)), Events: int64(len(d.Events)), Slots: 1}
		runs, failed = runs[:0], 0
		for _, a := range d.Attempts {
			runs = append(runs, a.RunID)
			if counted(a) {
				failed++
			}
		}
		return res, true, runs, failed
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
	return res, false, runs, failed
}

// pruneFacts are the slot facts of d that store.PruneRequest.Decide reads, its archived attempts
// included (an archive is older than all it keeps).
func pruneFacts(d *Doc, r store.PruneRequest) store.PruneFacts {
	base, _, _ := splitArchive(d.Slot)
	f := store.PruneFacts{Slotless: base == ""}
	if d.Archived != nil {
		f.Checkpoint = d.Archived.CheckAt
	}
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
	return f
}

// deleteArchive deletes an archive document and returns what it held; found is false when there
// was none. An error leaves it: the next prune finds it again.
func (l Ledger) deleteArchive(ctx context.Context, task, slot string) (gone Doc, found bool, err error) {
	d, ver, _, err := l.KV.Load(ctx, task, slot)
	if err != nil || d == nil {
		return Doc{}, false, err
	}
	if err := l.KV.Delete(ctx, d, ver); err != nil {
		return Doc{}, true, err
	}
	return *d, true, nil
}

// slotReads bounds slotDocs: a slot with more archives than this (thousands of attempts in one
// slot) is read with one listing of its task, fewer round trips than one read per archive.
const slotReads = 64

// slotDocs returns the documents of task's slot for History: the slot's document and the archives it
// shows, read on their own (loadMany: at once, or 16 at a time), so that the history of a slot (the dashboard's slot
// and review pages, `once history --slot`) costs that slot, not every slot its task has had. None
// when the slot has no document: its archives, if any are left, do not count (acknowledged).
func (l Ledger) slotDocs(ctx context.Context, task, slot string) ([]*Doc, error) {
	d, _, _, err := l.KV.Load(ctx, task, slot)
	if err != nil || d == nil {
		return nil, err
	}
	if d.Archived == nil || d.Archived.Docs == 0 {
		return []*Doc{d}, nil
	}
	var seqs []int
	for seq := 1; seq <= d.Archived.Docs && len(seqs) <= slotReads; seq++ {
		if d.Archived.shows(seq) {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) > slotReads {
		return l.KV.Docs(ctx, task)
	}
	want := make([][2]string, len(seqs))
	for i, seq := range seqs {
		want[i] = [2]string{task, ArchiveSlot(slot, seq)}
	}
	arcs, err := l.loadMany(ctx, want)
	if err != nil {
		return nil, err
	}
	out := []*Doc{d}
	for i, a := range arcs {
		if a != nil && a.Task == task && a.Slot == want[i][1] { // else a prune deleted it since
			out = append(out, a)
		}
	}
	return out, nil
}

// slotDocsAll reads slot's documents in every task (history --slot without --task): each task's
// document of the slot (one read of many documents), then the archives they show (another): it
// costs the tasks and the slot's history, not the ledger's (internal/costs, TestHistorySlotFlat).
// A walk of the tasks' marks would go back to the slot's time, reading every document on the way.
func (l Ledger) slotDocsAll(ctx context.Context, hk HistoryKV, slot string) ([]*Doc, error) {
	tasks, err := hk.HistoryTasks(ctx)
	if err != nil {
		return nil, err
	}
	want := make([][2]string, len(tasks))
	for i, t := range tasks {
		want[i] = [2]string{t, slot}
	}
	docs, err := l.loadMany(ctx, want)
	if err != nil {
		return nil, err
	}
	var out []*Doc
	var arcs [][2]string
	for _, d := range docs {
		if d == nil {
			continue
		}
		out = append(out, d)
		for seq := 1; d.Archived != nil && seq <= d.Archived.Docs; seq++ {
			if d.Archived.shows(seq) {
				arcs = append(arcs, [2]string{d.Task, ArchiveSlot(slot, seq)})
			}
		}
	}
	got, err := l.loadMany(ctx, arcs)
	if err != nil {
		return nil, err
	}
	for i, a := range got {
		if a != nil && a.Task == arcs[i][0] && a.Slot == arcs[i][1] { // else a prune deleted it since
			out = append(out, a)
		}
	}
	return out, nil
}
