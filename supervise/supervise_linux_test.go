package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the shim (like cmd/once) and as a fake "once" parent for the parent-death tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		code := ShimMain(os.Args[2:])
		if d, err := time.ParseDuration(os.Getenv("SUPERVISE_TEST_SHIM_LINGER")); err == nil {
			time.Sleep(d) // a shim slow to exit after its last report (TestOverBeforeTheShimExits)
		}
		os.Exit(code)
	}
	if script := os.Getenv("SUPERVISE_TEST_REAPER"); script != "" {
		os.Exit(reaperChild(script))
	}
	if script := os.Getenv("SUPERVISE_TEST_PARENT"); script != "" {
		os.Exit(fakeParent(script, os.Getenv("SUPERVISE_TEST_TRAP") != ""))
	}
	// Run under nohup (SIGHUP ignored), every command the tests start would inherit the ignored
	// HUP, and a shell cannot trap a signal ignored on entry: TestSignalGroup would wait out its
	// sleep. A handler is reset to the default at exec, an ignored signal is not.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	os.Exit(m.Run())
}

var shim = []string{"/proc/self/exe", ShimArg}

// fakeParent starts script through the shim, prints the group id and waits to be killed. With trap, Start is
// called from a goroutine locked to a thread that then exits, and many more threads are created and torn
// down: a naive Pdeathsig would fire as soon as the forking thread goes away.
func fakeParent(script string, trap bool) int {
	cfg := Config{Args: []string{"sh", "-c", script}, Shim: shim}
	var p *Process
	var err error
	if trap {
		ch := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
			p, err = Start(cfg)
			close(ch)
		}()
		<-ch
		for range 50 {
			done := make(chan struct{})
			go func() { runtime.LockOSThread(); time.Sleep(time.Millisecond); close(done) }()
			<-done
		}
		runtime.GC()
	} else {
		p, err = Start(cfg)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("pgid", p.Pid())
	select {}
}

func run(t *testing.T, cfg Config) Exit {
	t.Helper()
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func modes(t *testing.T, f func(t *testing.T, shim []string)) {
	t.Run("shim", func(t *testing.T) { f(t, shim) })
	t.Run("noshim", func(t *testing.T) { f(t, nil) })
}

func TestExitCodes(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		for _, code := range []int{0, 3, 255} {
			e := run(t, Config{Args: []string{"sh", "-c", "exit " + strconv.Itoa(code)}, Shim: shim})
			if e != (Exit{Code: code}) {
				t.Errorf("exit %d: got %+v", code, e)
			}
		}
	})
}

func TestKilledBySignal(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		// SIGQUIT and SIGSEGV are handled by the Go runtime in the shim: it must still die of them cleanly.
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGQUIT, syscall.SIGSEGV, syscall.SIGUSR2} {
			var stderr bytes.Buffer
			e := run(t, Config{Args: []string{"sh", "-c", fmt.Sprintf("kill -%d $$", sig)}, Shim: shim, Stderr: &stderr})
			if e != (Exit{Code: 128 + int(sig), Signal: sig}) {
				t.Errorf("%v: got %+v", sig, e)
			}
			if stderr.Len() > 0 {
				t.Errorf("%v: unexpected stderr %q", sig, stderr.String())
			}
		}
	})
}

// TestShimWaitStatus checks the shim itself dies the way the command did (for callers not reading the pipe).
func TestShimWaitStatus(t *testing.T) {
	// shimCmd runs the shim by hand with its status pipe on fd 3 and a control pipe that says "go" on fd 4.
	shimCmd := func(argv ...string) *exec.Cmd {
		c := exec.Command(os.Args[0], append([]string{ShimArg, shimMarker, strconv.Itoa(os.Getpid())}, argv...)...)
		sr, sw, _ := os.Pipe()
		cr, cw, _ := os.Pipe()
		cw.Write([]byte{'g'})
		cw.Close()
		go io.Copy(io.Discard, sr)
		c.ExtraFiles = []*os.File{sw, cr}
		t.Cleanup(func() { sr.Close(); sw.Close(); cr.Close() })
		return c
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGSEGV} {
		c := shimCmd("/bin/sh", "sh", "-c", fmt.Sprintf("kill -%d $$", sig))
		var stderr bytes.Buffer
		c.Stderr = &stderr
		err := c.Run()
		ws := c.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v: shim ended with %v (%v), stderr %q", sig, ws, err, stderr.String())
		}
	}
	c := shimCmd("/bin/sh", "sh", "-c", "exit 42")
	_ = c.Run()
	if c.ProcessState.ExitCode() != 42 {
		t.Errorf("exit 42: got %v", c.ProcessState)
	}
	out, _ := exec.Command(os.Args[0], ShimArg).CombinedOutput()
	if !strings.Contains(string(out), "internal") {
		t.Errorf("shim run by hand: %q", out)
	}
}

func TestNotFound(t *testing.T) {
	cases := []Config{
		{Args: []string{"no-such-command-xyz"}},
		{Args: []string{"sh"}, Env: []string{"PATH=/nonexistent"}},
		{Args: []string{"./nope"}, Dir: t.TempDir()},
		{Args: []string{"/no/such/file"}, Shim: shim},
	}
	for _, cfg := range cases {
		_, err := Start(cfg)
		if !errors.Is(err, ErrNotFound) || err.Error() != "command not found: "+cfg.Args[0] {
			t.Errorf("%v: got %v", cfg.Args, err)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	if _, err := Start(Config{Args: []string{"./noexec"}, Dir: dir}); !errors.Is(err, ErrNotExecutable) {
		t.Errorf("noexec: got %v", err)
	}
	// Exec failure inside the shim (found, executable, but not runnable) comes back through the pipe.
	os.WriteFile(filepath.Join(dir, "badfmt"), []byte("\x7fELFgarbage"), 0o755)
	if _, err := Start(Config{Args: []string{"./badfmt"}, Dir: dir, Shim: shim}); !errors.Is(err, ErrNotExecutable) {
		t.Errorf("badfmt: got %v", err)
	} else {
		t.Log(err)
	}
}

func TestIO(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		dir := t.TempDir()
		var out bytes.Buffer
		e := run(t, Config{
			Args:   []string{"sh", "-c", `cat; echo "$FOO"; pwd`},
			Env:    []string{"FOO=bar", "PATH=" + os.Getenv("PATH")},
			Dir:    dir,
			Stdin:  strings.NewReader("hello\n"),
			Stdout: &out,
			Shim:   shim,
		})
		real, _ := filepath.EvalSymlinks(dir)
		if want := "hello\nbar\n" + real + "\n"; e.Code != 0 || out.String() != want {
			t.Errorf("got %+v %q, want %q", e, out.String(), want)
		}
	})
}

// SetEnv: the environment given with the go-ahead replaces Prepare's (a shim started before the
// run's variables were known), an empty one included; one with a NUL byte is refused and the
// prepared command is ended.
func TestSetEnv(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		big := strings.Repeat("x", 60<<10) // four of them: more than a pipe holds
		for _, env := range [][]string{{"FOO=late", "BIG=" + big, "B2=" + big, "B3=" + big, "B4=" + big}, {}} {
			var out bytes.Buffer
			pr, err := Prepare(Config{Args: []string{"/bin/sh", "-c", `echo "${FOO-unset} ${#BIG}"`}, Env: []string{"FOO=early"},
				Stdout: &out, Shim: shim})
			if err != nil {
				t.Fatal(err)
			}
			pr.SetEnv(env)
			p, err := pr.Start()
			if err != nil {
				t.Fatal(err)
			}
			if e, err := p.Wait(); err != nil || e.Code != 0 {
				t.Fatalf("%+v, %v", e, err)
			}
			want := "unset 0\n"
			if len(env) > 0 {
				want = fmt.Sprintf("late %d\n", len(big))
			}
			if out.String() != want {
				t.Errorf("env %d variables: the command printed %q, want %q", len(env), out.String(), want)
			}
		}
		pr, err := Prepare(Config{Args: []string{"/bin/true"}, Shim: shim})
		if err != nil {
			t.Fatal(err)
		}
		pr.SetEnv([]string{"A=1\x00B=2"})
		if _, err := pr.Start(); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Fatalf("an environment with a NUL byte: %v", err)
		}
	})
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return string(b)
		}
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

// waitComm waits until pid runs the program comm (has exec'd it).
func waitComm(t *testing.T, pid int, comm string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			return
		}
	}
	t.Fatalf("pid %d never became %s", pid, comm)
}

// alive reports whether pid exists and is not a zombie (a zombie whose parent died may linger in a container).
func alive(pid int) bool {
	_, _, state, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

func pids(t *testing.T, s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q", f)
		}
		out = append(out, n)
	}
	return out
}

func TestStop(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		ready := filepath.Join(t.TempDir(), "ready")
		// The trap makes sh and its sleep ignore SIGTERM: only the SIGKILL after grace ends them.
		p, err := Start(Config{Args: []string{"sh", "-c", `trap "" TERM; echo > ` + ready + `; sleep 300`}, Shim: shim})
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, ready)
		start := time.Now()
		p.Stop(syscall.SIGTERM, 300*time.Millisecond)
		select {
		case <-p.Done():
			t.Fatal("exited before grace")
		case <-time.After(150 * time.Millisecond):
		}
		e, _ := p.Wait()
		d := time.Since(start)
		// The upper bound only tells the kill at the grace from none (10 s: a loaded machine).
		if e != (Exit{Code: 137, Signal: syscall.SIGKILL}) || d < 300*time.Millisecond || d > 10*time.Second {
			t.Errorf("got %+v after %v", e, d)
		}
		if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("Signal after exit: %v", err)
		}
		p.Stop(syscall.SIGTERM, time.Second) // no-op after exit

		// A second Stop with a shorter grace shortens it.
		os.Remove(ready)
		p, err = Start(Config{Args: []string{"sh", "-c", `trap "" TERM; echo > ` + ready + `; sleep 300`}, Shim: shim})
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, ready)
		start = time.Now()
		p.Stop(syscall.SIGTERM, time.Minute)
		p.Stop(syscall.SIGTERM, 200*time.Millisecond)
		p.Stop(syscall.SIGTERM, time.Hour) // does not postpone
		e, _ = p.Wait()
		if d := time.Since(start); e.Signal != syscall.SIGKILL || d > 10*time.Second { // not the minute's
			t.Errorf("shortened grace: %+v after %v", e, d)
		}

		// A command that honours SIGTERM reports 143.
		p, err = Start(Config{Args: []string{"sleep", "300"}, Shim: shim})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		p.Stop(syscall.SIGTERM, 5*time.Second)
		if e, _ := p.Wait(); e != (Exit{Code: 143, Signal: syscall.SIGTERM}) {
			t.Errorf("TERM honoured: %+v", e)
		}
	})
}

// A forwarded signal reaches a grandchild; the shim survives it and passes the command's own exit code.
func TestSignalGroup(t *testing.T) {
	modes(t, func(t *testing.T, shim []string) {
		f := filepath.Join(t.TempDir(), "pids")
		p, err := Start(Config{Args: []string{"sh", "-c", `trap "exit 5" HUP; sleep 300 & echo $! > ` + f + `; wait`}, Shim: shim})
		if err != nil {
			t.Fatal(err)
		}
		grandchild := pids(t, waitFile(t, f))[0]
		// Until the background child has exec'd sleep it still runs sh's trap handler, which would swallow HUP.
		waitComm(t, grandchild, "sleep")
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		e, _ := p.Wait()
		if e != (Exit{Code: 5}) {
			t.Errorf("got %+v", e)
		}
		for deadline := time.Now().Add(10 * time.Second); alive(grandchild) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(grandchild) {
			syscall.Kill(grandchild, syscall.SIGKILL)
			t.Errorf("grandchild %d survived SIGHUP to the group", grandchild)
		}
	})
}

// Background processes left when the command exits are killed by the shim, including one that ignores SIGTERM
// and one that called setsid() and was orphaned.
func TestStragglers(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pids")
	script := `sleep 300 & echo $! > F.tmp; (trap "" TERM; exec sleep 301) & echo $! >> F.tmp; `
	if _, err := exec.LookPath("setsid"); err == nil {
		script += `setsid sleep 302 & echo $! >> F.tmp; `
	}
	script += `mv F.tmp F; exit 4`
	script = strings.ReplaceAll(script, "F", f)
	start := time.Now()
	e := run(t, Config{Args: []string{"sh", "-c", script}, Shim: shim})
	d := time.Since(start)
	if e != (Exit{Code: 4}) {
		t.Errorf("got %+v", e)
	}
	b, _ := os.ReadFile(f)
	ps := pids(t, string(b))
	if len(ps) < 2 {
		t.Fatalf("pids %q", b)
	}
	for _, pid := range ps {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("straggler %d survived the run", pid)
		}
	}
	t.Logf("%d stragglers cleaned up; Wait returned after %v", len(ps), d)
}

// groupMembers lists live processes in process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	scanProcs(func(pid, _, pgrp int, state byte) {
		if pgrp == pgid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	})
	return out
}

func testParentKill(t *testing.T, trap bool, prefix string) {
	ready := filepath.Join(t.TempDir(), "ready")
	script := prefix + `sh -c 'sleep 300 & sleep 300; wait' & sleep 300 & echo > ` + ready + `; wait`
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "SUPERVISE_TEST_PARENT="+script)
	if trap {
		c.Env = append(c.Env, "SUPERVISE_TEST_TRAP=1")
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Kill(); c.Wait() }()
	var pgid int
	if _, err := fmt.Fscanf(out, "pgid %d\n", &pgid); err != nil {
		t.Fatal("fake parent:", err)
	}
	waitFile(t, ready)
	// Wait for the inner sh to start its sleeps: shim, sh, sh, 3×sleep.
	var before []int
	for deadline := time.Now().Add(10 * time.Second); len(before) < 6 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		before = groupMembers(pgid)
	}
	if len(before) < 6 {
		t.Fatalf("group %d has %v", pgid, before)
	}
	if trap {
		// Threads have come and gone in the parent; nothing may have been killed by a stray Pdeathsig.
		time.Sleep(500 * time.Millisecond)
		if now := groupMembers(pgid); len(now) != len(before) {
			t.Fatalf("group shrank from %v to %v while the parent was alive", before, now)
		}
	}
	start := time.Now()
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	for time.Since(start) < 2*time.Second {
		left := 0
		for _, pid := range before {
			if alive(pid) {
				left++
			}
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(start)
	var survivors []int
	for _, pid := range before {
		if alive(pid) {
			survivors = append(survivors, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(survivors) > 0 || d > time.Second {
		t.Fatalf("after SIGKILL of once: survivors %v, took %v", survivors, d)
	}
	t.Logf("all %d group members gone %v after the parent's SIGKILL", len(before), d)
}

func TestParentSIGKILL(t *testing.T)           { testParentKill(t, false, "") }
func TestParentSIGKILLThreadTrap(t *testing.T) { testParentKill(t, true, "") }

// Everything in the group ignores SIGTERM: only the shim's SIGKILL ends it.
func TestParentSIGKILLIgnoringTERM(t *testing.T) { testParentKill(t, false, `trap "" TERM; `) }

// TestPdeathsigTrapIsReal is the control for TestParentSIGKILLThreadTrap: a child started with Pdeathsig
// from a locked goroutine that then exits is killed although this process lives on (golang/go#27505).
func TestPdeathsigTrapIsReal(t *testing.T) {
	c := exec.Command("sleep", "300")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ch := make(chan error)
	go func() {
		runtime.LockOSThread()
		ch <- c.Start()
	}()
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
		t.Logf("naive Pdeathsig child died: %v", c.ProcessState)
	case <-time.After(15 * time.Second): // a loaded machine; the death comes at once when it comes
		c.Process.Kill()
		t.Fatal("expected the child to be killed when its forking thread exited")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("123 (sleep) S 1 123 123 0 -1 4194560 98 0 0 0 0 0 0 0 20 0 1 0"))
	f.Add([]byte("7 (a) b) c) R 2 3"))
	f.Add([]byte("1 (x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ppid, pgrp, state, ok := parseStat(b)
		if !ok {
			return
		}
		// Round trip: a comm of arbitrary bytes before the fields never changes what is parsed.
		b2 := fmt.Appendf(nil, "9 (%s) %s %d %d 0", b, []byte{state}, ppid, pgrp)
		p2, g2, s2, ok2 := parseStat(b2)
		if !ok2 || p2 != ppid || g2 != pgrp || s2 != state {
			t.Fatalf("round trip %q: %d %d %c vs %d %d %c", b2, ppid, pgrp, state, p2, g2, s2)
		}
	})
}

func FuzzShimStatus(f *testing.F) {
	f.Add("ready\npid 12\nexit 768\n")
	f.Add("ready\nerr 2 foo\n")
	f.Add("ready\nerr 8 ./x y\nexit 9\nleft 3\n")
	f.Add("pid 12\nready\nleft -1\n")
	f.Add("exit 99999999999\n\x00")
	f.Add("ready\npid 12\nexit 0\ndone\n")
	f.Add("ready\npid 12\nexit 0\nleft 2\ndone\ndone\n")
	f.Add("ready\ndone\nexit 0\n")
	f.Fuzz(func(t *testing.T, in string) {
		s := newShimStatus()
		s.read(io.NopCloser(strings.NewReader(in)))
		<-s.eof
		select {
		case <-s.over:
			if s.exit == nil || s.left != 0 {
				t.Fatalf("over without an exit (%v) or with stragglers (%d)", s.exit, s.left)
			}
		default:
		}
		if r, ok := <-s.first; ok && r.kind != "ready" {
			t.Fatalf("first report %q", r.kind)
		}
		r, ok := <-s.started
		if ok && r.kind == "err" && !errors.Is(r.err, ErrNotFound) && !errors.Is(r.err, ErrNotExecutable) {
			t.Fatalf("err report %v", r.err)
		}
		if ok && r.kind != "err" && r.kind != "pid" {
			t.Fatalf("kind %q", r.kind)
		}
		if s.left < 0 {
			t.Fatalf("left %d", s.left)
		}
	})
}

// A go-ahead with an environment larger than the pipe, to a shim that is frozen after it reported
// ready: Start gives up after the handshake's time and kills the shim, instead of waiting forever.
func TestGoAheadToAFrozenShim(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	pr, err := Prepare(Config{Args: []string{"/bin/true"}, Shim: shim})
	if err != nil {
		t.Fatal(err)
	}
	// Short only for the go-ahead: a race-built shim's own start on a loaded machine took longer
	// than 500 ms (it was killed before it got ready: exit 137, seen in a fresh-clone run).
	handshakeTimeout = 500 * time.Millisecond
	if err := syscall.Kill(pr.p.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 60<<10)
	pr.SetEnv([]string{"A=" + big, "B=" + big, "C=" + big})
	start := time.Now()
	if _, err := pr.Start(); err == nil {
		t.Fatal("Start to a frozen shim succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Start gave up after %s", d)
	}
	select {
	case <-pr.p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the frozen shim was not killed")
	}
}

// A run is over when the shim says "done", not when the shim has exited: tearing down its address
// space can take milliseconds, and the run's outcome does not wait for it. The shim is reaped after.
// With output copied through a pipe the shim also holds, the run waits for its exit as before.
func TestOverBeforeTheShimExits(t *testing.T) {
	// The shim lingers 5 s after its last report; Wait, timed from the command's start (a start under
	// a loaded race-enabled run can take a second), must be over well before.
	const linger = 5 * time.Second
	env := append(os.Environ(), "SUPERVISE_TEST_SHIM_LINGER="+linger.String())
	p, err := Start(Config{Args: []string{"sh", "-c", "exit 3"}, Shim: shim, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := p.Wait()
	if err != nil || e.Code != 3 {
		t.Fatalf("exit %+v, %v; want 3", e, err)
	}
	if d := time.Since(start); d > linger-1500*time.Millisecond {
		t.Fatalf("Wait took %v: it waited for the shim's exit", d)
	}
	if !alive(p.Pid()) {
		t.Fatal("the shim is gone already: the test shows nothing")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, _, _, ok := procStat(p.Pid()); !ok {
			break // exited and reaped: not even a zombie
		}
		if time.Now().After(deadline) {
			t.Fatal("the shim was not reaped after its exit")
		}
	}

	var out bytes.Buffer
	start = time.Now()
	e = run(t, Config{Args: []string{"sh", "-c", "echo hi; exit 4"}, Shim: shim, Env: env, Stdout: &out})
	if d := time.Since(start); e.Code != 4 || out.String() != "hi\n" || d < linger {
		t.Fatalf("with piped output: exit %d, output %q after %v; want 4, \"hi\\n\", after the shim's exit", e.Code, out.String(), d)
	}
}

// readProc reads what os.ReadFile reads, a file of any length, and fails like it on a missing one.
func TestReadProc(t *testing.T) {
	for _, f := range []string{"/proc/self/environ", "/proc/self/cmdline", "/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"} {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readProc(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the %d of os.ReadFile", f, len(got), err, len(want))
		}
	}
	if _, err := readProc("/proc/self/no-such-file"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v; want not exist", err)
	}
}
