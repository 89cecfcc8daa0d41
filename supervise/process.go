//go:build unix

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a started command. Its methods are safe for concurrent use.
type Process struct {
	pid  int
	shim bool // pid is the shim's, which leads the group and is the command's parent
	done chan struct{}

	mu      sync.Mutex
	exited  bool // the group leader has exited: once it is reaped its pid, and so the pgid, may be reused
	killing bool
	// inFlight counts signals being sent by pid or through a walk from it: the leader is not reaped
	// until they are done, so no signal can reach a process that reused its pid.
	inFlight sync.WaitGroup
	killAt   time.Time
	timer    *time.Timer
	leftover int // processes a kill could not end

	// control is the shim's control pipe after the go-ahead: Fence writes to it (fence_linux.go);
	// nil without a shim, and once the run is over.
	control *os.File
	fenced  bool // the shim killed the run at its fence (it reported "fenced")

	// Set before done is closed.
	exit Exit
	err  error
}

// Pid returns the process group leader's pid, which is also the group id: the shim's, or the command's
// when there is no shim.
func (p *Process) Pid() int { return p.pid }

// enter registers a signal in flight; false once the leader has exited.
func (p *Process) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return false
	}
	p.inFlight.Add(1)
	return true
}

// leaderExited is called by the waiter when the leader has exited and before it is reaped.
func (p *Process) leaderExited() {
	p.mu.Lock()
	p.exited = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.inFlight.Wait()
}

// Signal sends sig to every process of the run: with a shim, to the shim's process group and to
// every descendant of the shim outside it (the daemons the command left behind that were
// re-parented to the shim); without one, to the command's process group. It returns
// os.ErrProcessDone once the group leader has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.enter() {
		return os.ErrProcessDone
	}
	defer p.inFlight.Done()
	return p.signal(sig)
}

// Stop sends sig (usually SIGTERM) to the run now, and kills the whole run after grace unless the group
// leader has exited by then. It returns at once; Wait reports the outcome. A later Stop with an earlier
// deadline moves the kill earlier; a later deadline does not postpone it. grace <= 0 kills at once.
//
// The kill leaves nothing behind: with a shim, the shim is frozen (SIGSTOP) so that it can neither exit
// nor hand its adopted orphans to init, every descendant is SIGKILLed until a walk of the tree finds none
// alive, and only then the shim's group is killed. Wait returns after that.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	if sig != 0 && sig != syscall.SIGKILL {
		_ = p.Signal(sig)
	}
	if grace <= 0 || sig == syscall.SIGKILL {
		go p.kill()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	at := time.Now().Add(grace)
	if p.timer != nil {
		if !at.Before(p.killAt) {
			return
		}
		p.timer.Stop()
	}
	p.killAt = at
	p.timer = time.AfterFunc(grace, p.kill)
}

// kill kills the whole run (once; later calls return at once).
func (p *Process) kill() {
	p.mu.Lock()
	if p.exited || p.killing {
		p.mu.Unlock()
		return
	}
	p.killing = true
	p.inFlight.Add(1)
	p.mu.Unlock()
	defer p.inFlight.Done()
	p.killAll()
}

// Done returns a channel closed when the command has exited and, with a shim, the rest of its run has
// been cleaned up.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until Done and returns how the command ended. It may be called many times. The error is
// non-nil only if the outcome could not be determined, or processes of the run could not be killed; a
// non-zero exit is not an error.
func (p *Process) Wait() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

// waited is how the command c ended, from its Wait error werr: the exit (killed by SIGKILL when the
// status is unknown) and an error only if waiting itself failed (not for a non-zero exit).
func waited(c *exec.Cmd, werr error) (Exit, error) {
	var ws syscall.WaitStatus
	if c.ProcessState != nil {
		ws, _ = c.ProcessState.Sys().(syscall.WaitStatus)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return exitFromStatus(ws), fmt.Errorf("supervise: wait: %w", werr)
	}
	return exitFromStatus(ws), nil
}
