package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shimMarker starts the shim's own arguments: MARKER PARENT_PID PATH ARGV... Its version changes
// with the protocol on fds 3 and 4; a shim given another version answers "proto" (newShim).
const (
	shimMarkerPrefix = "once-shim-v"
	shimMarker       = shimMarkerPrefix + "4"
)

// Timings of the shim's cleanup.
const (
	parentDeathGrace = 200 * time.Millisecond // SIGTERM → SIGKILL when once died; the run is dead well within 1s
	stragglerGrace   = time.Second            // SIGTERM → SIGKILL for what is left after the command exited
	parentPoll       = 250 * time.Millisecond // belt and braces next to the parent-death signal
)

// ShimMain is the shim's entry point: cmd/once calls os.Exit(ShimMain(os.Args[2:])) when os.Args[1] == ShimArg
// (any args slice that contains the shim's own arguments works). It reports "ready" on fd 3 and waits for
// once's go-ahead on fd 4 (EOF instead: it exits having run nothing), which may bring the command's
// environment (Prepared.SetEnv: a shim started before the run's variables were known). Then it starts the command as its
// child in its own process group, waits for it, kills every other process of the run, and returns or
// dies with the command's exact status. If its parent dies first, it kills the whole run, itself
// included. It is not meant to be run by hand.
func ShimMain(args []string) int {
	sh, code := newShim(args)
	if sh == nil {
		return code
	}
	// The parent may have died before its prctl(PR_SET_PDEATHSIG) took effect. Go's fork re-checks the
	// parent pid after the prctl and signals itself; this covers the time since (the signal could have hit
	// before our handler existed, but then the default action killed us and nothing was started).
	if os.Getppid() != sh.ppid {
		return 1
	}
	sh.report("ready")
	defer sh.tick.Stop()
	if ok, code := sh.waitGoAhead(); !ok {
		return code
	}
	exited, err := sh.start()
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		sh.report("err %d %s", int(errno), sh.argv[0])
		if errno == syscall.ENOENT {
			return 127
		}
		return 126
	}
	sh.report("pid %d", sh.pid)
	return sh.wait(exited)
}

// shimProc is the state of the shim process (ShimMain).
type shimProc struct {
	ppid, self, pid int
	path            string
	argv            []string
	status, control *os.File
	ctl             *bufio.Reader // control, read by waitGoAhead then readFences
	env             []string      // the command's environment from the go-ahead; nil: the shim's own
	sigs            chan os.Signal
	tick            *time.Ticker
	fences          chan time.Duration // the fence's instants once sends (CLOCK_BOOTTIME), fence_linux.go
}

// newShim reads the shim's arguments and sets the process up: pipes, subreaper, signals. With a nil
// shim, the shim exits with the code returned.
func newShim(args []string) (*shimProc, int) {
	i := slices.Index(args, shimMarker)
	if i < 0 && len(args) > 0 && strings.HasPrefix(args[0], shimMarkerPrefix) && isPipe(3) {
		// A once whose protocol differs started this shim (a dedicated once-shim left from
		// another release): say so on the status pipe, and once re-executes itself instead.
		_, _ = fmt.Fprintf(os.NewFile(3, "once-status"), "proto %s\n", shimMarker)
		return nil, 64
	}
	if i < 0 || len(args) < i+4 {
		fmt.Fprintf(os.Stderr, "once: %s is internal to once; do not run it by hand\n", shimCalled())
		return nil, 64
	}
	ppid, err := strconv.Atoi(args[i+1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "once: %s: bad parent pid %q\n", ShimArg, args[i+1])
		return nil, 64
	}
	sh := &shimProc{ppid: ppid, self: os.Getpid(), path: args[i+2], argv: args[i+3:]}

	// fd 3 is the status pipe to once and fd 4 the control pipe from it; the command must inherit
	// neither, or once would wait for the status pipe's EOF.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	sh.status = os.NewFile(3, "once-status")
	sh.control = os.NewFile(4, "once-control")
	sh.ctl = bufio.NewReader(sh.control)

	// Orphaned descendants (double-forked daemons, setsid escapees whose parent exited) are re-parented
	// to us rather than to init, so cleanup can find them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	// Signals sent to the group reach us too: catch them all so we keep waiting. Caught (not ignored)
	// signals are reset to default in the command by execve.
	sh.sigs = make(chan os.Signal, 32)
	signal.Notify(sh.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE,
		syscall.SIGVTALRM, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGPWR)
	sh.tick = time.NewTicker(parentPoll)
	return sh, 0
}

// isPipe reports whether fd is a pipe (the status pipe once passes as fd 3).
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// shimCalled names the shim for its messages: ShimArg when once runs it, else its own file name.
func shimCalled() string {
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		return ShimArg
	}
	return filepath.Base(os.Args[0])
}

func (sh *shimProc) report(format string, a ...any) { _, _ = fmt.Fprintf(sh.status, format+"\n", a...) }

// over tells once that the run is over — the command's status and the cleanup's are reported, and
// no process of the run is left — and closes the status pipe. What remains is the shim's own exit,
// which once need not wait for: tearing down a process's address space takes milliseconds on some
// virtual machines. A once that does not know "done" waits for the exit, as before.
func (sh *shimProc) over() {
	sh.report("done")
	sh.status.Close()
}

// waitGoAhead waits for once's go-ahead (once records the attempt in between): "g", after "e LEN\n"
// and LEN bytes of NUL-separated variables when once sends the command's environment. Without it,
// the shim exits with the code returned: 0 when cancelled (nothing was run), 1 when once died.
func (sh *shimProc) waitGoAhead() (bool, int) {
	goAhead := make(chan bool, 1)
	go func() { goAhead <- sh.readGoAhead() }()
	for waiting := true; waiting; {
		select {
		case ok := <-goAhead:
			if !ok {
				return false, 0
			}
			waiting = false
		case <-sh.sigs:
		case <-sh.tick.C:
		}
		if os.Getppid() != sh.ppid {
			return false, 1
		}
	}
	sh.fences = make(chan time.Duration, 1)
	go readFences(sh.ctl, sh.fences)
	return true, 0
}

// maxEnv bounds the environment a go-ahead may bring (Linux's own bound on argv and envp together
// is a quarter of the stack limit, 2 MiB by default).
const maxEnv = 8 << 20

// readGoAhead reads the go-ahead, and the environment before it when there is one.
func (sh *shimProc) readGoAhead() bool {
	b, err := sh.ctl.ReadByte()
	if err == nil && b == 'e' {
		var line string
		if line, err = sh.ctl.ReadString('\n'); err != nil {
			return false
		}
		n, aerr := strconv.Atoi(strings.TrimSpace(line))
		if aerr != nil || n < 0 || n > maxEnv {
			return false
		}
		block := make([]byte, n)
		if _, err := io.ReadFull(sh.ctl, block); err != nil {
			return false
		}
		sh.env = []string{}
		if n > 0 {
			sh.env = strings.Split(string(block), "\x00")
		}
		b, err = sh.ctl.ReadByte()
	}
	return err == nil && b == 'g'
}

// readFences passes on each fence once sends ("f NANOS" lines), the latest only, until the pipe
// closes.
func readFences(r io.Reader, out chan time.Duration) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "f ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n <= 0 {
			continue
		}
		select {
		case <-out: // drop a fence not yet taken: the new one replaces it
		default:
		}
		out <- time.Duration(n)
	}
}

// start starts the command as the shim's child, and returns the channel that gets its wait status.
// The goroutine that started it reaps every child of the shim (orphans re-parented to it included)
// until the command exits.
func (sh *shimProc) start() (<-chan syscall.WaitStatus, error) {
	started := make(chan error, 1)
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		// Same Pdeathsig-per-thread rule as in Start: this thread must outlive the command.
		runtime.LockOSThread()
		env := sh.env
		if env == nil {
			env = os.Environ()
		}
		pid, err := syscall.ForkExec(sh.path, sh.argv, &syscall.ProcAttr{
			Env:   env,
			Files: []uintptr{0, 1, 2},
			Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		})
		sh.pid = pid
		started <- err
		if err != nil {
			return
		}
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: cannot happen while the command is unreaped
				exited <- syscall.WaitStatus(0x7f00) // exit 127
				return
			}
			if wpid == pid {
				exited <- ws
				return
			}
			// An orphan re-parented to us: reaped, nothing to report.
		}
	}()
	return exited, <-started
}

// wait waits for the command to exit, cleans up the rest of the run and returns the command's status
// as the shim's; if once dies first, it kills the whole run, the shim included.
func (sh *shimProc) wait(exited <-chan syscall.WaitStatus) int {
	var fence time.Duration // CLOCK_BOOTTIME; 0: none yet
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case f := <-sh.fences:
			fence = f
			timer.Reset(max(f-bootNow(), 0))
		case <-timer.C:
		case ws := <-exited:
			sh.report("exit %d", uint32(ws))
			if left := cleanup(sh.self, syscall.SIGTERM, stragglerGrace); left > 0 {
				sh.report("left %d", left)
			}
			sh.over()
			return exitLike(ws)
		case <-sh.sigs:
			// A signal to the group (the command got it too), or our parent-death signal.
		case <-sh.tick.C:
		}
		if os.Getppid() != sh.ppid {
			parentDied(sh.self)
			return 137
		}
		if fence > 0 && bootNow() >= fence {
			// once did not move the fence in time: it is frozen or starved, and its lease may be
			// another holder's now. Kill the whole run at once, and say so.
			sh.report("fenced")
			left := cleanup(sh.self, syscall.SIGKILL, 0)
			ws := syscall.WaitStatus(syscall.SIGKILL)
			sh.report("exit %d", uint32(ws))
			if left > 0 { // once then waits for this shim's exit and kills what it inherits
				sh.report("left %d", left)
			}
			sh.over()
			return exitLike(ws)
		}
	}
}

// cleanup sends sig to every other process of the run — our descendants, which include the orphans we
// adopted — then SIGKILLs what is left after grace, walking the tree again until none is alive. It
// returns how many were still alive when it gave up (a fork bomb can outrun it for killTimeout).
func cleanup(self int, sig syscall.Signal, grace time.Duration) int {
	reap()
	left := descendants(self)
	if len(left) == 0 {
		return 0
	}
	for _, p := range left {
		p.signal(sig, self)
	}
	// Poll the known pids only (cheap); new ones are caught by killTree's walks.
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && anyAlive(left); {
		time.Sleep(10 * time.Millisecond)
		reap()
	}
	return killTree(self, time.Now().Add(killTimeout), reap)
}

// parentDied kills everything: SIGTERM, a short pause, then SIGKILL to every descendant until none is
// left. Nobody is left to report to.
func parentDied(self int) {
	cleanup(self, syscall.SIGTERM, parentDeathGrace)
}

// reap collects exited orphans that were re-parented to us.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// exitLike ends the shim the way the command ended, so the parent sees the same wait status.
func exitLike(ws syscall.WaitStatus) int {
	if ws.Exited() {
		return ws.ExitStatus()
	}
	if !ws.Signaled() {
		return 128 + int(syscall.SIGKILL)
	}
	sig := ws.Signal()
	// Go's runtime handles some signals itself (SIGQUIT would dump goroutines, SIGSEGV is a panic), so
	// restore the kernel default with a raw sigaction and raise the signal on this thread.
	runtime.LockOSThread()
	signal.Reset(sig)
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}) // the shim's core would be noise
	var dfl [4]uint64                                    // struct sigaction{SIG_DFL, no flags, empty mask}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond)
	return 128 + int(sig) // the signal's default action does not terminate
}
