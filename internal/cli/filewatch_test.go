package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A change of the jobs file is reloaded once the file is the same at two polls in a row: one
// still being written (a paste into `cat > jobs.toml`, an editor writing in place) is not read
// half-way, which could be a valid file with fewer jobs, or none.
func TestFileWatchWaitsForTheFileToSettle(t *testing.T) {
	p := filepath.Join(t.TempDir(), "jobs.toml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	w := newFileWatch(p)
	if w.changed() {
		t.Fatal("changed with no change")
	}
	write("")
	if w.changed() {
		t.Fatal("a file seen changed at one poll only was reloaded (it may be half-written)")
	}
	write("ab")
	if w.changed() {
		t.Fatal("a file still being written was reloaded")
	}
	if !w.changed() {
		t.Fatal("a file the same at two polls was not reloaded")
	}
	if w.changed() {
		t.Fatal("reloaded twice for one change")
	}
	write("a")
	if w.changed() || !w.changed() {
		t.Fatal("a second change: want a reload at the second poll that sees it")
	}
}

// A file that changes at every poll is not reloaded, and the watch says so once per streak.
func TestFileWatchRestless(t *testing.T) {
	p := filepath.Join(t.TempDir(), "jobs.toml")
	w := newFileWatch(p)
	said := 0
	for i := range 3 * restlessPolls {
		if err := os.WriteFile(p, []byte(strings.Repeat("a", i+1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if w.changed() {
			t.Fatalf("poll %d: a file changing at every poll was reloaded", i)
		}
		if w.restless() {
			said++
		}
	}
	if said != 1 {
		t.Fatalf("said %d times that the file keeps changing; want once", said)
	}
	if !w.changed() || w.restless() {
		t.Fatal("once settled: want a reload, and no warning")
	}
}
