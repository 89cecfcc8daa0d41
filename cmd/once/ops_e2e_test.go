package main

// End-to-end tests of the operations commands: catch-up, backfill, drill, doctor, notifications.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func TestCatchUpRunsEachMissedDayOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "slots")
	job := []string{"--", "sh", "-c", `echo "$ONCE_SLOT" >> ` + out}
	args := append([]string{"run", "--task", "cu", "--per", "day", "--tz", "UTC", "--catch-up", "3d"}, job...)
	awayFromMidnight(t)
	now := time.Now().UTC()
	want := []string{now.AddDate(0, 0, -2).Format("2006-01-02"), now.AddDate(0, 0, -1).Format("2006-01-02"), now.Format("2006-01-02")}
	if r := e.run(args...); r.code != 0 {
		t.Fatalf("catch-up: %d %s", r.code, r.stderr)
	}
	if got := readLines(t, out); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if r := e.run(args...); r.code != 0 || len(readLines(t, out)) != 3 {
		t.Fatalf("second catch-up: %d, ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
	if r := e.run("run", "--task", "cu", "--slot", "x", "--catch-up", "3d", "--", "true"); r.code != 64 {
		t.Fatalf("--catch-up with --slot: %d, want 64", r.code)
	}
	if r := e.run("run", "--task", "cu2", "--per", "hour", "--catch-up", "30d", "--", "true"); r.code != 64 || !strings.Contains(r.stderr, "--catch-up-max") {
		t.Fatalf("720 missed hours: %d, want 64\n%s", r.code, r.stderr)
	}
}

func TestCatchUpStopsAtFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "slots")
	awayFromMidnight(t)
	bad := time.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02")
	script := `echo "$ONCE_SLOT" >> ` + out + `; [ "$ONCE_SLOT" != "$BAD" ]`
	e.vars = append(e.vars, "BAD="+bad)
	args := []string{"run", "--task", "cf", "--per", "day", "--tz", "UTC", "--catch-up", "3d", "--", "sh", "-c", script}
	r := e.run(args...)
	if r.code != 1 || !strings.Contains(r.stderr, "catch-up stopped at slot "+bad) || len(readLines(t, out)) != 2 {
		t.Fatalf("catch-up with a failing day: %d, ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
	e.vars[len(e.vars)-1] = "BAD=none"
	if r := e.run(args...); r.code != 0 {
		t.Fatalf("retry: %d %s", r.code, r.stderr)
	}
	got := readLines(t, out)
	if len(got) != 4 || got[2] != bad {
		t.Fatalf("ran %v: want the failed day retried first, then today", got)
	}
}

func TestBackfillFiveDaysOneDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "slots")
	if r := e.run("run", "--task", "bf", "--slot", "2026-11-03", "--", "true"); r.code != 0 {
		t.Fatalf("seed: %d %s", r.code, r.stderr)
	}
	bf := func(extra ...string) result {
		args := append([]string{"backfill", "--task", "bf", "--per", "day", "--tz", "UTC", "--from", "2026-11-01", "--to", "2026-11-05"}, extra...)
		return e.run(append(args, "--", "sh", "-c", `echo "$ONCE_SLOT" >> `+out)...)
	}
	r := bf("--dry-run")
	if r.code != 0 || len(readLines(t, out)) != 0 || !strings.Contains(r.stdout, "5 slots: 4 to run, 1 done") {
		t.Fatalf("dry run: %d ran %v\n%s%s", r.code, readLines(t, out), r.stdout, r.stderr)
	}
	if r := bf(); r.code != 0 || !strings.Contains(r.stderr, "4 ran (4 succeeded") {
		t.Fatalf("backfill: %d %s", r.code, r.stderr)
	}
	if got := strings.Join(readLines(t, out), ","); got != "2026-11-01,2026-11-02,2026-11-04,2026-11-05" {
		t.Fatalf("ran %s", got)
	}
	if r := bf(); r.code != 0 || len(readLines(t, out)) != 4 || !strings.Contains(r.stderr, "0 ran") {
		t.Fatalf("second backfill: %d, ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
	for _, bad := range [][]string{
		{"--from", "2026-11-05", "--to", "2026-11-01"},
		{"--from", "2026-01-01", "--to", "2026-12-31", "--max", "100"},
		{"--from", "someday", "--to", "2026-11-01"},
	} {
		args := append([]string{"backfill", "--task", "bf", "--per", "day"}, bad...)
		if r := e.run(append(args, "--", "true")...); r.code != 64 {
			t.Errorf("backfill %v: %d, want 64\n%s", bad, r.code, r.stderr)
		}
	}
}

func TestBackfillStopsAtFailureUnlessKeepGoing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "slots")
	script := `echo "$ONCE_SLOT" >> ` + out + `; [ "$ONCE_SLOT" != 2026-11-02 ] || exit 5`
	args := []string{"backfill", "--task", "bk", "--per", "day", "--from", "2026-11-01", "--to", "2026-11-03"}
	if r := e.run(append(args, "--", "sh", "-c", script)...); r.code != 5 || len(readLines(t, out)) != 2 || !strings.Contains(r.stderr, "stopped at slot 2026-11-02") {
		t.Fatalf("stop at failure: %d ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
	if r := e.run(append(args, "--keep-going", "--", "sh", "-c", script)...); r.code != 5 {
		t.Fatalf("keep going: %d %s", r.code, r.stderr)
	}
	if got := strings.Join(readLines(t, out), ","); got != "2026-11-01,2026-11-02,2026-11-02,2026-11-03" {
		t.Fatalf("ran %s", got)
	}
}

func TestDrill(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	job := []string{"--", "sh", "-c", "echo x >> " + marker + "; sleep 0.3"}
	check := "test $(wc -l < " + marker + ") -eq 1"
	r := e.run(append([]string{"drill", "--task", "d", "--slot", "drill-1", "--check", check}, job...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "PASS: 1 of 3 launches ran") || !strings.Contains(r.stdout, "blocked") || !strings.Contains(r.stdout, "skipped") {
		t.Fatalf("drill: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := countLines(t, marker); n != 1 {
		t.Fatalf("%d executions", n)
	}
	// A check that finds duplicates fails the drill.
	r = e.run(append([]string{"drill", "--task", "d", "--slot", "drill-2", "--check", "echo 2 duplicates; exit 3"}, job...)...)
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL: the check exited 3") || !strings.Contains(r.stdout, "| 2 duplicates") {
		t.Fatalf("failing check: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without a slot the third launch runs again: the warning, and FAIL (--allow-no-slot would
	// make it a PASS with a WARNING line).
	r = e.run(append([]string{"drill", "--task", "d"}, job...)...)
	if r.code != 1 || !strings.Contains(r.stdout, "no slot is configured") || !strings.Contains(r.stdout, "launch 3 (after both ended): ran") {
		t.Fatalf("no slot: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A drill reads only its own launches from history: with a fixed holder (--holder, ONCE_HOLDER)
// an earlier drill's launches have the same holders, and their entries were read as this one's,
// which made a drill without a slot whose third launch ran again PASS ("0 of 3 launches ran").
func TestDrillFixedHolderReadsOnlyItsOwnLaunches(t *testing.T) {
	e := newEnv(t)
	e.vars = append(e.vars, "ONCE_HOLDER=ci")
	marker := filepath.Join(t.TempDir(), "ran")
	job := []string{"--", "sh", "-c", "echo x >> " + marker + "; sleep 0.3"}
	if r := e.run(append([]string{"drill", "--task", "d", "--slot", "drill-1"}, job...)...); r.code != 0 {
		t.Fatalf("first drill: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := e.run(append([]string{"drill", "--task", "d"}, job...)...)
	if n := countLines(t, marker); n != 3 {
		t.Fatalf("%d executions, want 3 (one, then two without a slot)", n)
	}
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL: 2 of 3 launches ran") || !strings.Contains(r.stdout, "launch 3 (after both ended): ran") {
		t.Fatalf("second drill, no slot: %d, want FAIL with launch 3 ran\n%s%s", r.code, r.stdout, r.stderr)
	}
}
