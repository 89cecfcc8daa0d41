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
// marks are not known to be in it. An older once writing beside this one writes the newest of
// them; the rest are documents written before the index was built, which the build indexed.
const checkDocs = 64

// CheckHistory is once doctor's check of the history index (HistoryKV) against the documents: an
// older once writing beside this one after the index was built writes entries the index does not
// list, which this version's history, dashboard and doctor scans then do not show (docs/
// operations.md, "Hosts on two versions at once"). It reads every document, and looks up in the
// index the newest entry of each of the checkDocs newest documents written without the field that
// says their marks are in (Doc.Marked): one read of the index on Redis and etcd. None without an
// index; an info finding while it is not built (the first page of history builds it).
func (l Ledger) CheckHistory(ctx context.Context) []store.Finding {
	hk, ok := l.KV.(HistoryKV)
	if !ok {
		return nil
	}
	f := store.Finding{Check: "history-index"}
	missing, err := l.unindexed(ctx, hk)
	switch {
	case err != nil:
		f.Level, f.Message = store.LevelWarn, fmt.Sprintf("could not compare the history index with the documents: %v", err)
	case missing == nil:
		f.Level, f.Message = store.LevelInfo, "not built yet: the first page of history (once history, the dashboard) builds it from every document"
	case len(missing) == 0:
		f.Level, f.Message = store.LevelOK, "in step with the documents: it lists the newest entries of those an older once wrote, if any"
	default:
		tasks := make([]string, 0, len(missing))
		for t := range missing {
			tasks = append(tasks, t)
		}
		slices.Sort(tasks)
		f.Level, f.Message = store.LevelWarn, fmt.Sprintf("%d documents an older once wrote after the index was built (tasks %s) hold entries it does not list: this version's history, dashboard and doctor scans (or, for missed events, status and doctor's missed check) do not show them; once no older once is left, delete the index's built mark so that the next page rebuilds it (docs/operations.md, \"Hosts on two versions at once\")",
			countAll(missing), strings.Join(tasks, ", "))
	}
	return []store.Finding{f}
}

// unindexed returns, by task, how many of the newest documents not known to be indexed have their
// newest entry missing from the index, or their newest entry of a kind missing from the index of
// that kind (when those are built); nil when the index is not built.
func (l Ledger) unindexed(ctx context.Context, hk HistoryKV) (map[string]int, error) {
	built, err := hk.HistoryIndexed(ctx)
	if err != nil || !built {
		return nil, err
	}
	kinds, err := hk.KindsIndexed(ctx)
	if err != nil {
		return nil, err
	}
	docs, err := l.KV.Docs(ctx, "")
	if err != nil {
		return nil, err
	}
	type newest struct {
		task, key string
		kind      store.State
	}
	var cand []newest
	for _, d := range docs {
		if d.Marked && (d.KindsMarked && d.KindsMarked2 || !kinds) {
			continue
		}
		var ms []string
		for _, k := range d.Marks() {
			if kind, _ := SplitKind(k); !d.InIndex(kind) && (kind == "" || kinds) {
				ms = append(ms, k)
			}
		}
		// Marks are sorted, oldest first: the newest of each index is its last.
		last := map[store.State]string{}
		for _, k := range ms {
			kind, _ := SplitKind(k)
			last[kind] = k
		}
		for kind, k := range last {
			cand = append(cand, newest{d.Task, k, kind})
		}
	}
	head := func(k string) string { _, m := SplitKind(k); return m[:markHead] }
	slices.SortFunc(cand, func(a, b newest) int { return -cmp.Compare(head(a.key), head(b.key)) })
	cand = cand[:min(len(cand), checkDocs)]
	out := map[string]int{}
	if len(cand) == 0 {
		return out, nil
	}
	rs := make([]MarkRange, len(cand))
	for i, c := range cand {
		// From the key on, itself included (etcd's inverted keys put the keys it is a prefix
		// of, other slots' at the same instant, before it: a few more are read).
		rs[i] = MarkRange{Task: c.task, Kind: c.kind, From: c.key + "\x00", Limit: 8}
	}
	got, err := hk.ReadMarks(ctx, rs)
	if err != nil {
		return nil, err
	}
	for i, c := range cand {
		if !slices.Contains(got[i], c.key) {
			out[c.task]++
		}
	}
	return out, nil
}

func countAll(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
