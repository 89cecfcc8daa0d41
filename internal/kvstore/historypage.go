package kvstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

// HistoryKV is an optional KV capability: each task's history index (marks.go), which Save and
// Delete keep in the same atomic write as the document (Doc.MarkChanges, Doc.ReadMarks). With it
// a page of history reads the marks from the page's cursor on and the documents they name, so it
// costs the page, not the history (historyPage).
type HistoryKV interface {
	// HistoryIndexed reports whether the index was built (IndexHistory): false on a ledger an
	// older once wrote, whose documents have no marks yet.
	HistoryIndexed(ctx context.Context) (bool, error)
	// IndexHistory puts every mark of docs in its task's index, then records that the index is
	// built.
	IndexHistory(ctx context.Context, docs []*Doc) error
	// HistoryTasks lists the tasks whose index may hold marks: every task with a document.
	HistoryTasks(ctx context.Context) ([]string, error)
	// ReadMarks reads, for each range, up to its Limit keys of its task's index from its From on:
	// the keys before From (byte order), newest first, or with Up the keys after it, oldest first.
	// One round trip where the store can.
	ReadMarks(ctx context.Context, rs []MarkRange) ([][]string, error)
	// Unmark takes keys out of task's index: marks whose document holds no entry there any more
	// (an older once's prune, a write that could not take them out). Best effort.
	Unmark(ctx context.Context, task string, keys []string) error
	// KindsIndexed reports whether the tasks' indexes of a kind (marks.go: IndexedKinds) were
	// built (IndexKinds): false on a ledger a once before them wrote.
	KindsIndexed(ctx context.Context) (bool, error)
	// IndexKinds puts every kind mark of docs (Doc.KindMarks) in its task's index of that kind,
	// then records that those indexes are built.
	IndexKinds(ctx context.Context, docs []*Doc) error
}

// MarkRange is a read of one task's index, or of its index of a kind: see HistoryKV.ReadMarks.
// From and the keys read are whole keys, KindPrefix(Kind) and all.
type MarkRange struct {
	Task  string
	Kind  store.State // "": the task's index
	From  string      // "": from the newest (oldest with Up)
	Up    bool
	Limit int
}

// historyPage is the page a walk of the whole history reads at a time (store.HistoryPager), and
// the most marks a page reads of one task at a time.
const historyPage = 256

// HistoryPageSize makes the ledger a store.HistoryPager when its KV keeps a history index.
func (l Ledger) HistoryPageSize() int {
	if _, ok := l.KV.(HistoryKV); ok {
		return historyPage
	}
	return 0
}

// indexHistory builds the history index once, from every document, on a ledger an older once
// wrote (as Waiting builds its index).
func (l Ledger) indexHistory(ctx context.Context, hk HistoryKV) error {
	ok, err := hk.HistoryIndexed(ctx)
	if err != nil || ok {
		return err
	}
	docs, err := l.KV.Docs(ctx, "")
	if err != nil {
		return err
	}
	return hk.IndexHistory(ctx, docs)
}

// indexKinds builds the indexes of a kind once, on a ledger a once before them wrote: from the
// history index (built first), it reads the documents it names (an attempt's state has an index
// too: failed, unknown) — on ZooKeeper, which reads a document at a time, 16 in flight, 20,603
// entries take seconds, once. What the history index lacks (an older once's writes after it was
// built: doctor's history-index check) the index of a kind lacks too, until rebuilt.
func (l Ledger) indexKinds(ctx context.Context, hk HistoryKV) error {
	ok, err := hk.KindsIndexed(ctx)
	if err != nil || ok {
		return err
	}
	tasks, err := hk.HistoryTasks(ctx)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var want [][2]string
	err = scanMarks(ctx, hk, tasks, "", false, func(m Mark) bool {
		if !seen[docKey(m.Task, m.Slot)] {
			seen[docKey(m.Task, m.Slot)] = true
			want = append(want, [2]string{m.Task, m.Slot})
		}
		return true
	})
	if err != nil {
		return err
	}
	docs, err := l.loadAll(ctx, want)
	if err != nil {
		return err
	}
	return hk.IndexKinds(ctx, docs)
}

// scanMarks passes each the marks of tasks' indexes (not their indexes of a kind) from start on
// ("": the newest, or the oldest), newest first (oldest first with up), a task's until each
// returns false, reading them 4,096 keys of a task at a time, every task's at once.
func scanMarks(ctx context.Context, hk HistoryKV, tasks []string, start string, up bool, each func(Mark) bool) error {
	from := map[string]string{}
	for _, t := range tasks {
		from[t] = start
	}
	for len(from) > 0 {
		rs := make([]MarkRange, 0, len(from))
		for t, f := range from {
			rs = append(rs, MarkRange{Task: t, From: f, Up: up, Limit: 16 * historyPage})
		}
		got, err := hk.ReadMarks(ctx, rs)
		if err != nil {
			return err
		}
		for i, r := range rs {
			keys := got[i]
			if len(keys) < r.Limit {
				delete(from, r.Task)
			} else {
				from[r.Task] = keys[len(keys)-1]
			}
			for _, k := range keys {
				if m, ok := ParseMark(r.Task, k); ok && m.Kind == "" && !each(m) {
					delete(from, r.Task)
					break
				}
			}
		}
	}
	return nil
}

// loadAll reads the documents of (task, slot) pairs, 1,024 at a time (loadMany), and returns
// those that exist.
func (l Ledger) loadAll(ctx context.Context, want [][2]string) ([]*Doc, error) {
	var docs []*Doc
	for len(want) > 0 {
		n := min(len(want), 1024)
		got, err := l.loadMany(ctx, want[:n])
		if err != nil {
			return nil, err
		}
		for i, d := range got {
			if d != nil && d.Task == want[i][0] && d.Slot == want[i][1] {
				docs = append(docs, d)
			}
		}
		want = want[n:]
	}
	return docs, nil
}

// item is an entry of a page with its position.
type item struct {
	e store.Entry
	c store.Cursor
}

// walk is one page read from the history index: the marks read and not yet taken, each task's
// place in its index, and the documents read.
type walk struct {
	l             Ledger
	hk            HistoryKV
	q             store.HistoryQuery
	kind          store.State // the index of a kind read ("": the tasks' marks)
	before, after *store.Cursor
	end           string            // for a page between two cursors: Before's instant and kind (a mark key's head)
	from          map[string]string // task → the last key read (the range's From); absent: done
	last          map[string]Mark   // task → the last mark read
	pool          []Mark            // read, not yet taken, in walk order
	docs          map[string]*Doc   // by docKey; nil: none
	stale         map[string][]string
	items         []item
	batch         int
}

// order is the walk's order of marks: history order, or its reverse for a page After a cursor.
func (w *walk) order(a, b Mark) int {
	if w.after != nil {
		return -a.cmp(b)
	}
	return a.cmp(b)
}

// historyPage reads a page of history from the index: the marks of the task (every task's,
// merged) — of its index of q's Kind when that kind has one (Indexed) —, from the cursor on in walk order, a batch at a time; a mark is taken once no task's
// unread marks can come before it; its document is read (a batch of documents at a time, as many
// as entries are still wanted) and its entries at that instant kept. It stops when the page is
// full or the marks run out. A mark whose document holds nothing there is passed over and taken
// out of the index afterwards.
func (l Ledger) historyPage(ctx context.Context, hk HistoryKV, q store.HistoryQuery, before, after *store.Cursor) ([]store.Entry, error) {
	if err := l.indexHistory(ctx, hk); err != nil {
		return nil, err
	}
	var kind store.State
	if Indexed(q.Kind) {
		if err := l.indexKinds(ctx, hk); err != nil {
			return nil, err
		}
		kind = q.Kind
	}
	tasks := []string{q.Task}
	if q.Task == "" {
		var err error
		if tasks, err = hk.HistoryTasks(ctx); err != nil {
			return nil, err
		}
	}
	w := &walk{l: l, hk: hk, q: q, kind: kind, before: before, after: after, from: map[string]string{}, last: map[string]Mark{},
		docs: map[string]*Doc{}, stale: map[string][]string{}, batch: historyPage}
	if q.Limit > 0 {
		w.batch = min(max(q.Limit+1, 16), historyPage)
	}
	start := ""
	c := before
	if after != nil { // a page After a cursor is read up from it
		c = after
	}
	if c != nil {
		head := KindPrefix(kind) + Mark{At: c.At.UnixMicro(), Event: c.Event}.head()
		start = head + "~" // every key of the cursor's instant and kind ('~' is past the hex digits)
		if after != nil {
			start = head
		}
	}
	if before != nil && after != nil { // read up from After: Before ends the walk
		w.end = Mark{At: before.At.UnixMicro(), Event: before.Event}.head()
	}
	for _, t := range tasks {
		w.from[t] = start
	}
	for !w.full() {
		if err := w.read(ctx); err != nil {
			return nil, err
		}
		more, err := w.take(ctx)
		if err != nil {
			return nil, err
		}
		if !more && len(w.from) == 0 {
			break
		}
	}
	for t, keys := range w.stale {
		_ = hk.Unmark(context.WithoutCancel(ctx), t, keys) // best effort: the next page that meets them tries again
	}
	return page(w.items, q.Limit, after != nil), nil
}

func (w *walk) full() bool { return w.q.Limit > 0 && len(w.items) >= w.q.Limit }

// read reads the next batch of marks of every task not done whose marks in the pool are all taken
// or behind the horizon.
func (w *walk) read(ctx context.Context) error {
	var rs []MarkRange
	h, bounded := w.horizon() // once: the tasks may be thousands
	for t, from := range w.from {
		if m, ok := w.last[t]; ok && bounded && w.order(m, h) > 0 {
			continue // its marks in the pool are not reached yet: reading more of it can wait
		}
		rs = append(rs, MarkRange{Task: t, Kind: w.kind, From: from, Up: w.after != nil, Limit: w.batch})
	}
	if len(rs) == 0 {
		return nil
	}
	got, err := w.hk.ReadMarks(ctx, rs)
	if err != nil {
		return err
	}
	// The next read of a task takes twice as many: a page whose marks are mostly of another kind
	// (a Kind filter) or stale reaches its entries in a few reads.
	w.batch = min(2*w.batch, 16*historyPage)
	for i, r := range rs {
		keys := got[i]
		if len(keys) < r.Limit {
			delete(w.from, r.Task)
		} else {
			w.from[r.Task] = keys[len(keys)-1]
		}
		for _, k := range keys {
			if m, ok := ParseMark(r.Task, k); ok && m.Kind == w.kind {
				w.pool = append(w.pool, m)
				w.last[r.Task] = m
			}
		}
	}
	slices.SortFunc(w.pool, w.order)
	return nil
}

// horizon is the furthest mark the walk may take: the nearest of the last marks read of the tasks
// not done (their unread marks all come after it). ok is false when every task is done.
func (w *walk) horizon() (Mark, bool) {
	var h Mark
	found := false
	for t := range w.from {
		m, ok := w.last[t]
		if !ok {
			return Mark{}, true // not read yet: nothing is safe
		}
		if !found || w.order(m, h) < 0 {
			h, found = m, true
		}
	}
	return h, found
}

// take takes marks from the pool up to the horizon, reading their documents a batch at a time;
// it reports whether it took any.
func (w *walk) take(ctx context.Context) (bool, error) {
	h, bounded := w.horizon()
	if bounded && h.Task == "" {
		return false, nil
	}
	n := 0
	for n < len(w.pool) && (!bounded || w.order(w.pool[n], h) <= 0) {
		if w.end != "" && w.pool[n].head() > w.end { // past Before: the walk ends here
			w.from = map[string]string{}
			w.pool = w.pool[:n]
			break
		}
		n++
	}
	took := n > 0
	for len(w.pool) > 0 && n > 0 && !w.full() {
		k := n
		if w.q.Limit > 0 {
			k = min(n, max(w.q.Limit-len(w.items), 8))
		}
		ms := w.pool[:k]
		if err := w.load(ctx, ms); err != nil {
			return took, err
		}
		for _, m := range ms {
			w.keep(m)
		}
		w.pool, n = w.pool[k:], n-k
	}
	return took, nil
}

// selects reports whether the page may hold entries of m, from the mark alone.
func (w *walk) selects(m Mark) bool {
	if m.Event && !w.q.ReadsEvents() || !m.Event && !w.q.ReadsAttempts() {
		return false
	}
	base, _, _ := splitArchive(m.Slot)
	return w.q.Slot == "" || base == w.q.Slot
}

// load reads the documents of ms the walk has not read, and for archives their slots' documents.
func (w *walk) load(ctx context.Context, ms []Mark) error {
	var want [][2]string
	seen := map[string]bool{}
	add := func(task, slot string) {
		k := docKey(task, slot)
		if _, ok := w.docs[k]; !ok && !seen[k] {
			seen[k] = true
			want = append(want, [2]string{task, slot})
		}
	}
	for _, m := range ms {
		if !w.selects(m) {
			continue
		}
		add(m.Task, m.Slot)
		if base, _, arc := splitArchive(m.Slot); arc {
			add(m.Task, base)
		}
	}
	got, err := w.l.loadMany(ctx, want)
	if err != nil {
		return err
	}
	for i, ts := range want {
		w.docs[docKey(ts[0], ts[1])] = got[i]
	}
	return nil
}

// keep adds the entries of m's document at m's instant and kind, or notes m as stale.
func (w *walk) keep(m Mark) {
	if !w.selects(m) {
		return
	}
	d := w.docs[docKey(m.Task, m.Slot)]
	base, seq, arc := splitArchive(m.Slot)
	if d == nil || d.Task != m.Task || d.Slot != m.Slot {
		w.stale[m.Task] = append(w.stale[m.Task], m.Key())
		return
	}
	if arc {
		b := w.docs[docKey(m.Task, base)]
		if b == nil || b.Archived == nil || !b.Archived.shows(seq) {
			return // not (or no longer) its slot's: not shown, and pruned by Prune
		}
	}
	if !entries(d, w.q, w.before, w.after, &m, func(e store.Entry, c store.Cursor) { w.items = append(w.items, item{e, c}) }) {
		w.stale[m.Task] = append(w.stale[m.Task], m.Key())
	}
}

// entries passes keep the entries of d that q selects within the cursors, all of them or (m not
// nil) those at m's instant and kind (of m's Kind, for a kind mark); it reports whether d has any
// entry there, selected or not.
func entries(d *Doc, q store.HistoryQuery, before, after *store.Cursor, m *Mark, keep func(store.Entry, store.Cursor)) bool {
	slot, _, _ := splitArchive(d.Slot) // an archive's entries are its slot's
	at := func(t time.Time, event bool) bool {
		return m == nil || m.Event == event && t.Truncate(time.Microsecond).UnixMicro() == m.At
	}
	found := false
	for _, a := range d.Attempts {
		if !at(a.StartedAt, false) || m != nil && m.Kind != "" && a.State != m.Kind {
			continue
		}
		found = true
		c := store.CursorOf(a.StartedAt, false, d.key(), int64(a.Number))
		if q.Selects(a.State) && store.InPage(c, before, after) {
			e := store.Entry{Attempt: a}
			e.Cursor = c.String()
			keep(e, c)
		}
	}
	for i, ev := range d.Events {
		if !at(ev.At, true) || m != nil && m.Kind != "" && ev.Kind != m.Kind {
			continue
		}
		found = true
		c := store.CursorOf(ev.At, true, d.key(), int64(i))
		if q.Selects(ev.Kind) && store.InPage(c, before, after) {
			e := store.Entry{Attempt: store.Attempt{Task: d.Task, Slot: slot, RunID: ev.RunID, Number: ev.Attempt, State: ev.Kind,
				Holder: ev.Holder, Token: ev.Token, StartedAt: ev.At, Note: ev.Note}}
			e.Cursor = c.String()
			keep(e, c)
		}
	}
	return found
}

// ManyKV is an optional KV capability: many documents read in one round trip (a pipeline, a
// transaction of reads), for a page of history.
type ManyKV interface {
	// LoadMany returns the documents of (task, slot) pairs, nil for one that is missing.
	LoadMany(ctx context.Context, want [][2]string) ([]*Doc, error)
}

// loadReads bounds the documents read at once (loadMany).
const loadReads = 16

// loadMany reads the documents of (task, slot) pairs: with ManyKV at once, else loadReads at a
// time; nil for one that is missing. The first error stops what is not sent yet.
func (l Ledger) loadMany(ctx context.Context, want [][2]string) ([]*Doc, error) {
	out := make([]*Doc, len(want))
	if len(want) == 0 {
		return out, nil
	}
	if mk, ok := l.KV.(ManyKV); ok {
		return mk.LoadMany(ctx, want)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var first error // the first to fail, not a read it cancelled
	var once sync.Once
	sem := make(chan struct{}, loadReads)
	var wg sync.WaitGroup
	for i, ts := range want {
		sem <- struct{}{}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d, _, _, err := l.KV.Load(ctx, ts[0], ts[1])
			if err != nil {
				once.Do(func() { first = err; cancel() })
				return
			}
			out[i] = d
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, ctx.Err()
}
