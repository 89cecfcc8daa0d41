package main

// Issue 11, item 1: a command's processes that escape supervision (setsid, double fork, deaf to SIGTERM,
// re-parented to the shim) are dead on every stop path before once reports the attempt over.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escaperScript is a shell fragment that leaves three processes deaf to SIGTERM, each appending its pid to
// f: a double-forked setsid daemon, a double-forked child that stays in the group, and a plain
// background child. It returns when all three are running.
// The fragment is the supervise package's test script.
func escaperScript(f string) string {
	script, err := filepath.Abs("../../supervise/testdata/escapers.sh")
	if err != nil {
		panic(err)
	}
	return "escapers_file=" + f + "; . " + script + "; "
}

// escaperPids reads the pids the fragment wrote, waiting for all three.
func escaperPids(t *testing.T, f string) []int {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ps := escaperPidsNow(f); len(ps) >= 3 {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("escapers never started: %v", escaperPidsNow(f))
		}
	}
}

// aliveOf returns the pids still alive and kills them, so a failing test leaves nothing behind.
func aliveOf(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if alive(pid) {
			out = append(out, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return out
}

// startEscaping starts once running pre + the escapers + post in the background; it returns when the
// escapers run.
// once's stderr goes to a file, not a pipe: a surviving escaper holding a pipe would block Wait.
func startEscaping(t *testing.T, e *env, pidFile, pre, post string, args ...string) (*exec.Cmd, fileText, []int) {
	t.Helper()
	c := e.cmd(context.Background(), append(append([]string{"run"}, args...), "--", "sh", "-c", pre+escaperScript(pidFile)+post)...)
	se := fileText(filepath.Join(t.TempDir(), "stderr"))
	f, err := os.Create(string(se))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.Stderr = f
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait(); aliveOf(escaperPidsNow(pidFile)) })
	return c, se, escaperPids(t, pidFile)
}

// waitRunsUnder waits until a descendant of pid runs the command line args (as ps shows it).
func waitRunsUnder(t *testing.T, pid int, args string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, a := range treeArgs(pid) {
			if strings.TrimSpace(a) == args {
				return
			}
		}
	}
	t.Fatalf("no process under %d ran %q within %s: %q", pid, args, within, treeArgs(pid))
}

// fileText is a file whose content String returns.
type fileText string

func (f fileText) String() string { b, _ := os.ReadFile(string(f)); return string(b) }

func escaperPidsNow(f string) []int {
	b, _ := os.ReadFile(f)
	var ps []int
	for _, s := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(s); err == nil {
			ps = append(ps, n)
		}
	}
	return ps
}

func exitOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// Every stop path through a signal to once, and the command exiting by itself: when once exits, no
// process of the run is alive, and the attempt is recorded with once's exit status.
func TestEscapersDeadWhenOnceExits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		pre, post  string
		sig        syscall.Signal // sent to once; 0: none
		grace      string
		want       int
		wantState  string
		wantInHist int
	}{
		{"command-exits", "", "exit 0", 0, "10s", 0, "succeeded", 0},
		{"sigterm-deaf-grace-1s", `trap "" TERM; `, "sleep 300", syscall.SIGTERM, "1s", 137, "failed", 137},
		{"sigterm-grace-0", "", "sleep 300", syscall.SIGTERM, "0s", -1, "failed", -1},
		{"sigint", "", "sleep 300", syscall.SIGINT, "5s", 130, "failed", 130},
		{"sighup", "", "sleep 300", syscall.SIGHUP, "5s", 129, "failed", 129},
		{"sigquit", "", "sleep 300", syscall.SIGQUIT, "5s", 131, "failed", 131},
		{"kills-its-shim", "", "sleep 0.2; kill -9 $PPID; sleep 300", 0, "10s", 137, "failed", 137},
		{"kills-its-group", "", "sleep 0.2; kill -9 0; sleep 300", 0, "10s", 137, "failed", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			task := "esc-" + tc.name
			c, se, pids := startEscaping(t, e, pidFile, tc.pre, tc.post, "--task", task, "--slot", "s", "--grace", tc.grace)
			if tc.sig != 0 {
				// Signalled once the command's sleep runs, not after a fixed 100 ms: under load that
				// was as the shell forked it, and a shell (dash) that gets SIGINT then waits for the
				// child, which never got it, as after a terminal's ^C at that instant: 137, not 130.
				waitRunsUnder(t, c.Process.Pid, "sleep 300", 20*time.Second)
				c.Process.Signal(tc.sig)
			}
			code := exitOf(c.Wait())
			if left := aliveOf(pids); len(left) > 0 {
				t.Fatalf("processes %v of the run were alive when once exited %d\n%s", left, code, se.String())
			}
			// grace 0: the command dies of SIGTERM or of the SIGKILL that follows at once.
			if tc.want >= 0 && code != tc.want || tc.want < 0 && code != 143 && code != 137 {
				t.Errorf("once exited %d, want %d\n%s", code, tc.want, se.String())
			}
			if strings.Contains(se.String(), "goroutine ") {
				t.Errorf("once dumped goroutines:\n%s", se.String())
			}
			h := e.history(task)
			if len(h) == 0 || h[0]["state"] != tc.wantState || h[0]["exit_code"] != float64(code) {
				t.Errorf("history: %v, want %s with exit %d", h, tc.wantState, code)
			}
		})
	}
}

// kill -9 of once: the shim's parent-death path kills the whole run, escapers included.
func TestEscapersDieWithKilledOnce(t *testing.T) {
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	c, _, pids := startEscaping(t, e, pidFile, `trap "" TERM; `, "sleep 300", "--task", "esc-k9", "--slot", "s")
	killed := time.Now()
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	for _, pid := range pids {
		if !waitDead(pid, 2*time.Second) {
			t.Fatalf("escaper %d alive 2s after kill -9 of once (all: %v)", pid, aliveOf(pids))
		}
	}
	t.Logf("escapers dead %s after kill -9 of once", time.Since(killed).Round(time.Millisecond))
}

// The lease is lost (another process holds SQLite's write lock past the renew deadline): the whole
// run, escapers deaf to SIGTERM included, is dead before the lease's recorded expiry.
func TestEscapersDeadBeforeLostLeaseExpires(t *testing.T) {
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	c, se, pids := startEscaping(t, e, pidFile, `trap "" TERM; `, "sleep 300",
		"--task", "esc-lost", "--slot", "s", "--ttl", "3s", "--grace", "10s")
	time.Sleep(1500 * time.Millisecond) // at least one renewal has happened

	ctx := context.Background()
	conn := writeLock(t, filepath.Join(e.home, "once.db"))
	blocked := time.Now()
	for _, pid := range pids {
		if !waitDead(pid, 6*time.Second) {
			t.Fatalf("escaper %d alive %s after the store became unwritable\n%s", pid, time.Since(blocked), se.String())
		}
	}
	dead := time.Now()
	var exp int64
	if err := conn.QueryRowContext(ctx, "SELECT expires_at FROM leases WHERE task = 'esc-lost'").Scan(&exp); err != nil {
		t.Fatal(err)
	}
	if expires := time.UnixMicro(exp); !dead.Before(expires) {
		t.Fatalf("the run's last process died at %s, after the lease expired at %s", dead.Format(time.StampMicro), expires.Format(time.StampMicro))
	} else {
		t.Logf("whole run dead %s after the store became unwritable, %s before the lease expired",
			dead.Sub(blocked).Round(time.Millisecond), expires.Sub(dead).Round(time.Millisecond))
	}
	conn.ExecContext(ctx, "ROLLBACK")
	if code := exitOf(c.Wait()); code != 137 {
		t.Errorf("once exit %d, want 137 (the deaf command was killed)\n%s", code, se.String())
	}
	h := e.history("esc-lost")
	if len(h) > 0 && h[0]["state"] == "running" {
		// once tries to record the loss until the lease's expiry, and the store was locked until
		// just before it (a loaded machine: 118 ms): the next run finds the attempt and marks it.
		if r := e.run("run", "--task", "esc-lost", "--slot", "s", "--", "true"); r.code != 76 {
			t.Errorf("the run after an unrecorded loss: exit %d, want 76 (review)\n%s", r.code, r.stderr)
		}
		h = e.history("esc-lost")
	}
	if i := slices.IndexFunc(h, func(m map[string]any) bool { return m["attempt"] == 1.0 }); i < 0 || h[i]["state"] != "unknown" {
		t.Errorf("history: %v, want the attempt unknown (stopped because the lease was lost)", h)
	}
}

// Issue 11, item 10: a command that cannot start uses up no attempt and leaves no attempt in history.
func TestCommandThatCannotStartCostsNoAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "job")
	os.WriteFile(script, []byte("#!/usr/bin/no-such-interpreter\necho hi\n"), 0o755)
	for i := 0; i < 3; i++ {
		r := e.run("run", "--task", "ns", "--slot", "s", "--max-attempts", "1", "--", script)
		if r.code != 127 || !strings.Contains(r.stderr, "/usr/bin/no-such-interpreter does not exist") || !strings.Contains(r.stderr, "nothing was run") {
			t.Fatalf("run %d: exit %d, want 127 naming the missing interpreter\n%s", i, r.code, r.stderr)
		}
		if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n > 0 {
			t.Errorf("want one line, got %d:\n%s", n+1, r.stderr)
		}
	}
	if h := e.history("ns"); len(h) != 0 {
		t.Fatalf("history has %d entries for a command that never started: %v", len(h), h)
	}
	// The interpreter appears (the user fixes the script): the slot's first attempt runs.
	os.WriteFile(script, []byte("#!/bin/sh\necho ran > "+filepath.Join(dir, "out")+"\n"), 0o755)
	if r := e.run("run", "--task", "ns", "--slot", "s", "--max-attempts", "1", "--", script); r.code != 0 {
		t.Fatalf("fixed script: exit %d\n%s", r.code, r.stderr)
	}
	if h := e.history("ns"); len(h) != 1 || h[0]["attempt"] != float64(1) || h[0]["state"] != "succeeded" {
		t.Fatalf("history: %v, want one succeeded attempt 1", h)
	}
}

// Issue 11, item 11: signals before the command starts exit 128+N and run nothing: while waiting for a
// busy lease (--wait), and while connecting to a store that does not answer.
func TestSignalsBeforeTheCommandStarts(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	holder, _ := startOnce(t, e, dir, "--task", "sw", "--ttl", "30s")
	defer holder.Process.Kill()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1} {
		c := e.cmd(context.Background(), "run", "--task", "sw", "--wait", "1m", "--", "sh", "-c", "echo ran >> "+filepath.Join(dir, "waiter"))
		var se bytes.Buffer
		c.Stderr = &se
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Waiting for the lease once it holds the task's lock file open (a fixed 700 ms was not
		// enough on a loaded fresh-clone run: the signal came before once handled signals).
		waitForOpen(t, c.Process.Pid, "/locks/", 20*time.Second)
		c.Process.Signal(sig)
		code := exitOf(c.Wait())
		if code != 128+int(sig) || !strings.Contains(se.String(), "nothing was run") {
			t.Errorf("%v while waiting: exit %d, want %d\n%s", sig, code, 128+int(sig), se.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "waiter")); err == nil {
		t.Error("a waiter ran its command")
	}

	// A store that accepts connections and never answers: SIGTERM while connecting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := e.cmd(context.Background(), "run", "--store", "postgres://once@"+ln.Addr().String()+"/once", "--task", "sc", "--", "true")
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	c.Process.Signal(syscall.SIGTERM)
	if code := exitOf(c.Wait()); code != 143 {
		t.Errorf("SIGTERM while connecting: exit %d, want 143\n%s", code, se.String())
	}
}

// waitForOpen waits until process pid has a file open whose path contains part.
func waitForOpen(t *testing.T, pid int, part string, within time.Duration) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(target, part) {
				return
			}
		}
	}
	t.Fatalf("process %d opened no file under %q within %s", pid, part, within)
}

// A stop signal while a sequence's command runs (backfill, run --catch-up) ends the sequence
// there: the next slot's attempt is not begun. It was begun, its command started and stopped at
// once, and recorded succeeded (a command that exits 0 on SIGTERM) though its work never ran.
func TestStopSignalEndsASequence(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"backfill", "--task", "bf", "--per", "day", "--from", "2026-11-01", "--to", "2026-11-10"},
		{"run", "--task", "cu", "--per", "hour", "--catch-up", "5h"},
	} {
		task := args[2]
		if args[0] == "run" { // a slot five hours ago ran: the four after it are caught up
			old := time.Now().Add(-5 * time.Hour).Format("2006-01-02T15:00:00Z07:00")
			if r := e.run("run", "--task", task, "--slot", old, "--", "true"); r.code != 0 {
				t.Fatalf("seed: %d %s", r.code, r.stderr)
			}
		}
		log := filepath.Join(t.TempDir(), "log")
		script := `trap 'echo "$ONCE_SLOT stopped" >> ` + log + `; exit 0' TERM; echo "$ONCE_SLOT start" >> ` + log + `; sleep 30 & wait`
		c := e.cmd(context.Background(), append(args, "--", "sh", "-c", script)...)
		var se bytes.Buffer
		c.Stderr = &se
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if b, _ := os.ReadFile(log); strings.Contains(string(b), "start") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: the first slot's command did not start\n%s", args, se.String())
			}
		}
		time.Sleep(200 * time.Millisecond) // its trap is set
		c.Process.Signal(syscall.SIGTERM)
		code := exitOf(c.Wait())
		b, _ := os.ReadFile(log)
		if n := strings.Count(string(b), "start"); code != 143 || n != 1 || !strings.Contains(se.String(), "were not run") {
			t.Fatalf("%v: exit %d, %d commands started (want 143, 1)\n%s\n%s", args, code, n, b, se.String())
		}
		attempts := 0
		for _, h := range e.history(task) {
			if h["attempt"] != nil && h["attempt"] != float64(0) {
				attempts++
			}
		}
		if want := map[string]int{"bf": 1, "cu": 2}[task]; attempts != want { // cu: the seeded slot's too
			t.Fatalf("%v: %d attempts in the history, want %d: %v", args, attempts, want, e.history(task))
		}
	}
}

// A backfill whose command dies of a stop signal says to run it again, not to add --keep-going,
// which would not have gone on after the signal.
func TestBackfillStoppedBySignalAdvice(t *testing.T) {
	e := newEnv(t)
	c := e.cmd(context.Background(), "backfill", "--task", "bfs", "--per", "day", "--from", "2026-11-01", "--to", "2026-11-03", "--", "sleep", "30")
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(fmt.Sprint(e.history("bfs")), "running"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first slot did not begin\n%s", se.String())
		}
	}
	c.Process.Signal(syscall.SIGTERM)
	if code := exitOf(c.Wait()); code != 143 || !strings.Contains(se.String(), "run the backfill again to resume there") || strings.Contains(se.String(), "--keep-going") {
		t.Fatalf("exit %d (want 143), a line to run it again without --keep-going:\n%s", code, se.String())
	}
}

// `nohup once run …` (SIGHUP ignored when once starts) is not stopped by a hangup: the ssh
// session that started it may end. os/signal's Notify would take the ignored signal back, and
// the run was stopped, 129, recorded failed.
func TestHangupIgnoredAtStartStaysIgnored(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	started, done := filepath.Join(dir, "started"), filepath.Join(dir, "done")
	c := exec.Command("sh", "-c", `trap "" HUP; exec "$@"`, "sh", e.bin, "run", "--task", "nohup", "--",
		"sh", "-c", "touch "+started+"; sleep 1; touch "+done)
	c.Env = e.vars
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			t.Fatalf("the command did not start\n%s", se.String())
		}
	}
	c.Process.Signal(syscall.SIGHUP)
	if code := exitOf(c.Wait()); code != 0 {
		t.Fatalf("SIGHUP to a once started with SIGHUP ignored: exit %d, want 0 (the run goes on)\n%s", code, se.String())
	}
	if _, err := os.Stat(done); err != nil {
		t.Errorf("the command was stopped: %v", err)
	}
}
