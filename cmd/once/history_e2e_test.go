package main

// History at scale, on the real binary: pages by cursor, streamed output in bounded memory, and
// prune (and run --retain) keeping what the guarantees need.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonLines parses --jsonl output into entries.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var es []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("--jsonl line %q: %v", sc.Text(), err)
		}
		es = append(es, m)
	}
	return es
}

func runIDs(es []map[string]any) string {
	var ids []string
	for _, e := range es {
		ids = append(ids, fmt.Sprint(e["state"], ":", e["run_id"]))
	}
	return strings.Join(ids, " ")
}

// TestHistoryPages: --limit cuts a page and names the next one on stderr; following the cursors
// gives what --limit 0 gives, in the same order; --after pages back; --json is the array of what
// --jsonl prints line by line; a cursor once never gave out is refused with 64 and one line.
func TestHistoryPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 3 {
		for _, cmd := range []string{"false", "true"} {
			e.run("run", "--task", "paged", "--slot", fmt.Sprint("s", i), "--", cmd)
		}
	}
	e.run("run", "--task", "other", "--", "true")
	all := e.run("history", "--task", "paged", "--limit", "0", "--jsonl")
	if all.code != 0 {
		t.Fatalf("history --limit 0 --jsonl: %d %s", all.code, all.stderr)
	}
	want := jsonLines(t, all.stdout)
	if len(want) != 6 {
		t.Fatalf("history: %d entries, want 6:\n%s", len(want), all.stdout)
	}
	var walked []map[string]any
	args := []string{"history", "--task", "paged", "--limit", "4", "--jsonl"}
	for page := 0; ; page++ {
		r := e.run(args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		es := jsonLines(t, r.stdout)
		walked = append(walked, es...)
		if len(es) < 4 || page > 3 {
			break
		}
		args = []string{"history", "--task", "paged", "--limit", "4", "--jsonl", "--before", es[len(es)-1]["cursor"].(string)}
	}
	if runIDs(walked) != runIDs(want) {
		t.Fatalf("pages:\n got %s\nwant %s", runIDs(walked), runIDs(want))
	}
	// Text: the next page is named on stderr, and is the same page.
	r := e.run("history", "--task", "paged", "--limit", "4")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 5 || !strings.Contains(r.stderr, "--before "+want[3]["cursor"].(string)) {
		t.Fatalf("history --limit 4: %d\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Back from the oldest entry.
	back := e.run("history", "--task", "paged", "--limit", "2", "--jsonl", "--after", want[5]["cursor"].(string))
	if got := jsonLines(t, back.stdout); runIDs(got) != runIDs(want[3:5]) {
		t.Fatalf("--after the oldest, 2: %s, want %s", runIDs(got), runIDs(want[3:5]))
	}
	// --json is one array of the same objects.
	arr := e.run("history", "--task", "paged", "--limit", "0", "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(arr.stdout), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("--json (%v) is not the array of --jsonl's lines:\n%s", err, arr.stdout)
	}
	if empty := e.run("history", "--task", "none", "--json"); empty.stdout != "[]\n" {
		t.Fatalf("--json of nothing: %q", empty.stdout)
	}
	for _, bad := range [][]string{{"--before", "yesterday"}, {"--after", "1.a.-1"}, {"--json", "--jsonl"}} {
		r := e.run(append([]string{"history"}, bad...)...)
		if r.code != 64 || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("history %v: %d %q, want 64 and one line", bad, r.code, r.stderr)
		}
	}
}

// seedHistory writes n succeeded attempts of task "big" (one slot each) straight into the ledger
// of e, which one run created.
func seedHistory(t *testing.T, e *env, n int) {
	t.Helper()
	if r := e.run("run", "--task", "big", "--slot", "first", "--", "true"); r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	db, err := sql.Open("sqlite", filepath.Join(e.home, "once.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Duration(n) * time.Minute).UnixMicro()
	const batch = 500
	for i := 0; i < n; i += batch {
		var vals []string
		var args []any
		for j := i; j < min(n, i+batch); j++ {
			vals = append(vals, "('big', ?, 1, ?, 'succeeded', 'seed', 1, ?, ?, 'a note of some length, as jobs leave')")
			at := base + int64(j)*60e6
			args = append(args, fmt.Sprintf("s%07d", j), fmt.Sprintf("r%07d", j), at, at+1e6)
		}
		if _, err := tx.Exec(`INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at, note)
			VALUES `+strings.Join(vals, ", "), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryAllInBoundedMemory: history --limit 0 of 200,000 entries, in each format, is written
// as it is read: peak RSS stays far below what holding them would take (the output alone is over
// 100 MB as JSON).
func TestHistoryAllInBoundedMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("seeds 200,000 attempts and reads them three times: minutes under -race, whose shadow memory would be the figure")
	}
	e := newEnv(t)
	const n = 200_000
	seedHistory(t, e, n)
	for _, format := range []string{"--jsonl", "--json", ""} {
		args := []string{"history", "--limit", "0"}
		if format != "" {
			args = append(args, format)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		c := e.cmd(ctx, args...)
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		lines, bytesOut := 0, int64(0)
		br := bufio.NewReaderSize(out, 1<<16)
		for {
			line, err := br.ReadSlice('\n')
			bytesOut += int64(len(line))
			if len(line) > 0 && line[len(line)-1] == '\n' {
				lines++
			}
			if err == io.EOF {
				break
			}
			if err != nil && err != bufio.ErrBufferFull {
				t.Fatal(err)
			}
		}
		err = c.Wait()
		cancel()
		if err != nil {
			t.Fatalf("history %s: %v %s", format, err, stderr.String())
		}
		rss := c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
		t.Logf("history --limit 0 %s: %d entries, %d lines, %.0f MB written, peak RSS %d MiB", format, n+1, lines, float64(bytesOut)/1e6, rss/1024)
		const limit = 64 << 10
		if rss > limit {
			t.Errorf("history --limit 0 %s: peak RSS %d MiB for %d entries, want ≤ %d MiB (bounded, not growing with history)", format, rss/1024, n+1, limit>>10)
		}
		wantLines := map[string]int{"--jsonl": n + 1, "": n + 2}[format]
		if format == "--json" {
			wantLines = (n+1)*22 + 1 // an indented object per entry, and the brackets
		}
		if format != "--json" && lines != wantLines {
			t.Errorf("history --limit 0 %s: %d lines, want %d", format, lines, wantLines)
		}
	}
}

// TestPruneKeepsWhatDecisionsNeed: prune removes superseded attempts and old events, and after it
// a done slot still skips (also under --catch-up), a slot out of attempts still needs review with
// the same budget, and status lists the same slots waiting.
func TestPruneKeepsWhatDecisionsNeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run := func(want int, args ...string) result {
		t.Helper()
		r := e.run(append([]string{"run"}, args...)...)
		if r.code != want {
			t.Fatalf("once run %v: exit %d, want %d\n%s", args, r.code, want, r.stderr)
		}
		return r
	}
	awayFromMidnight(t)
	// done: failed twice, then succeeded today.
	run(1, "--task", "done", "--per", "day", "--", "false")
	run(1, "--task", "done", "--per", "day", "--", "false")
	run(0, "--task", "done", "--per", "day", "--", "true")
	run(0, "--task", "done", "--per", "day", "--", "true") // skipped: an event
	// budget: out of attempts, waits for review.
	run(1, "--task", "budget", "--per", "day", "--max-attempts", "2", "--", "false")
	run(1, "--task", "budget", "--per", "day", "--max-attempts", "2", "--", "false")
	run(76, "--task", "budget", "--per", "day", "--max-attempts", "2", "--", "false")
	// nightly without a slot: runs pile up in slot "".
	for range 3 {
		run(0, "--task", "noslot", "--", "true")
	}
	statusBefore := e.run("status", "--json")
	time.Sleep(1100 * time.Millisecond)

	dry := e.run("prune", "--older-than", "0h1s", "--dry-run", "--json")
	var counted map[string]any
	if err := json.Unmarshal([]byte(dry.stdout), &counted); dry.code != 0 || err != nil {
		t.Fatalf("prune --dry-run: %d %s %s", dry.code, dry.stdout, dry.stderr)
	}
	// done: 2 failed attempts; noslot: 2 superseded runs. Events: the skip; budget's review stays.
	if counted["attempts"] != 4.0 || counted["events"] != 1.0 || counted["dry_run"] != true {
		t.Fatalf("prune --dry-run counted %v", counted)
	}
	if h := e.history("done"); len(h) != 4 {
		t.Fatalf("a dry run removed history: %d entries", len(h))
	}
	r := e.run("prune", "--older-than", "0h1s")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "removed 4 attempts and 1 events older than ") {
		t.Fatalf("prune: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if h := e.history("done"); len(h) != 1 || h[0]["state"] != "succeeded" {
		t.Fatalf("done after prune: %v", h)
	}
	if h := e.history("budget"); len(h) != 3 {
		t.Fatalf("budget after prune: %d entries, want its 2 attempts and the review", len(h))
	}
	if after := e.run("status", "--json"); after.stdout != statusBefore.stdout {
		t.Fatalf("status changed:\nbefore %s\nafter  %s", statusBefore.stdout, after.stdout)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	run(0, "--task", "done", "--per", "day", "--", "touch", marker)
	if fileExists(marker) {
		t.Fatal("a done slot ran again after prune")
	}
	run(76, "--task", "budget", "--per", "day", "--max-attempts", "2", "--", "touch", marker)
	if fileExists(marker) {
		t.Fatal("a slot out of attempts ran again after prune")
	}
	if h := e.history("noslot"); len(h) != 1 {
		t.Fatalf("noslot after prune: %d entries, want its last run", len(h))
	}
	// Nothing is older than a day: a prune by a day removes nothing.
	if r := e.run("prune", "--older-than", "1d"); r.code != 0 || !strings.HasPrefix(r.stdout, "removed 0 attempts and 0 events") {
		t.Fatalf("prune --older-than 1d: %d %q", r.code, r.stdout)
	}
	// --forget-slots: done slots with nothing since the cutoff go whole (done and noslot); the
	// slot waiting for review stays.
	time.Sleep(1100 * time.Millisecond)
	r = e.run("prune", "--older-than", "0h1s", "--forget-slots")
	if r.code != 0 || !strings.Contains(r.stdout, "(2 slots forgotten whole)") {
		t.Fatalf("prune --forget-slots: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if h := e.history("budget"); len(h) != 4 {
		t.Fatalf("--forget-slots touched a slot waiting for review: %d entries", len(h))
	}
	// A forgotten slot reads as never run: the documented trade of --forget-slots.
	run(0, "--task", "done", "--per", "day", "--", "touch", marker)
	if !fileExists(marker) {
		t.Fatal("a forgotten slot did not run: it should read as never run")
	}
	for _, bad := range [][]string{{}, {"--older-than", "0"}, {"--older-than", "-1d"}, {"--older-than", "5"}, {"--older-than", "1d", "--task", "bad task"}} {
		r := e.run(append([]string{"prune"}, bad...)...)
		if r.code != 64 || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("prune %v: %d %q, want 64 and one line", bad, r.code, r.stderr)
		}
	}
}

// TestRunRetain: with ONCE_RETAIN, each run removes what aged out since the task's previous run,
// by prune's rule: a task without slots keeps its last run only, once they are old enough. On a
// key-value store (store.Retainer) a run prunes the whole task, and not again within a 24th of the
// age (a minute at least).
func TestRunRetain(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := host(t, "h", b.isolated())
			for i := range 3 { // nothing is an hour old
				if r := e.run("run", "--task", "kept", "--retain", "1h", "--", "true"); r.code != 0 {
					t.Fatalf("run %d: %d %s", i, r.code, r.stderr)
				}
			}
			if h := e.history("kept"); len(h) != 3 {
				t.Fatalf("history before anything aged: %d entries", len(h))
			}
			time.Sleep(1200 * time.Millisecond)
			e.vars = append(e.vars, "ONCE_RETAIN=0h1s")
			if r := e.run("run", "--task", "kept", "--", "true"); r.code != 0 {
				t.Fatalf("run: %d %s", r.code, r.stderr)
			}
			// The three older runs aged out; the run before this one is the slot's last but this one
			// superseded it too.
			if h := e.history("kept"); len(h) != 1 {
				t.Fatalf("history after a retained run: %d entries, want 1: %v", len(h), h)
			}
			time.Sleep(1200 * time.Millisecond)
			if r := e.run("run", "--task", "kept", "--", "true"); r.code != 0 {
				t.Fatalf("run: %d %s", r.code, r.stderr)
			}
			want := 1
			if b.name == "redis" || b.name == "etcd" || b.name == "zk" {
				want = 2 // the last prune of the whole task was a second ago
			}
			if h := e.history("kept"); len(h) != want {
				t.Fatalf("history after another retained run: %d entries, want %d: %v", len(h), want, h)
			}
		})
	}
	e := newEnv(t)
	if r := e.run("run", "--task", "kept", "--retain", "2x", "--", "true"); r.code != 64 {
		t.Fatalf("--retain 2x: %d %s", r.code, r.stderr)
	}
	bad := newEnv(t)
	bad.vars = append(bad.vars, "ONCE_RETAIN=soon")
	if r := bad.run("run", "--task", "kept", "--", "true"); r.code != 64 || !strings.Contains(r.stderr, "ONCE_RETAIN") {
		t.Fatalf("ONCE_RETAIN=soon: %d %s", r.code, r.stderr)
	}
}

func fileExists(path string) bool {
	return exec.Command("test", "-e", path).Run() == nil
}

// A run with --retain that other launches found busy while it ran still prunes what aged out
// since the task's previous run. The window began at the run's own start, so it pruned nothing:
// it took the entry after its own n newest as the previous launch, and a busy event was newer.
func TestRunRetainWithBusyLaunches(t *testing.T) {
	e := newEnv(t)
	for _, cmd := range []string{"false", "true"} { // slot a1: attempt 1 failed, superseded by 2
		e.run("run", "--task", "rb", "--slot", "a1", "--", cmd)
	}
	time.Sleep(2500 * time.Millisecond)
	// The long run's command runs until the busy launch is done (not a fixed 2 s after a fixed
	// 700 ms: under load the second launch could come before the first held the lease, or after it ended).
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
	long := e.cmd(context.Background(), "run", "--task", "rb", "--slot", "a2", "--retain", "0h2s", "--", "sh", "-c",
		"echo > "+started+"; while [ ! -e "+release+" ]; do sleep 0.02; done")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { long.Process.Kill(); long.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long run's command did not start within 20 s")
		}
	}
	r := e.run("run", "--task", "rb", "--slot", "a2", "--", "true")
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r.code != 75 {
		t.Fatalf("second launch: %d %s, want 75 (busy)", r.code, r.stderr)
	}
	if err := long.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, h := range e.history("rb") {
		if h["slot"] == "a1" && h["attempt"] == float64(1) {
			t.Fatalf("a1's superseded attempt 1 is still there after the retained run: %v", e.history("rb"))
		}
	}
}
