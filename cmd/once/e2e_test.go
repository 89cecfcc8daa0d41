package main

// End-to-end tests: they build the real binary and run it as cron, systemd or a person would.
//
// A test calls t.Parallel when it mostly waits (for leases to expire, grace, the processes it
// starts) and none of these holds; the others run first, one at a time, before any parallel one
// starts (docs/testing.md):
//   - it checks a time: a bound on how long something took, a kill -9 or lease window, launches
//     that must overlap a short command, a daemon's slots;
//   - it loads the machine: bursts, volumes (atVolume), a backfill that spins for seconds;
//   - it changes what the process shares: environment variables (t.Setenv), the working
//     directory, fixed ports or files.
//
// Each test has its own ONCE_HOME (newEnv) and, on a shared server, its own prefix (isolated).

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/once-run/once/supervise"
)

// bin is the once binary under test, built with -race when the tests are.
var bin string

// volumeBin is the once binary the volume tests run (hundreds of processes at once, 100,000 keys):
// bin without -race. The race detector sees races inside one process, and the other tests run
// the same code paths in the race-built binary; at volume it only multiplies the time (100,000
// keys: 1.8 s → 98 s) and the memory (a burst of 200 launches, 400 race-built processes with the
// shims, ran the machine out of it); the store-flow story in the shell 206 s → 22 s. See
// docs/testing.md.
var volumeBin string

// parallel is -parallel for this package when the command line gives none (go test's default is
// GOMAXPROCS, 2 on the test machine): the parallel tests mostly wait, and at 4 they keep about
// one core busy between them (docs/testing.md). It also lets four of the subtests that run a case
// on every store at once (TestStoresKill9TakeoverAfterTTL, …) run together instead of two.
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	dir, err := os.MkdirTemp("", "once-e2e-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "once")
	volumeBin = bin
	// build builds once into out, and once-shim beside it, as the packages install them.
	build := func(out string, race bool) {
		buildCmd(out, race, ".")
		buildCmd(filepath.Join(filepath.Dir(out), supervise.ShimName), race, "../once-shim")
	}
	build(bin, raceEnabled)
	if raceEnabled {
		volumeBin = filepath.Join(dir, "norace", "once") // named once too: scripts call it by name
		build(volumeBin, false)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildCmd builds the command in pkg (relative to cmd/once) into out.
func buildCmd(out string, race bool, pkg string) {
	args := []string{"build", "-o", out}
	cmd := exec.Command("go")
	if race {
		args = append(args, "-race")
	} else {
		// Built as the release is (release/: static, -trimpath): the scripts test what ships, and
		// release/'s test, later in the test command, finds every package compiled and only links.
		args = append(args, "-trimpath")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	cmd.Args = append(cmd.Args, append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, b)
		os.Exit(1)
	}
}

// env is one simulated machine: its own ONCE_HOME (and so its own embedded store and lock dir).
type env struct {
	t    *testing.T
	home string
	vars []string
	bin  string // the binary it runs: bin, or volumeBin (atVolume)
	// nobody runs the processes as uid 65534 (asNobody: a second user of the machine)
	nobody bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	return &env{t: t, home: home, vars: []string{"ONCE_HOME=" + home, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), noExitSleep}, bin: bin}
}

// noExitSleep is in the environment of every process the tests start. A race-built process that
// exits 0 first sleeps GORACE's atexit_sleep_ms, 1 s by default, and `once run` is two of them
// (once and its supervision shim): 2.2 s a run instead of 0.3 s, most of this package's time.
// Nothing is lost: after the sleep the race runtime waits for the reports under way, and every
// race between accesses made before the exit is reported at the second access; the sleep only
// lets goroutines run on past the exit, which a build without -race never does. The race
// runtime's exit status (66 after a report) is unchanged. Without -race GORACE is not read.
const noExitSleep = "GORACE=atexit_sleep_ms=0"

// atVolume makes e run volumeBin, for a test of hundreds of processes or 100,000 keys, or a story
// of many processes each of whose code paths a race-built test runs too; a PATH entry for bin's
// directory (keysEnv: scripts that call once by name) then names volumeBin's.
func (e *env) atVolume() *env {
	e.bin = volumeBin
	old, dir := "PATH="+filepath.Dir(bin)+":", "PATH="+filepath.Dir(volumeBin)+":"
	for i, v := range e.vars {
		if strings.HasPrefix(v, old) {
			e.vars[i] = dir + strings.TrimPrefix(v, old)
		}
	}
	return e
}

type result struct {
	code           int
	stdout, stderr string
	dur            time.Duration
}

func (e *env) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, e.bin, args...)
	c.Env = e.vars
	if e.nobody {
		c.SysProcAttr = nobodyAttr()
	}
	return c
}

func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return collect(e.t, e.cmd(ctx, args...))
}

// collect runs c and returns what it wrote, its exit code and how long it took; an error other
// than an exit status (the program did not start, or its output could not be read) fails t.
func collect(t testing.TB, c *exec.Cmd) result {
	t.Helper()
	var so, se bytes.Buffer
	c.Stdout, c.Stderr = &so, &se
	start := time.Now()
	err := c.Run()
	r := result{stdout: so.String(), stderr: se.String(), dur: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", filepath.Base(c.Args[0]), c.Args[1:], err)
	}
	return r
}

func (e *env) history(task string) []map[string]any {
	e.t.Helper()
	r := e.run("history", "--task", task, "--json", "--limit", "0")
	if r.code != 0 {
		e.t.Fatalf("history: %d %s", r.code, r.stderr)
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		e.t.Fatalf("history json: %v\n%s", err, r.stdout)
	}
	return out
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestEightConcurrentRunsOneExecutes(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.run("run", "--task", "eight", "--", "sh", "-c", "echo x >> "+marker+"; sleep 2")
			codes[i] = r.code
		}()
	}
	wg.Wait()
	ran, busy := 0, 0
	for _, c := range codes {
		switch c {
		case 0:
			ran++
		case 75:
			busy++
		default:
			t.Errorf("unexpected exit code %d", c)
		}
	}
	if n := countLines(t, marker); n != 1 || ran != 1 || busy != 7 {
		t.Fatalf("executions=%d ran=%d busy=%d, want 1/1/7 (codes %v)", n, ran, busy, codes)
	}
}

func TestSlotRunsOnceAndFailedSlotRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	r := e.run("run", "--task", "daily", "--slot", "batch-7", "--", "sh", "-c", "echo x >> "+marker)
	if r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	r = e.run("run", "-v", "--task", "daily", "--slot", "batch-7", "--", "sh", "-c", "echo x >> "+marker)
	if r.code != 0 || countLines(t, marker) != 1 {
		t.Fatalf("second run: code %d, executions %d, want 0 and 1\n%s", r.code, countLines(t, marker), r.stderr)
	}
	if !strings.Contains(r.stderr, "skipped") {
		t.Errorf("no skip log line: %s", r.stderr)
	}

	envOut := filepath.Join(t.TempDir(), "env")
	awayFromMidnight(t)
	r = e.run("run", "--task", "flaky", "--per", "day", "--", "sh", "-c", "exit 3")
	if r.code != 3 {
		t.Fatalf("failing run exit %d, want 3 (pass-through)", r.code)
	}
	r = e.run("run", "--task", "flaky", "--per", "day", "--", "sh", "-c", "env | grep ^ONCE_ | sort > "+envOut)
	if r.code != 0 {
		t.Fatalf("retry: %d %s", r.code, r.stderr)
	}
	got, _ := os.ReadFile(envOut)
	for _, want := range []string{"ONCE_ATTEMPT=2", "ONCE_PREVIOUS=failed", "ONCE_TASK=flaky", "ONCE_STORE=sqlite://" + e.home + "/once.db"} {
		if !strings.Contains(string(got), want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, got)
		}
	}
	day := time.Now().Format("2006-01-02")
	if !strings.Contains(string(got), "ONCE_SLOT="+day) || !strings.Contains(string(got), "ONCE_IDEMPOTENCY_KEY=flaky/"+day) {
		t.Errorf("slot env wrong (day %s):\n%s", day, got)
	}
	h := e.history("flaky")
	if len(h) < 2 || h[0]["state"] != "succeeded" || h[len(h)-1]["state"] != "failed" {
		t.Errorf("history: %v", h)
	}
}

// TestSecondsAndEverySchedules: --schedule takes a leading seconds field and "@every D"; the slot
// is the fire time to the second, and a second run in the same slot is skipped.
func TestSecondsAndEverySchedules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ task, sched string }{{"sec", "0 0 0 * * *"}, {"every", "@every 24h"}} {
		out := filepath.Join(t.TempDir(), "slot")
		awayFromMidnight(t)
		before := time.Now().UTC().Format("2006-01-02")
		for i := 0; i < 2; i++ {
			r := e.run("run", "--task", c.task, "--schedule", c.sched, "--tz", "UTC", "--", "sh", "-c", "echo $ONCE_SLOT >> "+out)
			if r.code != 0 {
				t.Fatalf("%s run %d: %d %s", c.sched, i+1, r.code, r.stderr)
			}
		}
		after := time.Now().UTC().Format("2006-01-02")
		got, _ := os.ReadFile(out)
		if g := string(got); g != before+"T00:00:00+00:00\n" && g != after+"T00:00:00+00:00\n" {
			t.Errorf("%s: ONCE_SLOT lines %q, want one, of today's 00:00:00+00:00", c.sched, g)
		}
	}
	if r := e.run("run", "--task", "t", "--schedule", "@every 1500ms", "--", "true"); r.code != 64 || !strings.Contains(r.stderr, "whole seconds") {
		t.Errorf("@every 1500ms: %d %s", r.code, r.stderr)
	}
}

func TestMaxAttemptsNeedsReview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := 1; i <= 2; i++ {
		if r := e.run("run", "--task", "t", "--slot", "s", "--max-attempts", "2", "--", "false"); r.code != 1 {
			t.Fatalf("attempt %d exit %d", i, r.code)
		}
	}
	r := e.run("run", "--task", "t", "--slot", "s", "--max-attempts", "2", "--", "true")
	if r.code != 76 || !strings.Contains(r.stderr, "once resolve --task t --slot s --as failed") {
		t.Fatalf("third: %d, want 76 and the resolve command\n%s", r.code, r.stderr)
	}
	if r := e.run("resolve", "--task", "t", "--slot", "s", "--as", "failed", "--note", "fixed the input"); r.code != 0 {
		t.Fatalf("resolve: %d %s", r.code, r.stderr)
	}
	if r := e.run("run", "--task", "t", "--slot", "s", "--max-attempts", "2", "--", "true"); r.code != 0 {
		t.Fatalf("after resolve: %d %s", r.code, r.stderr)
	}
}

// startOnce starts once in the background running a command that records its pid and traps TERM.
func startOnce(t *testing.T, e *env, dir string, args ...string) (*exec.Cmd, int) {
	t.Helper()
	pidFile := filepath.Join(dir, "pid")
	script := fmt.Sprintf(`trap 'echo TERM >> %[1]s/signals; exit 143' TERM; echo $$ > %[2]s.tmp; mv %[2]s.tmp %[2]s; while :; do sleep 0.05; done`, dir, pidFile)
	c := e.cmd(context.Background(), append(append([]string{"run"}, args...), "--", "sh", "-c", script)...)
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return c, pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	// exec's goroutine writes se until once's stderr is closed: read it after Wait (a race otherwise).
	c.Process.Kill()
	c.Wait()
	t.Fatalf("command did not start; once stderr: %s", se.String())
	return nil, 0
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func waitDead(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return !alive(pid)
}

func TestKill9OfOnceTakesCommandAndSlotNeedsReview(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	c, pid := startOnce(t, e, dir, "--task", "k9", "--slot", "s1", "--ttl", "2s")
	killed := time.Now()
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	if !waitDead(pid, time.Second) {
		t.Fatalf("command %d still alive 1s after once was killed", pid)
	}
	t.Logf("command dead %s after kill -9 of once", time.Since(killed).Round(time.Millisecond))

	// Within the TTL another run is busy; after it, the slot needs review.
	if r := e.run("run", "--task", "k9", "--slot", "s1", "--", "true"); r.code != 75 {
		t.Fatalf("within TTL: %d, want 75\n%s", r.code, r.stderr)
	}
	time.Sleep(time.Until(killed.Add(2200 * time.Millisecond)))
	r := e.run("run", "--task", "k9", "--slot", "s1", "--", "true")
	if r.code != 76 || !strings.Contains(r.stderr, "once resolve --task k9 --slot s1 --as failed") {
		t.Fatalf("after TTL: %d, want 76 naming the resolve command\n%s", r.code, r.stderr)
	}
	st := e.run("status", "--json")
	if !strings.Contains(st.stdout, `"k9"`) {
		t.Errorf("status does not list the slot waiting for review: %s", st.stdout)
	}
	if r := e.run("resolve", "--task", "k9", "--slot", "s1", "--as", "failed", "--note", "nothing written"); r.code != 0 {
		t.Fatalf("resolve: %d %s", r.code, r.stderr)
	}
	marker := filepath.Join(dir, "ran")
	r = e.run("run", "--task", "k9", "--slot", "s1", "--", "sh", "-c", "echo $ONCE_ATTEMPT $ONCE_PREVIOUS > "+marker)
	if got, _ := os.ReadFile(marker); r.code != 0 || string(got) != "2 unknown\n" {
		t.Fatalf("after resolve: %d %q %s", r.code, got, r.stderr)
	}
	h := e.history("k9")
	var sawUnknown bool
	for _, x := range h {
		if x["state"] == "unknown" && x["resolution"] != nil {
			sawUnknown = true
		}
	}
	if !sawUnknown {
		t.Errorf("history lacks the resolved unknown attempt: %v", h)
	}
}

func TestOnUnknownRerun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, _ := startOnce(t, e, t.TempDir(), "--task", "rr", "--slot", "s", "--ttl", "1s")
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	time.Sleep(1200 * time.Millisecond)
	out := filepath.Join(t.TempDir(), "o")
	r := e.run("run", "--task", "rr", "--slot", "s", "--on-unknown", "rerun", "--", "sh", "-c", "echo $ONCE_ATTEMPT $ONCE_PREVIOUS > "+out)
	if got, _ := os.ReadFile(out); r.code != 0 || string(got) != "2 unknown\n" {
		t.Fatalf("rerun: %d %q %s", r.code, got, r.stderr)
	}
}

func TestSIGTERMForwardedThenKillAfterGrace(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	// The command traps TERM but this one ignores it to force the SIGKILL after grace.
	pidFile := filepath.Join(dir, "pid")
	script := fmt.Sprintf(`trap 'echo TERM >> %[1]s/signals' TERM; echo $$ > %[2]s.tmp; mv %[2]s.tmp %[2]s; while :; do sleep 0.05; done`, dir, pidFile)
	c := e.cmd(context.Background(), "run", "--task", "term", "--grace", "700ms", "--", "sh", "-c", script)
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	sent := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	took := time.Since(sent)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 137 {
		t.Fatalf("once exit: %v, want 137 (SIGKILL after grace)\n%s", err, se.String())
	}
	if took < 600*time.Millisecond || took > 5*time.Second {
		t.Errorf("took %s, want about the 700ms grace", took)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "signals")); !strings.Contains(string(b), "TERM") {
		t.Errorf("command did not get SIGTERM first")
	}
	h := e.history("term")
	if len(h) == 0 || h[0]["state"] != "failed" || h[0]["exit_code"] != float64(137) {
		t.Errorf("history: %v", h)
	}
}

func TestBadInputExits64AndRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := []string{"--", "sh", "-c", "echo x > " + marker}
	cases := map[string][]string{
		"bad task":          {"run", "--task", "a b"},
		"empty task":        {"run", "--task", ""},
		"long task":         {"run", "--task", strings.Repeat("x", 201)},
		"bad duration":      {"run", "--task", "t", "--ttl", "soon"},
		"negative duration": {"run", "--task", "t", "--grace", "-1s"},
		"bad cron":          {"run", "--task", "t", "--schedule", "61 * * * *"},
		"bad seconds":       {"run", "--task", "t", "--schedule", "60 0 2 * * *"},
		"bad every":         {"run", "--task", "t", "--schedule", "@every 25h"},
		"bad zone":          {"run", "--task", "t", "--per", "day", "--tz", "Mars/Olympus"},
		"bad per":           {"run", "--task", "t", "--per", "fortnight"},
		"conflicting slots": {"run", "--task", "t", "--per", "day", "--slot", "x"},
		"unknown scheme":    {"run", "--task", "t", "--store", "mongo://x"},
		"bad policy":        {"run", "--task", "t", "--on-unknown", "maybe"},
		"unknown flag":      {"run", "--task", "t", "--frobnicate"},
		"replace and wait":  {"run", "--task", "t", "--replace", "--wait", "5s"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			r := e.run(append(args, cmd...)...)
			if r.code != 64 {
				t.Errorf("exit %d, want 64; stderr: %s", r.code, r.stderr)
			}
			if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.stderr, "once: ") {
				t.Errorf("want one line starting with 'once: ', got %q", r.stderr)
			}
		})
	}
	if r := e.run("run", "--task", "t"); r.code != 64 || !strings.Contains(r.stderr, "missing command") {
		t.Errorf("missing command: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command ran despite bad input")
	}
}

func TestCorruptStoreExits69(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	db := filepath.Join(t.TempDir(), "bad.db")
	os.WriteFile(db, bytes.Repeat([]byte("not a database "), 512), 0o600)
	r := e.run("run", "--task", "t", "--store", "sqlite://"+db, "--", "sh", "-c", "echo x > "+marker)
	if r.code != 69 {
		t.Fatalf("exit %d, want 69: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("command ran on a corrupt store")
	}
}

func TestReportShownByHistoryAndCheckpointHandedOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "cp")
	r := e.run("run", "--task", "rep", "--slot", "s", "--", "sh", "-c",
		bin+" report --records 42 --progress 2/3 --checkpoint flow-2000 --note halfway && exit 1")
	if r.code != 1 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "records=42") {
		t.Errorf("end line lacks records: %s", r.stderr)
	}
	h := e.history("rep")
	if len(h) != 1 || h[0]["records"] != float64(42) || h[0]["checkpoint"] != "flow-2000" || !strings.Contains(fmt.Sprint(h[0]["note"]), "halfway") {
		t.Fatalf("history: %v", h)
	}
	r = e.run("run", "--task", "rep", "--slot", "s", "--", "sh", "-c", "echo $ONCE_CHECKPOINT > "+out)
	if got, _ := os.ReadFile(out); r.code != 0 || string(got) != "flow-2000\n" {
		t.Fatalf("checkpoint: %d %q", r.code, got)
	}
	if r := e.run("report", "--records", "1"); r.code != 64 {
		t.Errorf("report outside a run: %d, want 64", r.code)
	}
	// A count no store keeps is bad input (64), not a report the store did not record (1).
	r = e.run("run", "--task", "rep", "--slot", "big", "--", "sh", "-c", bin+" report --records 9007199254740992; exit $?")
	if r.code != 64 || !strings.Contains(r.stderr, "out of range") {
		t.Errorf("report --records 2^53: exit %d, want 64\n%s", r.code, r.stderr)
	}
}

func TestJSONLogLines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("run", "--task", "j", "--log-format", "json", "-v", "--", "true")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("%d %q", r.code, r.stderr)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		for _, k := range []string{"task", "run_id", "holder", "token", "attempt"} {
			if _, ok := m[k]; !ok {
				t.Errorf("log line lacks %s: %s", k, l)
			}
		}
	}
}

func TestCommandNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "nf", "--", "no-such-command-xyz"); r.code != 127 {
		t.Fatalf("exit %d, want 127: %s", r.code, r.stderr)
	}
	// An empty name (once run -- "$CMD" with CMD unset) says so: it read "command not found:  ".
	r := e.run("run", "--task", "nf", "--", "")
	if want := "once: command not found: the command's name is empty (an unset variable?) (nothing was run)\n"; r.code != 127 || r.stderr != want {
		t.Fatalf("an empty command: exit %d, %q; want 127 and %q", r.code, r.stderr, want)
	}
}

func TestSignalExitPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "sig", "--", "sh", "-c", "kill -USR1 $$"); r.code != 128+int(syscall.SIGUSR1) {
		t.Fatalf("exit %d, want %d", r.code, 128+int(syscall.SIGUSR1))
	}
}

// writeLock holds SQLite's write lock on the database at path (BEGIN EXCLUSIVE) until the test ends or
// the caller rolls back: the store becomes unwritable to once. It waits up to 5 s for a write of
// once's in progress (a renewal) to end, as once's own connections do, rather than fail with
// SQLITE_BUSY when it lands on one.
func writeLock(t *testing.T, path string) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.ExecContext(ctx, "ROLLBACK"); conn.Close() })
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// The store becomes unwritable mid-run (another process holds SQLite's write lock): renewals fail, and
// the command must be dead before the lease's expiry as the store recorded it.
func TestUnrenewableLeaseStopsCommandBeforeExpiry(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	c, pid := startOnce(t, e, dir, "--task", "unw", "--ttl", "3s", "--grace", "10s")
	time.Sleep(1500 * time.Millisecond) // at least one renewal has happened

	ctx := context.Background()
	conn := writeLock(t, filepath.Join(e.home, "once.db"))
	blocked := time.Now()
	if !waitDead(pid, 6*time.Second) {
		t.Fatalf("command still alive %s after the store became unwritable", time.Since(blocked))
	}
	dead := time.Now()
	var exp int64
	if err := conn.QueryRowContext(ctx, "SELECT expires_at FROM leases WHERE task = 'unw'").Scan(&exp); err != nil {
		t.Fatal(err)
	}
	expires := time.UnixMicro(exp)
	if !dead.Before(expires) {
		t.Fatalf("command died at %s, after the lease expired at %s", dead.Format(time.StampMicro), expires.Format(time.StampMicro))
	}
	t.Logf("command stopped %s after the store became unwritable, %s before the lease expired",
		dead.Sub(blocked).Round(time.Millisecond), expires.Sub(dead).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(dir, "signals")); !strings.Contains(string(b), "TERM") {
		t.Errorf("command was not sent SIGTERM")
	}
	conn.ExecContext(ctx, "ROLLBACK")
	err := c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
		t.Errorf("once exit %v, want 143 (the command's status after SIGTERM)", err)
	}
}
