package kvstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/once-run/once/store"
)

// checkDocs bounds the documents CheckHistory looks up in the index: the newest of those whose
// marks are not known to be in it.
const checkDocs = 64

// checkMarks is the window CheckHistory reads: the documents its newest checkMarks marks name, in
// each task's index (at most checkRead documents in all, the newest first).
const (
	checkMarks = 16
	checkRead  = 512
)

// CheckHistory is once doctor's check of the history index (HistoryKV) against the documents: an
// older once writing beside this one after the index was built writes entries the index does not
// list, which this version's history, dashboard and doctor scans then do not show (docs/
// operations.md, "Hosts on two versions at once"). By default it reads a window of the ledger, not
// all of it: the documents of each task's newest checkMarks marks (at most checkRead documents)
// and of the slots waiting for review, and looks up in the index the newest entry of each of the
// checkDocs newest of them written without the field that says their marks are in (Doc.Marked):
// what an older once added to a slot this version wrote. It costs the tasks and the window, not
// the history (internal/costs, TestDoctorHistoryFlat). A slot only an older once writes has no
// mark, so the window does not read it: its message says so, and that once doctor --scan
// (store.FullCheck) reads every document, which finds it. None without an index; an info finding
// while it is not built (the first page of history builds it).
func (l Ledger) CheckHistory(ctx context.Context) []store.Finding {
	hk, ok := l.KV.(HistoryKV)
	if !ok {
		return nil
	}
	full := store.FullCheck(ctx)
	what := fmt.Sprintf("the window of the newest %d entries of each task (%%d documents, and those of the slots waiting for review): a slot only an older once writes is not in the index and not read here, once doctor --scan reads every document and finds it", checkMarks)
	if full {
		what = "every document (%d, once doctor --scan)"
	}
	f := store.Finding{Check: "history-index"}
	missing, read, err := l.unindexed(ctx, hk, full)
	switch {
	case err != nil:
		f.Level, f.Message = store.LevelWarn, fmt.Sprintf("could not compare the history index with the documents: %v", err)
	case missing == nil:
		f.Level, f.Message = store.LevelInfo, "not built yet: the first page of history (once history, the dashboard) builds it from every document"
	case len(missing) == 0:
		f.Level, f.Message = store.LevelOK, "in step with "+fmt.Sprintf(what, read)+"; while any host runs an older once, rebuild the index once the last is upgraded (docs/operations.md, \"Hosts on two versions at once\")"
	default:
		tasks := make([]string, 0, len(missing))
		for t := range missing {
			tasks = append(tasks, t)
		}
		slices.Sort(tasks)
		f.Level, f.Message = store.LevelWarn, fmt.Sprintf("%d documents an older once wrote after the index was built (tasks %s) hold entries it does not list (checked: %s): this version's history, dashboard and doctor scans (or, for missed events, status and doctor's missed check) do not show them; once no older once is left, delete the index's built mark so that the next page rebuilds it (docs/operations.md, \"Hosts on two versions at once\")",
			countAll(missing), strings.Join(tasks, ", "), fmt.Sprintf(what, read))
	}
	return []store.Finding{f}
}

// unindexed returns, by task, how many of the newest documents of the window (checkWindow), or of
// every document when full, not known to be indexed have their newest entry missing from the
// index, or their newest entry of a kind missing from the index of that kind (when those are
// built), and how many documents it read; nil when the index is not built.
func (l Ledger) unindexed(ctx context.Context, hk HistoryKV, full bool) (map[string]int, int, error) {
	built, err := hk.HistoryIndexed(ctx)
	if err != nil || !built {
		return nil, 0, err
	}
	kinds, err := hk.KindsIndexed(ctx)
	if err != nil {
		return nil, 0, err
	}
	var docs []*Doc
	if full {
		docs, err = l.KV.Docs(ctx, "")
	} else {
		docs, err = l.checkWindow(ctx, hk)
	}
	if err != nil {
		return nil, 0, err
	}
	cand := unmarkedNewest(docs, kinds)
	out := map[string]int{}
	if len(cand) == 0 {
		return out, len(docs), nil
	}
	rs := make([]MarkRange, len(cand))
	for i, c := range cand {
		// From the key on, itself included (etcd's inverted keys put the keys it is a prefix
		// of, other slots' at the same instant, before it: a few more are read).
		rs[i] = MarkRange{Task: c.task, Kind: c.kind, From: c.key + "\x00", Limit: 8}
	}
	got, err := hk.ReadMarks(ctx, rs)
	if err != nil {
		return nil, 0, err
	}
	for i, c := range cand {
		if !slices.Contains(got[i], c.key) {
			out[c.task]++
		}
	}
	return out, len(docs), nil
}

// checkWindow reads the documents CheckHistory looks at: those the newest checkMarks marks of
// each task's index name (one read of every task's index, at most checkRead documents, the
// newest first) and those of the slots waiting for review (their index, when built).
func (l Ledger) checkWindow(ctx context.Context, hk HistoryKV) ([]*Doc, error) {
	tasks, err := hk.HistoryTasks(ctx)
	if err != nil || len(tasks) == 0 {
		return nil, err
	}
	rs := make([]MarkRange, len(tasks))
	for i, t := range tasks {
		rs[i] = MarkRange{Task: t, Limit: checkMarks}
	}
	got, err := hk.ReadMarks(ctx, rs)
	if err != nil {
		return nil, err
	}
	var ms []Mark
	for i, keys := range got {
		for _, k := range keys {
			if m, ok := ParseMark(rs[i].Task, k); ok && m.Kind == "" {
				ms = append(ms, m)
			}
		}
	}
	slices.SortFunc(ms, Mark.cmp)
	seen := map[string]bool{}
	var want [][2]string
	for _, m := range ms {
		if k := docKey(m.Task, m.Slot); !seen[k] && len(want) < checkRead {
			seen[k] = true
			want = append(want, [2]string{m.Task, m.Slot})
		}
	}
	docs, err := l.loadMany(ctx, want)
	if err != nil {
		return nil, err
	}
	waiting, indexed, err := l.KV.Waiting(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(docs, func(d *Doc) bool { return d == nil })
	for _, d := range waiting {
		if indexed && !seen[d.key()] {
			out = append(out, d)
		}
	}
	return out, nil
}

// newest is a document's newest mark not known to be in its index (CheckHistory).
type newest struct {
	task, key string
	kind      store.State
}

// unmarkedNewest returns the newest mark of each index (the task's, and those of a kind when
// kinds are built) of the docs written without the field that says their marks are in it, the
// checkDocs newest of them.
func unmarkedNewest(docs []*Doc, kinds bool) []newest {
	var cand []newest
	for _, d := range docs {
		if d.Marked && (d.KindsMarked && d.KindsMarked2 || !kinds) {
			continue
		}
		// Marks are sorted, oldest first: the newest of each index is its last.
		last := map[store.State]string{}
		for _, k := range d.Marks() {
			if kind, _ := SplitKind(k); !d.InIndex(kind) && (kind == "" || kinds) {
				last[kind] = k
			}
		}
		for kind, k := range last {
			cand = append(cand, newest{d.Task, k, kind})
		}
	}
	head := func(k string) string { _, m := SplitKind(k); return m[:markHead] }
	slices.SortFunc(cand, func(a, b newest) int { return -cmp.Compare(head(a.key), head(b.key)) })
	return cand[:min(len(cand), checkDocs)]
}

func countAll(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
