package store_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// TestCheckTasksPage: a page of at least one task is accepted; 0 and below are refused with one
// line wrapping ErrInvalid, by ListTasks too, before any store is read.
func TestCheckTasksPage(t *testing.T) {
	for _, ok := range []int{1, 2, store.MaxTasksPage, store.MaxTasksPage + 1} {
		if err := store.CheckTasksPage(ok); err != nil {
			t.Errorf("CheckTasksPage(%d) = %v", ok, err)
		}
	}
	for _, bad := range []int{0, -1, -1 << 31} {
		err := store.CheckTasksPage(bad)
		if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "\n") {
			t.Errorf("CheckTasksPage(%d) = %v, want one line wrapping ErrInvalid", bad, err)
		}
		if _, err := store.ListTasks(t.Context(), nil, "", bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListTasks(limit %d) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestTasksPage: names in any order and with repeats come out after `after`, in byte order,
// once each, at most limit of them; walking the pages yields every name once.
func TestTasksPage(t *testing.T) {
	names := []string{"b", "a/b", "a-b", "B", "a", "a.b", "b", "a0", "A", "a_b", "a:b", "a@b", "a"}
	want := []string{"A", "B", "a", "a-b", "a.b", "a/b", "a0", "a:b", "a@b", "a_b", "b"}
	if got := store.TasksPage(slices.Clone(names), "", 100); !slices.Equal(got, want) {
		t.Fatalf("TasksPage(all) = %q, want %q", got, want)
	}
	if got := store.TasksPage(slices.Clone(names), "a-", 2); !slices.Equal(got, []string{"a-b", "a.b"}) {
		t.Fatalf("TasksPage(after a-, 2) = %q", got)
	}
	if got := store.TasksPage(slices.Clone(names), "b", 5); len(got) != 0 {
		t.Fatalf("TasksPage(after the last) = %q, want none", got)
	}
	for _, size := range []int{1, 2, 3, 1000} {
		var all []string
		for after := ""; ; {
			page := store.TasksPage(slices.Clone(names), after, size)
			if len(page) > size {
				t.Fatalf("page of %d: %q", size, page)
			}
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			after = page[len(page)-1]
		}
		if !slices.Equal(all, want) {
			t.Fatalf("pages of %d: %q, want %q", size, all, want)
		}
	}
}
