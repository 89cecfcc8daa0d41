package kvstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// histKV is memKV with a history index (HistoryKV) kept by Save and Delete as a backend keeps it,
// and a count of the documents read.
type histKV struct {
	*memKV
	hmu   sync.Mutex
	idx   map[string]map[string]bool // task → mark keys, its indexes of a kind's too
	built bool
	kinds bool // the indexes of a kind are built
	loads int
	read  int // mark keys ReadMarks returned
}

func newHist() *histKV {
	return &histKV{memKV: newMem(), idx: map[string]map[string]bool{}, built: true, kinds: true}
}

func (h *histKV) Load(ctx context.Context, task, slot string) (*Doc, Version, time.Time, error) {
	h.hmu.Lock()
	h.loads++
	h.hmu.Unlock()
	return h.memKV.Load(ctx, task, slot)
}

func (h *histKV) Save(ctx context.Context, d *Doc, ver Version, token int64, run string) (Version, error) {
	add, del := d.MarkChanges()
	v, err := h.memKV.Save(ctx, d, ver, token, run)
	if err == nil {
		h.mark(d.Task, add, del)
	}
	return v, err
}

func (h *histKV) Delete(ctx context.Context, d *Doc, ver Version) error {
	err := h.memKV.Delete(ctx, d, ver)
	if err == nil {
		h.mark(d.Task, nil, d.ReadMarks())
	}
	return err
}

func (h *histKV) mark(task string, add, del []string) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	if h.idx[task] == nil {
		h.idx[task] = map[string]bool{}
	}
	for _, k := range add {
		h.idx[task][k] = true
	}
	for _, k := range del {
		delete(h.idx[task], k)
	}
}

func (h *histKV) HistoryIndexed(context.Context) (bool, error) { return h.built, nil }
func (h *histKV) IndexHistory(ctx context.Context, docs []*Doc) error {
	for _, d := range docs {
		h.mark(d.Task, d.Marks(), nil)
	}
	h.built = true
	return nil
}
func (h *histKV) KindsIndexed(context.Context) (bool, error) { return h.kinds, nil }
func (h *histKV) IndexKinds(ctx context.Context, docs []*Doc) error {
	for _, d := range docs {
		h.mark(d.Task, d.KindMarks(), nil)
	}
	h.kinds = true
	return nil
}
func (h *histKV) HistoryTasks(context.Context) ([]string, error) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	var out []string
	for t := range h.idx {
		out = append(out, t)
	}
	return out, nil
}
func (h *histKV) ReadMarks(ctx context.Context, rs []MarkRange) ([][]string, error) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	out := make([][]string, len(rs))
	for i, r := range rs {
		var keys []string
		for k := range h.idx[r.Task] {
			if kind, _ := SplitKind(k); kind != r.Kind {
				continue
			}
			if r.From == "" || r.Up && k > r.From || !r.Up && k < r.From {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		if !r.Up {
			slices.Reverse(keys)
		}
		out[i] = keys[:min(len(keys), r.Limit)]
		h.read += len(out[i])
	}
	return out, nil
}
func (h *histKV) Unmark(ctx context.Context, task string, keys []string) error {
	h.mark(task, nil, keys)
	return nil
}

// seedHist writes n attempts and events over tasks and slots, many at the same microsecond.
func seedHist(t *testing.T, l Ledger, n int, seed uint64) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 1))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		task := fmt.Sprintf("t%d", r.IntN(3))
		slot := fmt.Sprintf("s%d", r.IntN(4))
		at := base.Add(time.Duration(r.IntN(n/3+1)) * time.Microsecond)
		err := l.update(ctx, task, slot, 0, "", func(d *Doc, _ time.Time) (bool, error) {
			l.archive(ctx, d)
			if r.IntN(2) == 0 {
				d.Events = append(d.Events, Event{Kind: []store.State{store.Busy, store.Missed, store.Skipped}[r.IntN(3)], RunID: fmt.Sprintf("e%d", i), At: at})
				return true, nil
			}
			a := att(len(d.Attempts)+1, at, []store.State{store.Succeeded, store.Failed}[r.IntN(2)])
			if d.Archived != nil {
				a.Number += d.Archived.Through
			}
			if k := len(d.Attempts); k > 0 {
				a.Number = d.Attempts[k-1].Number + 1
			}
			a.Task, a.Slot, a.RunID = task, slot, fmt.Sprintf("a%d", i)
			d.Attempts = append(d.Attempts, a)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestHistoryPageMatchesScan: every page read from the index (with and without a task, a kind, a
// slot, Before, After, both) is the page the whole-history read gives, archives included, over
// entries many of which share their microsecond.
func TestHistoryPageMatchesScan(t *testing.T) {
	h := newHist()
	l := NewLedger(h)
	seedHist(t, l, 600, 7)
	scan := Ledger{KV: h.memKV}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 3))
	queries := []store.HistoryQuery{{}, {Task: "t1"}, {Kind: store.Missed}, {Task: "t2", Kind: store.Failed}, {Slot: "s1"}, {Task: "t0", Slot: "s2"},
		{Task: "t1", Kind: store.Missed}, {Slot: "s3", Kind: store.Missed}}
	for _, q0 := range queries {
		all, err := scan.History(ctx, q0)
		if err != nil || len(all) == 0 {
			t.Fatalf("scan %+v: %d, %v", q0, len(all), err)
		}
		got, err := l.History(ctx, q0)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := runsOf(got), runsOf(all); !slices.Equal(a, b) {
			t.Fatalf("history %+v from the index: %d entries, the scan %d\n%v\n%v", q0, len(a), len(b), a[:min(5, len(a))], b[:min(5, len(b))])
		}
		for range 40 {
			q := q0
			q.Limit = 1 + r.IntN(30)
			i, j := r.IntN(len(all)), r.IntN(len(all))
			switch r.IntN(3) {
			case 0:
				q.Before = all[i].Cursor
			case 1:
				q.After = all[i].Cursor
			default:
				q.Before, q.After = all[min(i, j)].Cursor, all[max(i, j)].Cursor
			}
			want, err := scan.History(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.History(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := runsOf(got), runsOf(want); !slices.Equal(a, b) {
				t.Fatalf("history %+v from the index:\n got %v\nwant %v", q, a, b)
			}
		}
	}
	// Documents with missed events gone behind the indexes' back (an older once's forget): the
	// reads of missed events pass over their marks, are still the scan's, and take them out.
	var gone []*Doc
	for _, e := range mustHistory(t, scan, store.HistoryQuery{Kind: store.Missed}) {
		if len(gone) == 5 {
			break
		}
		if d, ver, _, _ := h.memKV.Load(ctx, e.Task, e.Slot); d != nil {
			if err := h.memKV.Delete(ctx, d, ver); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, d)
		}
	}
	if len(gone) == 0 {
		t.Fatal("no document with a missed event to delete: the test is wrong")
	}
	for _, q := range []store.HistoryQuery{{Kind: store.Missed, Limit: 3}, {Kind: store.Missed}, {Task: "t1", Kind: store.Missed}} {
		if a, b := runsOf(mustHistory(t, l, q)), runsOf(mustHistory(t, scan, q)); !slices.Equal(a, b) {
			t.Fatalf("history %+v with stale marks:\n got %v\nwant %v", q, a, b)
		}
	}
	for _, d := range gone {
		for _, k := range d.KindMarks() {
			if kind, _ := SplitKind(k); kind == store.Missed && h.idx[d.Task][k] { // the other kinds' are taken out by their reads
				t.Fatalf("stale mark %q of a missed event of %s/%s left in its index", k, d.Task, d.Slot)
			}
		}
	}
}

func mustHistory(t *testing.T, l Ledger, q store.HistoryQuery) []store.Entry {
	t.Helper()
	es, err := l.History(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestHistoryPageStaleAndOlder: a mark whose document is gone (an older once's prune) or holds
// nothing there any more is passed over, the page is still full, and the mark is taken out; a
// document an older once wrote (no "hx", its marks not in the index) gets all its marks at this
// once's next write; a ledger without an index is indexed by its first page; a page reads a
// bounded number of documents at any size of history.
func TestHistoryPageStaleAndOlder(t *testing.T) {
	ctx := context.Background()
	h := newHist()
	l := NewLedger(h)
	seedHist(t, l, 300, 11)
	scan := Ledger{KV: h.memKV}
	want, _ := scan.History(ctx, store.HistoryQuery{Limit: 10})
	// Gone behind the index's back: the marks stay.
	d, ver, _, _ := h.memKV.Load(ctx, want[0].Task, want[0].Slot)
	if err := h.memKV.Delete(ctx, d, ver); err != nil {
		t.Fatal(err)
	}
	want, _ = scan.History(ctx, store.HistoryQuery{Limit: 10})
	got, err := l.History(ctx, store.HistoryQuery{Limit: 10})
	if err != nil || !slices.Equal(runsOf(got), runsOf(want)) {
		t.Fatalf("page with stale marks: %v %v, want %v", runsOf(got), err, runsOf(want))
	}
	if ms := d.Marks(); h.idx[d.Task][ms[len(ms)-1]] { // the newest, which the page met
		t.Fatalf("stale mark %q left in the index", ms[len(ms)-1])
	}
	// An older once's write: the document without "hx", its new entry not in the index.
	d, ver, _, _ = h.memKV.Load(ctx, "t1", "s1")
	d.Events = append(d.Events, Event{Kind: store.Busy, RunID: "older", At: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
	b := d.Marshal()
	b = []byte(strings.Replace(string(b), `,"hx":true`, "", 1))
	h.memKV.m[memKey("t1", "s1")] = ent{b, ver + 1}
	if got, _ := l.History(ctx, store.HistoryQuery{Limit: 1}); len(got) == 1 && got[0].RunID == "older" {
		t.Fatal("an older once's entry is in the index already: the test is wrong")
	}
	if err := l.Record(ctx, store.Event{Task: "t1", Slot: "s1", Kind: store.Busy, RunID: "newer"}); err != nil {
		t.Fatal(err)
	}
	got, _ = l.History(ctx, store.HistoryQuery{Limit: 2})
	if runs := []string{got[0].RunID, got[1].RunID}; !slices.Equal(runs, []string{"older", "newer"}) {
		t.Fatalf("after this once's write of an older once's document: %v, want [older newer]", runs)
	}
	// Unbuilt: the first page builds it.
	h.idx, h.built = map[string]map[string]bool{}, false
	all, _ := scan.History(ctx, store.HistoryQuery{})
	got, err = l.History(ctx, store.HistoryQuery{})
	if err != nil || !slices.Equal(runsOf(got), runsOf(all)) || !h.built {
		t.Fatalf("first page of an unbuilt index: %d entries, %v, built %v; want %d", len(got), err, h.built, len(all))
	}
	// Bounded: a page of 10 reads at most twice as many documents (an archive's and its slot's),
	// at 300 entries and at 3300, when the task has more.
	loads := func() int {
		h.loads = 0
		if _, err := l.History(ctx, store.HistoryQuery{Task: "t2", Limit: 10}); err != nil {
			t.Fatal(err)
		}
		return h.loads
	}
	few := loads()
	seedHist(t, l, 3000, 12)
	many := loads()
	docs, _ := h.memKV.Docs(ctx, "t2")
	if few > 20 || many > 20 || len(docs) <= 20 {
		t.Fatalf("a page of 10 read %d documents at 300 entries, %d at 3300 (the task has %d)", few, many, len(docs))
	}
}
