package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shimMarker starts the shim's own arguments: MARKER PARENT_PID PATH ARGV...
const shimMarker = "once-shim-v1"

// Timings of the shim's cleanup.
const (
	parentDeathGrace = 200 * time.Millisecond // SIGTERM → SIGKILL when once died; the group is dead well within 1s
	stragglerGrace   = time.Second            // SIGTERM → SIGKILL for what is left after the command exited
	parentPoll       = 250 * time.Millisecond // belt and braces next to the parent-death signal
)

// ShimMain is the shim's entry point: cmd/once calls os.Exit(ShimMain(os.Args[2:])) when os.Args[1] == ShimArg
// (any args slice that contains the shim's own arguments works). It starts the command as its child in its
// own process group, waits for it, kills the rest of the group, and returns or dies with the command's exact
// status. If its parent dies first, it kills the whole group, itself included. It is not meant to be run by hand.
func ShimMain(args []string) int {
	i := slices.Index(args, shimMarker)
	if i < 0 || len(args) < i+4 {
		fmt.Fprintf(os.Stderr, "once: %s is internal to once; do not run it by hand\n", ShimArg)
		return 64
	}
	ppid, err := strconv.Atoi(args[i+1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "once: %s: bad parent pid %q\n", ShimArg, args[i+1])
		return 64
	}
	path, argv := args[i+2], args[i+3:]
	self := os.Getpid()

	// fd 3 is the status pipe to once; the command must not inherit it, or once would wait for its EOF.
	syscall.CloseOnExec(3)
	status := os.NewFile(3, "once-status")
	report := func(format string, a ...any) { _, _ = fmt.Fprintf(status, format+"\n", a...) }

	// Orphaned descendants (double-forked daemons, setsid escapees whose parent exited) are reparented to
	// us rather than to init, so cleanup can find them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	// Signals sent to the group reach us too: catch them all so we keep waiting. Caught (not ignored)
	// signals are reset to default in the command by execve.
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE,
		syscall.SIGVTALRM, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGPWR)

	// The parent may have died before its prctl(PR_SET_PDEATHSIG) took effect. Go's fork re-checks the
	// parent pid after the prctl and signals itself; this covers the time since (the signal could have hit
	// before our handler existed, but then the default action killed us and nothing was started).
	if os.Getppid() != ppid {
		return 1
	}

	started := make(chan error, 1)
	exited := make(chan syscall.WaitStatus, 1)
	var pid int
	go func() {
		// Same Pdeathsig-per-thread rule as in Start: this thread must outlive the command.
		runtime.LockOSThread()
		var err error
		pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: []uintptr{0, 1, 2},
			Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		})
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
			// An orphan reparented to us: reaped, nothing to report.
		}
	}()
	if err := <-started; err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		report("err %d %s", int(errno), argv[0])
		if errno == syscall.ENOENT {
			return 127
		}
		return 126
	}
	report("pid %d", pid)

	tick := time.NewTicker(parentPoll)
	defer tick.Stop()
	for {
		select {
		case ws := <-exited:
			report("exit %d", uint32(ws))
			status.Close()
			cleanup(self, syscall.SIGTERM, stragglerGrace)
			return exitLike(ws)
		case <-sigs:
			// A signal to the group (the command got it too), or our parent-death signal.
		case <-tick.C:
		}
		if os.Getppid() != ppid {
			parentDied(self)
			return 137
		}
	}
}

// cleanup sends sig to every other member of our group and to our orphaned descendants, then SIGKILLs what
// is left after grace. It gives up after a few seconds of SIGKILL rounds (a fork bomb can outrun it).
func cleanup(self int, sig syscall.Signal, grace time.Duration) {
	reap()
	left := members(self)
	if len(left) == 0 {
		return
	}
	_ = syscall.Kill(-self, sig) // we catch sig ourselves
	for _, pid := range left {
		_ = syscall.Kill(pid, sig) // reaches the orphans that left the group
	}
	// Poll the known pids only (cheap); new ones are caught by the rescans below.
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && anyAlive(left); {
		time.Sleep(10 * time.Millisecond)
		reap()
	}
	for range 200 {
		left := members(self)
		if len(left) == 0 {
			return
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
		reap()
	}
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if _, _, state, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// parentDied kills everything: SIGTERM, a short pause, then SIGKILL to orphans outside the group and to the
// group, us included (nobody is left to report to).
func parentDied(self int) {
	left := members(self)
	_ = syscall.Kill(-self, syscall.SIGTERM)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(parentDeathGrace); time.Now().Before(deadline) && anyAlive(left); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range members(self) {
		if pgid, _ := syscall.Getpgid(pid); pgid != self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(-self, syscall.SIGKILL)
}

// reap collects exited orphans that were reparented to us.
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

// members lists live processes other than self that are in self's process group or are self's children.
func members(self int) []int {
	var out []int
	scanProcs(func(pid, ppid, pgrp int, state byte) {
		if pid != self && state != 'Z' && state != 'X' && (pgrp == self || ppid == self) {
			out = append(out, pid)
		}
	})
	return out
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
