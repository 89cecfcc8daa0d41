package store_test

import (
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

func TestJoinNote(t *testing.T) {
	for _, c := range [][3]string{{"", "", ""}, {"a", "", "a"}, {"", "b", "b"}, {"a", "b", "a; b"}} {
		if got := store.JoinNote(c[0], c[1]); got != c[2] {
			t.Errorf("JoinNote(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestReportApply(t *testing.T) {
	n := int64(0)
	a := store.Attempt{Records: 5, Progress: "1/2", Checkpoint: "c", Note: "n"}
	store.Report{}.Apply(&a)
	if a.Records != 5 || a.Progress != "1/2" || a.Checkpoint != "c" || a.Note != "n" {
		t.Fatalf("an empty report changed %+v", a)
	}
	store.Report{Records: &n, Progress: "2/2", Checkpoint: "d", Note: "m"}.Apply(&a)
	if a.Records != 0 || a.Progress != "2/2" || a.Checkpoint != "d" || a.Note != "m" {
		t.Fatalf("after a full report: %+v", a)
	}
}

func TestCheckScope(t *testing.T) {
	for scope, ok := range map[string]bool{"": false, "a": true, strings.Repeat("x", store.MaxScopeLen): true, strings.Repeat("x", store.MaxScopeLen+1): false} {
		if err := store.CheckScope(scope); (err == nil) != ok {
			t.Errorf("CheckScope(%d bytes) = %v", len(scope), err)
		}
	}
}

func TestConcurrent(t *testing.T) {
	seat := func(sl string, n int) store.Attempt { return store.Attempt{Slot: sl, Limit: n} }
	for _, c := range []struct {
		a, b store.Attempt
		want bool
	}{
		{seat("s1", 2), seat("s2", 2), true},
		{seat("s1", 2), seat("s2", 5), true}, // different N on one task count the same seats
		{seat("s1", 2), seat("s1", 2), false},
		{seat("s1", 0), seat("s2", 2), false},
		{seat("s1", 0), seat("s2", 0), false},
	} {
		if got := store.Concurrent(c.a, c.b); got != c.want || store.Concurrent(c.b, c.a) != c.want {
			t.Errorf("Concurrent(%+v, %+v) = %v, want %v (both ways)", c.a, c.b, got, c.want)
		}
	}
}
