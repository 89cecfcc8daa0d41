package storetest

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The task index cases (store.TaskLister): which tasks a store knows, and its pages. Run leaves
// them out when the store does not implement TaskLister.

// taskNames are task names whose byte order differs from a natural-language collation (case,
// punctuation, digits) and from the order of their escaped forms ('/' is "%2F" in a key or a
// node name, which sorts before '-' and '.'), and one of the longest a task may have.
var taskNames = []string{
	"a", "A", "z", "Z", "0", "9", "a-b", "a.b", "a/b", "a/b/c", "a0", "a:b", "a@b", "a_b", "ab",
	"job-1", "job-10", "job-2", "team/x", "team-x", "team.x", "team_x", strings.Repeat("y", 200),
}

// tasks lists every task s knows through pages of size, checking each page against the contract,
// and returns them in the order read.
func tasks(t *testing.T, s store.Store, size int) []string {
	t.Helper()
	tl := s.(store.TaskLister)
	var all []string
	for after, calls := "", 0; ; calls++ {
		if calls > 10000 {
			t.Fatalf("Tasks(size %d): no end after %d pages: %q", size, calls, all)
		}
		page, err := tl.Tasks(ctxT(t), after, size)
		if err != nil {
			t.Fatalf("Tasks(after %q, %d): %v", after, size, err)
		}
		if len(page) > size {
			t.Fatalf("Tasks(after %q, %d) returned %d names: %q", after, size, len(page), page)
		}
		if len(page) == 0 {
			return all
		}
		for i, name := range page {
			if name <= after || i > 0 && name <= page[i-1] {
				t.Fatalf("Tasks(after %q, %d) = %q: not increasing byte order past after", after, size, page)
			}
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
}

// WantTasks checks that s (a store.TaskLister) lists exactly want, in byte order, whatever the
// page size: for a backend's tests of an index built for tasks an older once wrote.
func WantTasks(t *testing.T, s store.Store, what string, want ...string) {
	t.Helper()
	want = slices.Clone(want)
	sort.Strings(want)
	for _, size := range []int{1, 2, store.MaxTasksPage} {
		if got := tasks(t, s, size); !slices.Equal(got, want) {
			t.Fatalf("%s: Tasks in pages of %d = %q, want %q", what, size, got, want)
		}
	}
}

// testTasksKnown: a task is known from its first grant on, to another client too, and stays known
// once its lease is released, once it has expired, and once its history is pruned away.
func testTasksKnown(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	WantTasks(t, o, "an empty store")
	known := []string{"held", "released", "expired", "pruned"}
	acquire(t, s, "held", "a", time.Minute)
	rel := acquire(t, s, "released", "a", time.Minute)
	exp := acquire(t, s, "expired", "a", time.Second)
	pr := acquire(t, s, "pruned", "a", time.Minute)
	if st, ok := s.(store.Starter); ok {
		if _, err := st.Start(ctx, store.AcquireRequest{Task: "started", Holder: "a", RunID: "run-started", TTL: time.Minute}, "s1"); err != nil {
			t.Fatalf("Start: %v", err)
		}
		known = append(known, "started")
	}
	WantTasks(t, o, "after the grants", known...)

	if err := s.Release(ctx, rel); err != nil {
		t.Fatalf("release: %v", err)
	}
	begin(t, s, pr, "s1", "run-pruned", 1)
	finish(t, s, "run-pruned", pr.Token, store.Succeeded, 0)
	if err := s.Release(ctx, pr); err != nil {
		t.Fatalf("release: %v", err)
	}
	deadline := time.Now().Add(time.Second + granularity + 2*time.Second)
	for leaseOf(t, o, "expired") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Leases still lists %+v past its TTL", exp)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := store.PruneRequest{Before: after(t, s), ForgetSlots: true}
	if got, err := s.Prune(ctx, r); err != nil || got.Slots != 1 {
		t.Fatalf("Prune(%+v) = %+v, %v; want the one slot forgotten", r, got, err)
	}
	if st := slotState(t, s, "pruned", "s1"); st.Last != nil {
		t.Fatalf("slot pruned/s1 after Prune: %+v", st)
	}
	WantTasks(t, o, "after release, expiry and prune", known...)
}

// testTasksPages: pages are in byte order and walk every task once, whatever their size; after
// need not name a task; a limit below 1 is refused with ErrInvalid; ListTasks reads the index.
func testTasksPages(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s, o := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	for _, name := range taskNames {
		acquire(t, s, name, "a", time.Minute)
	}
	want := slices.Clone(taskNames)
	sort.Strings(want)
	WantTasks(t, o, "every task", want...)
	tl := o.(store.TaskLister)
	for after, first := range map[string]string{"": "0", "a-": "a-b", "a/b": "a/b/c", "team": "team-x", "y": strings.Repeat("y", 200)} {
		if page, err := tl.Tasks(ctx, after, 1); err != nil || len(page) != 1 || page[0] != first {
			t.Errorf("Tasks(after %q, 1) = %q, %v; want [%q]", after, page, err, first)
		}
	}
	if page, err := tl.Tasks(ctx, want[len(want)-1], store.MaxTasksPage); err != nil || len(page) != 0 {
		t.Errorf("Tasks(after the last task) = %q, %v; want none", page, err)
	}
	if page, err := store.ListTasks(ctx, o, "a/b", 3); err != nil || !slices.Equal(page, []string{"a/b/c", "a0", "a:b"}) {
		t.Errorf("ListTasks(after a/b, 3) = %q, %v", page, err)
	}
	for _, bad := range []int{0, -1} {
		page, err := tl.Tasks(ctx, "", bad)
		if !errors.Is(err, store.ErrInvalid) || page != nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("Tasks(limit %d) = %q, %v; want one line wrapping ErrInvalid", bad, page, err)
		}
	}
}

// testTasksPrefix: two namespaces of one server (two prefixes of one database, file or key
// space) do not see each other's tasks, even under the same name.
func testTasksPrefix(t *testing.T, h Harness) {
	a, b := client(t, h.DSN(t)), client(t, h.DSN(t))
	for _, s := range []store.Store{a, b} {
		acquire(t, s, "shared", "a", time.Minute)
	}
	acquire(t, a, "a/only", "a", time.Minute)
	acquire(t, b, "b-only", "b", time.Minute)
	acquire(t, b, "b/only", "b", time.Minute)
	WantTasks(t, a, "namespace a", "a/only", "shared")
	WantTasks(t, b, "namespace b", "b-only", "b/only", "shared")
}
