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
