package supervise

import (
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The shim adopts the orphans of its run and kills them before it exits. If the shim itself dies first
// (the command killed it: kill -9 0, kill -9 $PPID; the OOM killer), its orphans go to the nearest
// subreaper above it, or to init. A process that called BecomeSubreaper is that subreaper: each
// Process then sweeps this process's adopted children when its shim exits.

var reaper struct {
	on    atomic.Bool
	mu    sync.Mutex       // held while a child is started and registered, and while sweeping
	known map[int]struct{} // children started here (shims and commands), which are not orphans
}

// BecomeSubreaper makes the calling process a child subreaper (Linux 3.4+): orphans of every run it
// supervises are re-parented to it instead of to init, and every Process kills and reaps them when its
// shim exits, before Wait returns. Only call it in a process whose children are all started through
// this package (the once command): any other child of the process that is not a live Process's would
// be taken for an orphan of a run and killed.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	reaper.on.Store(true)
	return nil
}

// startAdoptable starts c and registers it as a known child, so that a sweep never takes it for an orphan.
func startAdoptable(c *exec.Cmd) error {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if err := c.Start(); err != nil {
		return err
	}
	if reaper.known == nil {
		reaper.known = map[int]struct{}{}
	}
	reaper.known[c.Process.Pid] = struct{}{}
	return nil
}

// forget unregisters a known child once it has been reaped.
func forget(pid int) {
	reaper.mu.Lock()
	delete(reaper.known, pid)
	reaper.mu.Unlock()
}

// sweepAdopted kills and reaps the orphans adopted by this process (when it is a subreaper) with their
// descendants, and returns how many were still alive when it gave up.
func sweepAdopted() int {
	if !reaper.on.Load() {
		return 0
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	self := os.Getpid()
	deadline := time.Now().Add(killTimeout)
	for {
		var adopted []int
		for _, pid := range childPids(self) {
			if _, ok := reaper.known[pid]; !ok {
				adopted = append(adopted, pid)
			}
		}
		if len(adopted) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			return len(adopted)
		}
		for _, pid := range adopted {
			_ = syscall.Kill(pid, syscall.SIGSTOP) // an orphan of ours: its pid cannot be reused before we reap it
			killTree(pid, deadline, nil)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range adopted {
			for time.Now().Before(deadline) {
				var ws syscall.WaitStatus
				n, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				if n == pid || err != nil && err != syscall.EINTR {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
