package main

// once daemon's operations through the real binary, on the embedded store: overlap policies,
// reload, drain, pause/resume/trigger, logs and jobs, bad jobs files, systemd's notify protocol.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func countState(h []map[string]any, state, noteHas string) int {
	n := 0
	for _, e := range h {
		if e["state"] == state && strings.Contains(fmt.Sprint(e["note"]), noteHas) {
			n++
		}
	}
	return n
}

// Each overlap policy, with slots due every second and runs of 2.5 s.
func TestDaemonOverlapPolicies(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	var b strings.Builder
	for _, p := range []string{"skip", "buffer-one", "replace"} {
		fmt.Fprintf(&b, "[[job]]\nname = %q\nschedule = \"@every 1s\"\ntz = \"UTC\"\noverlap = %q\ngrace = \"1s\"\ncommand = \"sleep 2.5\"\n\n", p, p)
	}
	d := startDaemon(t, e, "node-a", "--jobs", writeJobs(t, dir, "jobs.toml", b.String()))
	// Until each policy has shown itself (a loaded machine starts runs late, and a slot due while
	// the run before has not begun yet waits instead of meeting the policy), at most 40 s.
	var skip, buf, rep []map[string]any
	seen := func() bool {
		skip, buf, rep = e.history("skip"), e.history("buffer-one"), e.history("replace")
		return countState(skip, "skipped", "overlap = skip") >= 3 && countState(skip, "succeeded", "") >= 1 &&
			countState(buf, "skipped", "overlap = buffer-one") >= 2 && countState(buf, "succeeded", "") >= 2 &&
			countState(rep, "failed", "replaced by slot") >= 3
	}
	for deadline := time.Now().Add(40 * time.Second); !seen() && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	d.stop(syscall.SIGTERM, 20*time.Second)
	skip, buf, rep = e.history("skip"), e.history("buffer-one"), e.history("replace")
	if countState(skip, "skipped", "overlap = skip") < 3 || countState(skip, "succeeded", "") < 1 {
		t.Errorf("skip: %v", skip)
	}
	if countState(buf, "skipped", "overlap = buffer-one") < 2 || countState(buf, "succeeded", "") < 2 {
		t.Errorf("buffer-one: %v", buf)
	}
	if countState(rep, "failed", "replaced by slot") < 3 {
		t.Errorf("replace: %v", rep)
	}
}

// A reload on a change of the file and on SIGHUP: a bad file keeps the jobs running and says
// what to fix; a good one applies (an added job fires, a removed one stops).
func TestDaemonReload(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	job := func(name string) string {
		return fmt.Sprintf("[[job]]\nname = %q\nschedule = \"@every 1s\"\ncommand = \"echo %s >> %s/ran\"\n", name, name, dir)
	}
	path := writeJobs(t, dir, "jobs.toml", job("a"))
	d := startDaemon(t, e, "node-a", "--jobs", path)
	d.waitLog(`msg=end task=a`, 10*time.Second)
	writeJobs(t, dir, "jobs.toml", job("a")+"bogus = 1\n")
	d.waitLog("reload refused", 20*time.Second)
	if !strings.Contains(d.logText(), "jobs.toml:5: ") {
		t.Errorf("the refusal does not say file:line: %s", d.logText())
	}
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	// The second refusal comes when the daemon has reloaded: waited for, not a fixed second.
	for deadline := time.Now().Add(20 * time.Second); strings.Count(d.logText(), "reload refused") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("SIGHUP did not reload (refusals %d)", strings.Count(d.logText(), "reload refused"))
			break
		}
	}
	// Job a goes on firing every second under the bad file (the second run may still be under
	// way on a loaded machine: wait for it, 20 s at most).
	before := 0
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if before = strings.Count(string(must(os.ReadFile(filepath.Join(dir, "ran")))), "a\n"); before >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if before < 2 {
		t.Errorf("job a stopped firing on a bad file: %d runs", before)
	}
	writeJobs(t, dir, "jobs.toml", job("b"))
	d.waitLog("reloaded", 20*time.Second)
	d.waitLog(`msg=end task=b`, 20*time.Second)
	time.Sleep(1500 * time.Millisecond)
	ran := string(must(os.ReadFile(filepath.Join(dir, "ran"))))
	time.Sleep(1500 * time.Millisecond)
	if after := string(must(os.ReadFile(filepath.Join(dir, "ran")))); strings.Count(after, "a\n") != strings.Count(ran, "a\n") {
		t.Errorf("the removed job a still fires")
	}
	if code := d.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// SIGTERM drains: a job that ends within --drain finishes and succeeds; one that does not is
// stopped (SIGTERM, then its grace) and recorded failed; the daemon exits 0 either way.
func TestDaemonDrain(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf(`[[job]]
name = "short"
schedule = "@every 1s"
command = "sleep 1.5; echo done >> %[1]s/short"

[[job]]
name = "long"
schedule = "@every 1s"
grace = "1s"
command = "trap 'echo TERM >> %[1]s/long; exit 143' TERM; echo start >> %[1]s/long; while :; do sleep 0.1; done"
`, dir))
	d := startDaemon(t, e, "node-a", "--jobs", jobs, "--drain", "2500ms")
	waitLines(t, filepath.Join(dir, "long"), 1, 10*time.Second)
	start := time.Now()
	if code := d.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("drained in %s: the long job did not get --drain", took)
	}
	if got := string(must(os.ReadFile(filepath.Join(dir, "long")))); got != "start\nTERM\n" {
		t.Errorf("long job saw %q, want start then TERM", got)
	}
	if h := e.history("long"); countState(h, "failed", "drains") != 1 {
		t.Errorf("long: %v", h)
	}
	if h := e.history("short"); countState(h, "succeeded", "") < 1 || countState(h, "failed", "") != 0 {
		t.Errorf("short did not finish within the drain: %v", h)
	}
}

// SIGQUIT (a terminal's Ctrl-\) drains as SIGTERM does, after printing the goroutines' stacks
// (what an operator sends it for): before, Go dumped them and the daemon exited 2 with the running
// attempt left running, unknown once its lease expired.
func TestDaemonSIGQUITDrains(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf(`[[job]]
name = "long"
schedule = "@every 1s"
grace = "1s"
command = "echo start >> %s/long; while :; do sleep 0.1; done"
`, dir))
	d := startDaemon(t, e, "node-q", "--jobs", jobs, "--drain", "300ms")
	waitLines(t, filepath.Join(dir, "long"), 1, 10*time.Second)
	if code := d.stop(syscall.SIGQUIT, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGQUIT, want 0 (drained)", code)
	}
	if !strings.Contains(d.logText(), "goroutine ") {
		t.Errorf("SIGQUIT printed no goroutine's stack")
	}
	if h := e.history("long"); countState(h, "failed", "drains") != 1 || countState(h, "running", "") != 0 {
		t.Errorf("long: want its attempt recorded failed by the drain, none running: %v", h)
	}
}

// pause, resume and trigger through the store, as a person on another machine would; jobs and
// logs show the state and the output.
func TestDaemonPauseResumeTriggerLogs(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"ctl\"\nschedule = \"@every 1s\"\ncommand = \"echo out-$ONCE_SLOT; echo $ONCE_SLOT >> %s/ran\"\n", dir))
	ran := filepath.Join(dir, "ran")
	d := startDaemon(t, e, "node-a", "--jobs", jobs)
	waitLines(t, ran, 1, 10*time.Second)
	if r := e.run("pause", "ctl", "--note", "maintenance"); r.code != 0 || !strings.Contains(r.stdout, "paused ctl") {
		t.Fatalf("pause: %d %s %s", r.code, r.stdout, r.stderr)
	}
	d.waitLog("job paused", 20*time.Second)
	// A run that began before the node saw the pause goes on (on a loaded machine its start may
	// be logged after the pause); a slot that fired after it never runs, and once a slot has been
	// recorded as paused, nothing runs at all.
	seen := logTime(t, d.logText(), `msg="job paused"`)
	d.waitLog(`msg=skipped task=ctl`, 20*time.Second)
	time.Sleep(time.Second)
	n := countLines(t, ran)
	time.Sleep(2 * time.Second)
	if m := countLines(t, ran); m != n {
		t.Fatalf("a paused job ran %d times after a slot was recorded as paused", m-n)
	}
	for _, sl := range strings.Fields(string(must(os.ReadFile(ran)))) {
		if at, err := time.Parse(time.RFC3339, sl); err != nil || at.After(seen) {
			t.Fatalf("slot %s ran, which fired after the node saw the pause at %s (%v)", sl, seen.Format(time.RFC3339Nano), err)
		}
	}
	if r := e.run("jobs", "--jobs", jobs); r.code != 0 || !strings.Contains(r.stdout, "paused") || !strings.Contains(r.stdout, "maintenance") {
		t.Errorf("jobs: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r := e.run("trigger", "ctl")
	if r.code != 0 || !strings.Contains(r.stdout, "slot manual:") {
		t.Fatalf("trigger: %d %s %s", r.code, r.stdout, r.stderr)
	}
	manual := strings.TrimSpace(r.stdout[strings.Index(r.stdout, "manual:"):])
	waitLines(t, ran, n+1, 20*time.Second)
	if got := string(must(os.ReadFile(ran))); !strings.HasSuffix(got, manual+"\n") {
		t.Errorf("the trigger did not run its slot %s: %q", manual, got)
	}
	// The run's output is in once logs when its end is recorded: waited for, not a fixed second.
	l := e.run("logs", "ctl")
	for deadline := time.Now().Add(20 * time.Second); l.stdout != "out-"+manual+"\n" && time.Now().Before(deadline); l = e.run("logs", "ctl") {
		time.Sleep(100 * time.Millisecond)
	}
	if l.code != 0 || l.stdout != "out-"+manual+"\n" {
		t.Errorf("logs: %d %q %s", l.code, l.stdout, l.stderr)
	}
	if r := e.run("resume", "ctl"); r.code != 0 || !strings.Contains(r.stdout, "resumed ctl") {
		t.Fatalf("resume: %d %s", r.code, r.stdout)
	}
	waitLines(t, ran, n+3, 20*time.Second)
	if h := e.history("ctl"); countState(h, "skipped", "paused") < 1 {
		t.Errorf("the paused slots are not in history: %v", h)
	}
	d.stop(syscall.SIGTERM, 20*time.Second)
}

// A bad jobs file: exit 64 with file:line, and nothing fires.
func TestDaemonBadJobsFile(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	for _, c := range []struct{ name, text, want string }{
		{"a.toml", "[[job]]\nname = \"x\"\nschedule = \"61 * * * *\"\ncommand = \"true\"\n", "a.toml:3: "},
		{"b.toml", "[[job]]\nname = \"x\"\nschedule = \"@daily\"\ncomand = \"true\"\n", "did you mean command?"},
		{"c.crontab", "0 2 * * * /bin/true\n0 2 * * * /bin/true\n", "c.crontab:2: "},
	} {
		path := writeJobs(t, dir, c.name, c.text)
		for _, args := range [][]string{{"daemon", "--jobs", path}, {"daemon", "--check", path}} {
			r := e.run(args...)
			if r.code != 64 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%v: %d %q, want 64 and one line with %q", args, r.code, r.stderr, c.want)
			}
		}
	}
	if h := e.history("x"); len(h) != 0 {
		t.Errorf("something ran: %v", h)
	}
}

// Under systemd (Type=notify) the daemon says READY, RELOADING then READY on SIGHUP, and
// STOPPING on SIGTERM; its jobs do not inherit NOTIFY_SOCKET.
func TestDaemonSystemdNotify(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if !strings.Contains(m, want) {
				t.Fatalf("notify %q, want %s", m, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", want)
		}
	}
	e.vars = append(e.vars, "NOTIFY_SOCKET="+sock)
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"env\"\nschedule = \"@every 1s\"\ncommand = \"env > %s/env\"\n", dir))
	d := startDaemon(t, e, "node-a", "--jobs", jobs)
	next("READY=1")
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	next("RELOADING=1")
	next("READY=1")
	waitLines(t, filepath.Join(dir, "env"), 1, 20*time.Second)
	d.stop(syscall.SIGTERM, 20*time.Second)
	next("STOPPING=1")
	if env := string(must(os.ReadFile(filepath.Join(dir, "env")))); strings.Contains(env, "NOTIFY_SOCKET") || !strings.Contains(env, "ONCE_SLOT=") {
		t.Errorf("the job's environment: %s", env)
	}
}

// logTime is the time of the first line of a text log that holds s.
func logTime(t *testing.T, log, s string) time.Time {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		f := strings.Fields(line)
		if len(f) > 0 {
			if at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time=")); err == nil {
				return at
			}
		}
		t.Fatalf("no time in the log line %q", line)
	}
	t.Fatalf("no log line holds %q", s)
	return time.Time{}
}

// A jobs file seen mid-write (rewritten in place: truncated, then written, as a paste into
// `cat > jobs.toml` or an editor that writes in place does) loses no slot: the daemon reloaded the
// empty file (no jobs), and when the jobs came back they fired from their next slot, the slots of
// the gap with no record at all. Each slot between the first run and the last now has an entry
// (run, caught up or missed).
func TestDaemonJobsFileSeenMidWrite(t *testing.T) {
	t.Parallel()
	e, dir := newEnv(t), t.TempDir()
	text := "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ntz = \"UTC\"\ncommand = \"true\"\n"
	path := writeJobs(t, dir, "jobs.toml", text)
	d := startDaemon(t, e, "node-a", "--jobs", path)
	d.waitLog(`msg=end task=tick`, 10*time.Second)
	writeJobs(t, dir, "jobs.toml", "")
	d.waitLog("jobs=0", 10*time.Second)
	time.Sleep(3 * time.Second) // slots fire while the file is empty
	writeJobs(t, dir, "jobs.toml", text)
	back := time.Now().UTC()
	slots := func() []time.Time {
		var out []time.Time
		for _, h := range e.history("tick") {
			if at, err := time.Parse(time.RFC3339, fmt.Sprint(h["slot"])); err == nil {
				out = append(out, at)
			}
		}
		slices.SortFunc(out, time.Time.Compare)
		return out
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s := slots(); len(s) > 0 && s[len(s)-1].After(back.Add(2*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not fire again after the file was written back")
		}
	}
	if code := d.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	s := slots()
	seen := map[time.Time]bool{}
	for _, at := range s {
		seen[at] = true
	}
	for at := s[0]; at.Before(s[len(s)-1]); at = at.Add(time.Second) {
		if !seen[at] {
			t.Errorf("slot %s has no record: neither run nor missed", at.Format(time.RFC3339))
		}
	}
	if t.Failed() {
		t.Logf("history: %v", e.history("tick"))
	}
}

// A drain whose store does not answer (a frozen server: connections accepted, nothing answered)
// still stops every running job soon after the drain time: each stop wrote its note to the
// store (up to 5 s) before it signalled the job, one job after another under the job's lock, so
// the Nth job got its SIGTERM N×5 s late, and a node running 100 jobs outlived systemd's
// TimeoutStopSec (which then SIGKILLs them, their slots left for review).
func TestDaemonDrainStopsEveryJobWhileTheStoreHangs(t *testing.T) {
	t.Parallel()
	proc, addr, _, ok := privateRedisServer(t)
	if !ok {
		t.Skip("redis-server not installed")
	}
	e, dir := newEnv(t), t.TempDir()
	var text strings.Builder
	const jobs = 5
	for i := range jobs {
		fmt.Fprintf(&text, "[[job]]\nname = \"j%d\"\nschedule = \"* * * * * *\"\ntz = \"UTC\"\n"+
			"command = \"trap 'echo j%d >> %s/term; exit 143' TERM; sleep 120 & wait\"\n", i, i, dir)
	}
	path := writeJobs(t, dir, "jobs.toml", text.String())
	d := startDaemon(t, e, "node-a", "--jobs", path, "--store", "redis://"+addr+"/0", "--drain", "1s")
	for i := range jobs {
		d.waitLog(fmt.Sprintf("msg=start task=j%d ", i), 20*time.Second)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	// The drain (1 s), a store call under way when it began, one 5 s bound on the notes: 15 s is
	// plenty; before, the fifth job waited 25 s more.
	deadline := time.Now().Add(15 * time.Second)
	for countLines(t, filepath.Join(dir, "term")) < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("15 s after SIGTERM (drain 1s), %d of %d jobs were signalled", countLines(t, filepath.Join(dir, "term")), jobs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
