package supervise

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The fence: the shim's dead man's switch. once's own stop path (a lost lease → SIGTERM, then
// SIGKILL by the lease's stop-by instant) needs once to run. A once process that is frozen
// (SIGSTOP, a debugger, a stalled page fault) or starved cannot take it, while its command runs on
// and its lease expires in the store, and another holder starts the same task: two at once, the
// incident once exists to prevent. So once tells the shim, after every renewal, the instant by
// which the run must be dead if it hears nothing more (Fence); the shim kills the whole run when
// that instant passes without a later one, whatever once is doing.
//
// Instants cross the pipe as CLOCK_BOOTTIME nanoseconds: one clock for both processes, and it
// counts a suspended machine's sleep (during which the store's clock went on and the lease
// expired), which the monotonic clock does not.

// bootNow is CLOCK_BOOTTIME now.
func bootNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

// fenceWriteTimeout bounds a write to the control pipe: a frozen shim must not freeze once.
const fenceWriteTimeout = 100 * time.Millisecond

// Fence tells the shim to kill the whole run (SIGKILL, every descendant) at until, unless a later
// Fence moves the instant; each call replaces the last. Without a shim, and once the run is over,
// it does nothing. An error means the shim could not be told (its fence stays where it was).
func (p *Process) Fence(until time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.control == nil {
		return nil
	}
	_ = p.control.SetWriteDeadline(time.Now().Add(fenceWriteTimeout))
	if _, err := p.control.Write(fenceLine(until)); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			return nil // the shim is gone, so the run is over (its Done closes soon): nothing to fence
		}
		return fmt.Errorf("supervise: fence: %w", err)
	}
	return nil
}

// fenceLine is the control pipe's message that sets the fence at until.
func fenceLine(until time.Time) []byte {
	return fmt.Appendf(nil, "f %d\n", int64(bootNow()+time.Until(until)))
}

// Fenced reports whether the shim killed the run at its fence (known once Done is closed).
func (p *Process) Fenced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced
}

func (p *Process) closeControl() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.control != nil {
		p.control.Close()
		p.control = nil
	}
}
