//go:build unix

package supervise

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Process is a started command. Its methods are safe for concurrent use.
type Process struct {
	pid  int
	done chan struct{}

	mu     sync.Mutex
	exited bool // the group leader has exited: its pid, and so the pgid, may be reused
	killAt time.Time
	timer  *time.Timer

	// Set before done is closed.
	exit Exit
	err  error
}

// Pid returns the process group leader's pid, which is also the group id: the shim's, or the command's
// when there is no shim.
func (p *Process) Pid() int { return p.pid }

// Signal sends sig to the whole process group. It returns os.ErrProcessDone once the group leader has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signalLocked(sig)
}

func (p *Process) signalLocked(sig syscall.Signal) error {
	if p.exited {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("supervise: signal %v to group %d: %w", sig, p.pid, err)
	}
	return nil
}

// Stop sends sig (usually SIGTERM) to the group now, and SIGKILL to the group after grace unless the group
// leader has exited by then. It returns at once; Wait reports the outcome. A later Stop with an earlier
// deadline moves the SIGKILL earlier; a later deadline does not postpone it. grace <= 0 kills at once.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	if sig != 0 {
		_ = p.signalLocked(sig)
	}
	if grace <= 0 || sig == syscall.SIGKILL {
		_ = p.signalLocked(syscall.SIGKILL)
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
	p.timer = time.AfterFunc(grace, func() { _ = p.Signal(syscall.SIGKILL) })
}

// Done returns a channel closed when the command has exited and, with a shim, the rest of its group has
// been cleaned up.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until Done and returns how the command ended. It may be called many times. The error is
// non-nil only if the outcome could not be determined; a non-zero exit is not an error.
func (p *Process) Wait() (Exit, error) {
	<-p.done
	return p.exit, p.err
}
