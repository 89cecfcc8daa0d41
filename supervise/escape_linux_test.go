package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escapers is a shell fragment that leaves three processes deaf to SIGTERM, each appending its pid to f:
// a double-forked setsid daemon (a new session and group, re-parented to the shim), a double-forked
// child that stays in the group (re-parented to the shim), and a plain background child.
// The fragment returns when all three have written their pids.
func escapers(f string) string {
	script, err := filepath.Abs("testdata/escapers.sh")
	if err != nil {
		panic(err)
	}
	return "escapers_file=" + f + "; . " + script + "; "
}

// waitPids waits until f lists n pids, each of which has exec'd sleep.
func waitPids(t *testing.T, f string, n int) []int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(f)
		if ps := pids(t, string(b)); len(ps) >= n && strings.HasSuffix(string(b), "\n") {
			for _, pid := range ps {
				waitComm(t, pid, "sleep")
			}
			return ps
		}
	}
	b, _ := os.ReadFile(f)
	t.Fatalf("%s lists %q, want %d pids", f, b, n)
	return nil
}

// survivors returns the pids still alive, and kills them so a failing test leaves nothing behind.
func survivors(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if alive(pid) {
			out = append(out, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return out
}

// Every way a run can be stopped ends with no process of the run alive when Wait returns, whatever
// the command did: setsid, double fork, ignoring SIGTERM.
func TestStopPathsLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pre     string // before the escapers are started
		command string // after they have been started
		stop    func(p *Process)
		want    Exit
	}{
		// The lease was lost, or once got SIGTERM: TERM now, SIGKILL after grace; the command is deaf too.
		{"term-then-kill", `trap "" TERM; `, `sleep 300`, func(p *Process) { p.Stop(syscall.SIGTERM, 200*time.Millisecond) },
			Exit{Code: 137, Signal: syscall.SIGKILL}},
		// --grace 0 with a cooperative command.
		{"grace-0", ``, `sleep 300`, func(p *Process) { p.Stop(syscall.SIGTERM, 0) }, Exit{}},
		// SIGKILL straight away.
		{"kill", ``, `sleep 300`, func(p *Process) { p.Stop(syscall.SIGKILL, time.Hour) }, Exit{Code: 137, Signal: syscall.SIGKILL}},
		// A cooperative command that exits on TERM, leaving its deaf daemons behind.
		{"term-honoured", `trap "exit 0" TERM; `, `sleep 300 & wait`, func(p *Process) { p.Stop(syscall.SIGTERM, time.Hour) }, Exit{}},
		// The command exits by itself, leaving them behind.
		{"command-exits", ``, `exit 3`, nil, Exit{Code: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "pids")
			p, err := Start(Config{Args: []string{"sh", "-c", tc.pre + escapers(f) + tc.command}, Shim: shim})
			if err != nil {
				t.Fatal(err)
			}
			var ps []int
			if tc.stop != nil {
				ps = waitPids(t, f, 3)
				tc.stop(p)
			}
			e, err := p.Wait()
			if tc.stop == nil {
				b, _ := os.ReadFile(f)
				if ps = pids(t, string(b)); len(ps) != 3 {
					t.Fatalf("pids %q", b)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := survivors(ps); len(s) > 0 {
				t.Fatalf("processes %v of the run survived Wait (exit %+v)", s, e)
			}
			// grace 0 races the command's own death by TERM with the SIGKILL: either is right.
			if e != tc.want && !(tc.name == "grace-0" && (e.Signal == syscall.SIGTERM || e.Signal == syscall.SIGKILL)) {
				t.Errorf("exit %+v, want %+v", e, tc.want)
			}
			t.Logf("exit %+v; %d escapers dead", e, len(ps))
		})
	}
}

// The shim freezes nothing and kills nothing of its own while a stop is merely pending: a TERM that the
// command honours leaves the command's exit status intact.
func TestStopKeepsCommandStatus(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	p, err := Start(Config{Args: []string{"sh", "-c", `trap "exit 7" TERM; echo > ` + ready + `; sleep 300 & wait`}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready) // the trap is set (a fixed 100 ms could come before the shell's start under load)
	p.Stop(syscall.SIGTERM, 5*time.Second)
	if e, _ := p.Wait(); e != (Exit{Code: 7}) {
		t.Errorf("got %+v, want exit 7", e)
	}
}

// A command that kills its own shim (kill -9 $PPID) orphans its daemons; a subreaper parent adopts them
// and Wait returns only after they are dead. Runs in a child process, since becoming a subreaper is for
// the whole process.
func TestShimKilledOrphansSwept(t *testing.T) {
	for name, kill := range map[string]string{"shim": "kill -9 $PPID", "group": "kill -9 0"} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "pids")
			script := escapers(f) + `sleep 0.2; ` + kill + `; sleep 300`
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), "SUPERVISE_TEST_REAPER="+script)
			c.Stderr = os.Stderr
			stdout, _ := c.StdoutPipe()
			stdin, _ := c.StdinPipe()
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); c.Wait() }()
			// The child prints "waited …" when Wait returned and then waits for its stdin to close.
			line := make(chan string, 1)
			go func() {
				l, _ := bufio.NewReader(stdout).ReadString('\n')
				line <- l
			}()
			var said string
			select {
			case said = <-line:
			case <-time.After(20 * time.Second):
			}
			if !strings.HasPrefix(said, "waited") {
				t.Fatalf("reaper child: %q", said)
			}
			b, _ := os.ReadFile(f)
			ps := pids(t, string(b))
			if len(ps) < 3 {
				t.Fatalf("pids %q", b)
			}
			if s := survivors(ps); len(s) > 0 {
				t.Fatalf("orphans %v survived Wait; child said %q", s, said)
			}
			t.Logf("child: %s", strings.TrimSpace(said))
		})
	}
}

// reaperChild is the child process of TestShimKilledOrphansSwept.
func reaperChild(script string) int {
	if err := BecomeSubreaper(); err != nil {
		fmt.Println("subreaper:", err)
		return 1
	}
	p, err := Start(Config{Args: []string{"sh", "-c", script}, Shim: shim})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	e, err := p.Wait()
	fmt.Printf("waited: exit %+v err %v\n", e, err)
	var b [1]byte
	os.Stdin.Read(b[:])
	return 0
}

// A prepared command that is cancelled runs nothing; one that is started runs.
func TestPrepareCancel(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ran")
	pr, err := Prepare(Config{Args: []string{"sh", "-c", "echo > " + f}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	pr.Cancel()
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(f); err == nil {
		t.Fatal("a cancelled command ran")
	}
	pr, err = Prepare(Config{Args: []string{"sh", "-c", "echo > " + f}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pr.Start()
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := p.Wait(); e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
	if _, err := os.Stat(f); err != nil {
		t.Fatal("a started command did not run")
	}
}

// Prepare finds, before anything runs, a script whose interpreter is missing and a program whose loader
// is missing: execve would fail with ENOENT although the file exists.
func TestPrepareMissingInterpreter(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "job.py")
	os.WriteFile(script, []byte("#!/usr/bin/no-such-python3 -u\nprint(1)\n"), 0o755)
	nested := filepath.Join(dir, "nested")
	os.WriteFile(nested, []byte("#! "+script+"\n"), 0o755)
	notExec := filepath.Join(dir, "notexec")
	os.WriteFile(notExec, []byte("#!"+filepath.Join(dir, "plain")+"\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644)
	ok := filepath.Join(dir, "ok.sh")
	os.WriteFile(ok, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	// A script without #! (sh would run it; execve says ENOEXEC), and an empty file.
	noShebang := filepath.Join(dir, "noshebang.sh")
	os.WriteFile(noShebang, []byte("echo hi\n"), 0o755)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o755)

	// A copy of /bin/true whose loader path names a file that does not exist (same length).
	trueBin, _ := exec.LookPath("true")
	elf, err := os.ReadFile(trueBin)
	if err != nil {
		t.Fatal(err)
	}
	loader := filepath.Join(dir, "badloader")
	for _, ld := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux-armhf.so.3"} {
		if i := bytes.Index(elf, []byte(ld)); i >= 0 {
			bad := strings.Replace(ld, "ld-", "zz-", 1)
			elf = bytes.Replace(elf, []byte(ld), []byte(bad), 1)
			break
		}
	}
	os.WriteFile(loader, elf, 0o755)

	for _, tc := range []struct {
		path string
		want error
		msg  string
	}{
		{script, ErrNotFound, "interpreter /usr/bin/no-such-python3 does not exist"},
		{nested, ErrNotFound, "no-such-python3"},
		{notExec, ErrNotExecutable, "plain"},
		{loader, ErrNotFound, "loader"},
		{noShebang, ErrNotExecutable, "no #! line"},
		{empty, ErrNotExecutable, "no #! line"},
	} {
		if tc.want == ErrNotExecutable && tc.msg == "no #! line" && binfmtMisc() {
			continue // a binfmt_misc format may run it: execve decides
		}
		_, err := Prepare(Config{Args: []string{tc.path}, Shim: shim})
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
			t.Errorf("%s: got %v, want %v mentioning %q", filepath.Base(tc.path), err, tc.want, tc.msg)
		}
	}
	if e := run(t, Config{Args: []string{ok}, Shim: shim}); e.Code != 0 {
		t.Errorf("ok.sh: %+v", e)
	}
	if e := run(t, Config{Args: []string{trueBin}, Shim: shim}); e.Code != 0 {
		t.Errorf("true: %+v", e)
	}
}

// The run's tree is found through children files, not a scan of every process on the host (issue 12:
// a host with thousands of processes), and finds what a full scan finds.
func TestTreeWalkDoesNotScanProc(t *testing.T) {
	if !childrenFile() {
		t.Skip("kernel without /proc/PID/task/TID/children")
	}
	f := filepath.Join(t.TempDir(), "pids")
	c := exec.Command("sh", "-c", escapers(f)+"sleep 300")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	// Re-parented escapers go to init here (no subreaper): the tree holds the plain background child
	// and the waiting sh's own sleep.
	waitPids(t, f, 3)
	pidsOf := func(ps []proc) map[int]bool {
		m := map[int]bool{}
		for _, p := range ps {
			m[p.pid] = true
		}
		return m
	}
	same := func(g, w map[int]bool) bool {
		if len(g) != len(w) || len(g) < 2 {
			return false
		}
		for pid := range w {
			if !g[pid] {
				return false
			}
		}
		return true
	}
	// The escapers' intermediate processes exit and re-parent while we look (slowly on a loaded
	// machine), so compare a walk with a scan until the tree holds still; every walk must scan nothing.
	var got, want []proc
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		before := scans.Load()
		got = descendants(c.Process.Pid)
		if n := scans.Load() - before; n != 0 {
			t.Fatalf("descendants scanned /proc %d times", n)
		}
		want = scanDescendants(c.Process.Pid)
		if same(pidsOf(got), pidsOf(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("walk found %v, a scan %v", got, want)
		}
	}
	for _, pid := range escaperPidsIn(f) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func escaperPidsIn(f string) []int {
	b, _ := os.ReadFile(f)
	var out []int
	for _, s := range strings.Fields(string(b)) {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// A stop signal reaches a process the command forks while the signal is being sent. A shell that
// gets SIGINT while it waits for its foreground command waits for that command to end before it
// dies; when the signal went through a walk alone, a `sleep 300` forked after the walk had read
// the shell's children never got it, and the run lived until the grace's kill (137, not 130).
// The hook lets the shell fork the sleep between the walk and the walk's sends, every time: a
// walk alone then misses it (checked against the walk-only code: the run outlives the 20 s). With
// the group's signal, sent before the walk, the shell has it already and dies of it.
func TestStopReachesAChildForkedDuringTheSignal(t *testing.T) {
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	script := `echo > ` + ready + `; while [ ! -e ` + goOn + ` ]; do sleep 0.01; done; sleep 300; exit 3`
	p, err := Start(Config{Args: []string{"sh", "-c", script}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Stop(syscall.SIGKILL, 0); p.Wait() }()
	waitFile(t, ready)
	cmd := children(p.Pid())
	if len(cmd) != 1 {
		t.Fatalf("the shim's children: %v, want the command", cmd)
	}
	sh := cmd[0]
	afterWalk = func([]proc) {
		afterWalk = nil
		if err := os.WriteFile(goOn, nil, 0o600); err != nil {
			t.Error(err)
		}
		// The shell now forks sleep 300, unless the signal has ended it already.
		for deadline := time.Now().Add(20 * time.Second); alive(sh) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			for _, c := range children(sh) {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); string(b) == "sleep\x00300\x00" {
					return
				}
			}
		}
	}
	defer func() { afterWalk = nil }()
	p.Stop(syscall.SIGINT, time.Minute)
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the run outlived SIGINT by 20 s: a process forked while the signal was sent did not get it")
	}
	if e, _ := p.Wait(); e != (Exit{Code: 130, Signal: syscall.SIGINT}) {
		t.Errorf("exit %+v, want SIGINT's", e)
	}
}

// A forwarded signal reaches a process of the run outside the shim's group too (a setsid daemon):
// the group's signal does not reach it, the walk does. The walk signals none of the group's
// members, which the group's signal reached already: a second SIGINT reads as "force quit" to
// many programs.
func TestSignalReachesTheRunOutsideTheGroup(t *testing.T) {
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	daemon := `trap "echo > ` + got + `; exit 0" USR1; echo $$ > ` + ready + `; while :; do sleep 0.01; done`
	// The command lives on after the signal: the shim's cleanup would SIGTERM the daemon.
	command := `trap : USR1; setsid sh -c '` + daemon + `' & while :; do sleep 0.01; done`
	p, err := Start(Config{Args: []string{"sh", "-c", command}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Stop(syscall.SIGKILL, 0); p.Wait() }()
	setsid := pids(t, waitFile(t, ready))
	cmd := children(p.Pid())
	if len(setsid) != 1 || len(cmd) != 1 {
		t.Fatalf("the daemon %v, the shim's children %v: want one of each", setsid, cmd)
	}
	var sent []int
	afterWalk = func(outside []proc) {
		for _, o := range outside {
			sent = append(sent, o.pid)
		}
	}
	defer func() { afterWalk = nil }()
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	afterWalk = nil
	waitFile(t, got)
	if !slices.Contains(sent, setsid[0]) || slices.Contains(sent, cmd[0]) {
		t.Errorf("the walk signalled %v: want the daemon %d, not the command %d (in the group)", sent, setsid[0], cmd[0])
	}
}
