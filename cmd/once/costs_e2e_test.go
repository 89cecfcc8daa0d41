package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// syncCall matches a traced call that makes data durable.
var syncCall = regexp.MustCompile(`^\d+\s+(fsync|fdatasync|sync_file_range|syncfs|sync|msync)\(`)

// TestFsyncsPerRun counts, with strace, the fsyncs of a whole once run (once and its shim) on the
// embedded store: a run that succeeds and the skip of a slot already done. The counts are exact, so
// that a change adding a durable write shows here (docs/benchmarks.md, "Round trips and fsyncs per
// run"); the floor is two: one to start the attempt, one to finish it.
func TestFsyncsPerRun(t *testing.T) {
	t.Parallel()
	strace, err := exec.LookPath("strace")
	if err != nil {
		if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "strace") {
			t.Fatalf("strace is missing, but ONCE_TEST_REQUIRE=%s requires it (scripts/testenv/strace.sh installs it)", r)
		}
		t.Skip("strace is missing: apt-get install strace")
	}
	e := newEnv(t)
	awayFromMidnight(t)
	if r := e.run("run", "--task", "warm", "--", "true"); r.code != 0 { // the store's files made
		t.Fatalf("warm-up run: %d %s", r.code, r.stderr)
	}
	count := func(what string, args ...string) int {
		t.Helper()
		out := filepath.Join(t.TempDir(), "trace")
		c := exec.Command(strace, append([]string{"-f", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs,sync,msync", "-o", out, e.bin}, args...)...)
		c.Env = e.vars
		if b, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s under strace: %v %s", what, err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if syncCall.MatchString(l) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		what string
		args []string
		want int
	}{
		// start (lease, abandoned attempts, slot: committed without a sync, store.LazyStarter),
		// begin the attempt (its sync covers the start's frames too), finish + release: two WAL
		// syncs, and the directory's when SQLite first syncs the WAL of a new process.
		{"a run that succeeds", []string{"run", "--task", "nightly", "--per", "day", "--", "true"}, 3},
		// the slot read before the lease (store.LocalReads) says done: no lease, no attempt, and
		// the skipped event is recorded without a sync (store.LazyRecorder).
		{"the skip of a slot already done", []string{"run", "--task", "nightly", "--per", "day", "--", "true"}, 0},
	} {
		switch n := count(c.what, c.args...); {
		case n > c.want:
			t.Errorf("%s: %d fsyncs, budget %d: a change added durable writes (say why here and in docs/benchmarks.md)", c.what, n, c.want)
		case n < c.want:
			t.Errorf("%s: %d fsyncs, fewer than its budget of %d: lower the budget here and in docs/benchmarks.md", c.what, n, c.want)
		}
	}
}

// TestWALStaysShort: launches that each write once and exit (here skips, which record one event)
// keep the -wal file near its limit. Each new process rebuilds the WAL index by reading the whole
// WAL, and such launches never restarted it: it grew by ~8 frames a launch, without bound (12 MB
// after 400 skips), and every open read all of it (store/sqlite/wal.go).
func TestWALStaysShort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args := []string{"run", "--task", "often", "--per", "day", "--", "true"}
	if r := e.run(args...); r.code != 0 {
		t.Fatalf("the run: %d %s", r.code, r.stderr)
	}
	const launches, limit = 200, 1 << 20 // 200 skips wrote ~1,600 frames, 6.6 MB
	for i := 0; i < launches; i++ {
		if r := e.run(args...); r.code != 0 {
			t.Fatalf("skip %d: %d %s", i, r.code, r.stderr)
		}
	}
	fi, err := os.Stat(filepath.Join(e.home, "once.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	// The limit, and the frames one launch adds before it sees that the file is over it.
	if fi.Size() > limit+64<<10 {
		t.Fatalf("after %d skips the -wal file is %d bytes, want about %d at most", launches, fi.Size(), limit)
	}
}
