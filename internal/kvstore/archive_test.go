package kvstore

// Prune against archives, on a key-value store in memory whose listing can be made to miss a
// write (Redis's and ZooKeeper's are not one snapshot): the cases the real servers cannot be made
// to show on demand. kvtest.Archives runs the rest against each real store.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

type ent struct {
	b   []byte
	ver int64
}

type memKV struct {
	mu   sync.Mutex
	m    map[string]ent
	n    int64
	hook func() // called by Docs between listing and reading
	docs int    // calls of Docs
	fail string // a slot whose Load fails
}

func newMem() *memKV { return &memKV{m: map[string]ent{}} }

func memKey(task, slot string) string { return task + "\x00" + slot }

func (m *memKV) Load(ctx context.Context, task, slot string) (*Doc, Version, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slot == m.fail && slot != "" {
		return nil, 0, time.Time{}, store.ErrUnavailable
	}
	e, ok := m.m[memKey(task, slot)]
	if !ok {
		return nil, 0, time.Now(), nil
	}
	d, err := Unmarshal(e.b)
	return d, e.ver, time.Now(), err
}
func (m *memKV) Save(ctx context.Context, d *Doc, ver Version, token int64, run string) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[memKey(d.Task, d.Slot)]
	if (!ok && ver != 0) || (ok && e.ver != ver) {
		return 0, ErrStale
	}
	m.n++
	m.m[memKey(d.Task, d.Slot)] = ent{d.Marshal(), m.n}
	return m.n, nil
}
func (m *memKV) Run(ctx context.Context, runID string) (string, string, error) {
	return "", "", store.ErrNotFound
}
func (m *memKV) Grants(ctx context.Context, task string) (Grants, error) {
	return Grants{Latest: 1}, nil
}
func (m *memKV) Docs(ctx context.Context, task string) ([]*Doc, error) {
	m.mu.Lock()
	m.docs++
	var keys []string
	for key := range m.m {
		keys = append(keys, key)
	}
	m.mu.Unlock()
	sort.Strings(keys)
	if m.hook != nil {
		h := m.hook
		m.hook = nil
		h()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Doc
	for _, key := range keys {
		e, ok := m.m[key]
		if !ok {
			continue
		}
		d, _ := Unmarshal(e.b)
		if task == "" || d.Task == task {
			out = append(out, d)
		}
	}
	return out, nil
}
func (m *memKV) Waiting(ctx context.Context) ([]*Doc, bool, error) { return nil, true, nil }
func (m *memKV) Index(ctx context.Context, docs []*Doc) error      { return nil }
func (m *memKV) Delete(ctx context.Context, d *Doc, ver Version) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[memKey(d.Task, d.Slot)]
	if !ok || e.ver != ver {
		return ErrStale
	}
	delete(m.m, memKey(d.Task, d.Slot))
	return nil
}
func (m *memKV) Unrun(ctx context.Context, runs []string) error { return nil }

func att(n int, at time.Time, st store.State) store.Attempt {
	code := 0
	end := at.Add(time.Second)
	return store.Attempt{Task: "t", RunID: fmt.Sprintf("r%03d", n), Number: n, State: st, ExitCode: &code, StartedAt: at, EndedAt: &end}
}

// archives saves n archives of task "t"'s slot "", 32 succeeded attempts each (attempt k started
// at at(k)), and returns what the slot's document counts of them.
func archives(t *testing.T, m *memKV, n int, at func(int) time.Time) Archived {
	arc := Archived{}
	for s := 1; s <= n; s++ {
		a := &Doc{Task: "t", Slot: ArchiveSlot("", s)}
		for k := (s-1)*32 + 1; k <= s*32; k++ {
			a.Attempts = append(a.Attempts, att(k, at(k), store.Succeeded))
		}
		if _, err := m.Save(context.Background(), a, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
		arc.fold(a)
		arc.Docs = s
	}
	return arc
}

// build: archives 1..2 of 32 attempts each, hours ago; the doc holds 40 (65..104), 65..96 one hour ago.
func build(t *testing.T, m *memKV, now time.Time) {
	ctx := context.Background()
	arc := archives(t, m, 2, func(int) time.Time { return now.Add(-10 * time.Hour) })
	d := &Doc{Task: "t", Slot: "", Archived: &arc}
	for n := 65; n <= 104; n++ {
		at := now.Add(-time.Hour)
		if n > 96 {
			at = now.Add(-time.Minute)
		}
		d.Attempts = append(d.Attempts, att(n, at, store.Succeeded))
	}
	if _, err := m.Save(ctx, d, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
}

func hist(t *testing.T, l Ledger) int {
	es, err := l.History(context.Background(), store.HistoryQuery{Task: "t", Kind: ""})
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// An archiving that lands between a prune's listing and its reads: the new archive, which the
// listing missed, is read again before its name is counted as gone, and stays shown.
func TestPruneListingMissesAnArchive(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	now := time.Now()
	build(t, m, now)
	l := NewLedger(m)
	if n := hist(t, l); n != 104 {
		t.Fatalf("history lists %d, want 104", n)
	}
	m.hook = func() {
		d, ver, _, _ := m.Load(ctx, "t", "")
		l.archive(ctx, d)
		if _, err := m.Save(ctx, d, ver, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := l.Prune(ctx, store.PruneRequest{Task: "t", Before: now.Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if n := hist(t, l); n != 40 {
			t.Fatalf("after the prune history lists %d, want 40 (attempts 65..104)", n)
		}
	}
	if a3, _, _, _ := m.Load(ctx, "t", ArchiveSlot("", 3)); a3 == nil {
		t.Fatal("the archive the listing missed was deleted")
	}
	d, _, _, _ := m.Load(ctx, "t", "")
	if want := []span{{1, 2}}; !slices.Equal(d.Archived.Gone, want) {
		t.Fatalf("gone %v, want %v", d.Archived.Gone, want)
	}
}

// Windowed prunes (--retain) never empty an archive older than their windows; the archives after it
// that they empty are deleted all the same, and their names kept as one span.
func TestPruneEmptiedBehindAKeptArchive(t *testing.T) {
	ctx := context.Background()
	m := newMem()
	now := time.Now()
	arc := archives(t, m, 10, func(n int) time.Time { return now.Add(-time.Duration(400-n) * time.Hour) })
	d := &Doc{Task: "t", Slot: "", Archived: &arc}
	for n := 321; n <= 328; n++ {
		d.Attempts = append(d.Attempts, att(n, now, store.Succeeded))
	}
	if _, err := m.Save(ctx, d, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	l := NewLedger(m)
	since := now.Add(-time.Duration(400-33) * time.Hour) // archive 1 is older than every window
	for before := since.Add(24 * time.Hour); before.Before(now.Add(-time.Hour)); before = before.Add(24 * time.Hour) {
		if _, err := l.Prune(ctx, store.PruneRequest{Task: "t", Before: before, Since: since}); err != nil {
			t.Fatal(err)
		}
		since = before.Add(-time.Minute)
	}
	docs, _ := m.Docs(ctx, "t")
	d, _, _, _ = m.Load(ctx, "t", "")
	if want := []span{{2, 10}}; len(docs) != 2 || !slices.Equal(d.Archived.Gone, want) {
		t.Fatalf("%d documents left (want the slot's and archive 1), gone %v (want %v)", len(docs), d.Archived.Gone, want)
	}
	if n := hist(t, l); n != 32+8 {
		t.Fatalf("history lists %d, want 40", n)
	}
}

func TestWithGone(t *testing.T) {
	a := Archived{Gone: []span{{1, 3}, {7, 7}}}
	if got, want := a.withGone([]int{5, 4, 8, 12}), []span{{1, 5}, {7, 8}, {12, 12}}; !slices.Equal(got, want) {
		t.Fatalf("withGone: %v, want %v", got, want)
	}
	if !slices.Equal(a.Gone, []span{{1, 3}, {7, 7}}) {
		t.Fatalf("withGone changed its receiver: %v", a.Gone)
	}
	a.Docs = 9
	for seq, want := range map[int]bool{0: false, 1: false, 4: true, 7: false, 9: true, 10: false} {
		if a.shows(seq) != want {
			t.Errorf("shows(%d) = %v", seq, !want)
		}
	}
}
