package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/supervise"
)

// prepare starts the shim of the attempt's command and waits with it ready, before the guard records
// the attempt: a command that cannot start (not found, a missing interpreter, no /proc) costs none.
// A shim started early (startEarly) is used instead, given the attempt's environment.
func (r *Runner) prepare(ctx context.Context, run *once.Run) error {
	r.cancelPending()
	if b := r.sigCancel.Load(); b != nil { // stopped while an earlier slot's command ran
		b.cancel(fmt.Errorf("interrupted by %v", b.sig))
	}
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	env := append(traceEnv(ctx, Environ()), run.Env()...)
	if r.j.Env != nil {
		env = append(env, r.j.Env()...)
	}
	if e := r.early; e != nil {
		r.early = nil
		if got := <-e; got.err == nil {
			got.pr.SetEnv(env)
			r.pending = got.pr
			return nil
		} // else prepared again below: the error, if it stays, is the run's
	}
	pr, err := supervise.Prepare(r.config(env))
	if err != nil {
		return err
	}
	r.pending = pr
	return nil
}

func (r *Runner) config(env []string) supervise.Config {
	return supervise.Config{Args: append([]string{r.path}, r.j.Args[1:]...), Env: env, Dir: r.j.Dir, Stdout: r.j.Stdout,
		Stderr: r.j.Stderr, Shim: r.j.Shim}
}

// early is a shim started before the attempt was known (startEarly).
type early struct {
	pr  *supervise.Prepared
	err error
}

// startEarly starts the command's shim as the guard starts its store work (once.Options.Locked),
// so that the two overlap: the shim's start is a second start of this binary, as long as the store
// work on a fast disk. prepare takes it with the attempt's environment; endEarly ends it when the
// guard ran nothing.
func (r *Runner) startEarly() {
	ch := make(chan early, 1)
	r.early = ch
	cfg := r.config(Environ())
	go func() {
		pr, err := supervise.Prepare(cfg)
		ch <- early{pr, err}
	}()
}

// endEarly ends a shim started early that the guard did not take (busy, skipped, an error).
func (r *Runner) endEarly() {
	if e := r.early; e != nil {
		r.early = nil
		if got := <-e; got.err == nil {
			got.pr.Cancel()
		}
	}
}

// cancelPending ends a prepared command that the guard did not run (the lease was lost before the
// attempt was recorded).
func (r *Runner) cancelPending() {
	if r.pending != nil {
		r.pending.Cancel()
		r.pending = nil
	}
}

// work runs the command as the attempt run, supervised, and pings as it starts and ends. A
// non-zero exit is an ExitError.
func (r *Runner) work(ctx context.Context, run *once.Run) error {
	if r.j.Before != nil {
		r.j.Before(run)
	}
	ping := r.j.Ping
	r.out.Ping(ping, notify.PingStart, run.RunID)
	code, err := r.supervise(run)
	switch {
	case err != nil:
		r.out.Ping(ping, notify.PingFail, run.RunID)
		return err
	case code != 0:
		r.out.Ping(ping, strconv.Itoa(code), run.RunID)
		return ExitError{code}
	}
	r.out.Ping(ping, notify.PingSuccess, run.RunID)
	return nil
}

// supervise starts the prepared command and waits for its whole run to end: a stop signal that
// came while it started is passed on, and a lost lease stops it by the run's StopBy.
func (r *Runner) supervise(run *once.Run) (int, error) {
	pr := r.pending
	r.pending = nil
	if pr == nil {
		return 0, errors.New("the command was not prepared")
	}
	p, err := pr.StartFenced(run.StopBy())
	if err != nil {
		return r.startFailed(err)
	}
	r.proc.Store(p)
	defer r.proc.Store(nil)
	if v := r.gotSig.Load(); v != nil { // a signal that arrived while starting
		p.Stop(v.(syscall.Signal), r.j.Grace)
	}
	stopFence := fence(p, run)
	defer stopFence()
	select {
	case <-p.Done():
	case <-run.Lost():
		grace := min(r.j.Grace, max(time.Until(run.StopBy()), 0))
		r.log.Error("lease lost: stopping the command", "task", run.Task, "run_id", run.RunID,
			"token", run.Token, "grace", grace.String(), "err", run.LostErr())
		r.out.Event(r.j.Notify, notify.Event{Event: notify.LeaseLost, Task: run.Task, Slot: run.Slot, RunID: run.RunID,
			Attempt: run.Attempt, Holder: run.Holder, Token: run.Token, Reason: errString(run.LostErr())})
		p.Stop(syscall.SIGTERM, grace)
	}
	ex, err := p.Wait()
	if err != nil {
		return 0, err
	}
	if p.Fenced() {
		r.log.Error("the supervision shim killed the command at the lease's stop-by instant: once itself was not running (frozen or starved) to renew the lease or stop it",
			"task", run.Task, "run_id", run.RunID, "token", run.Token)
	}
	return ex.Code, nil
}

// fence keeps the shim's fence (supervise.Process.Fence) at the run's stop-by instant, moving it
// after each renewal: if this process stops running — frozen, starved — the shim kills the command
// by the time another holder could be granted the lease. It returns what stops it.
func fence(p *supervise.Process, run *once.Run) func() {
	every := min(max(run.TTL()/12, 20*time.Millisecond), time.Second)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		var last time.Time
		for {
			if by := run.StopBy(); !by.Equal(last) && p.Fence(by) == nil {
				last = by
			}
			select {
			case <-done:
				return
			case <-p.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// startFailed: the command was checked before the attempt was recorded; it can still fail to
// start if its file changed in between. Recorded as a shell would report it: 127, 126.
func (r *Runner) startFailed(err error) (int, error) {
	if r.j.StartFailed != nil {
		r.j.StartFailed(err)
	} else {
		r.log.Error("the command could not start", "err", err)
	}
	if code, ok := StartExit(err); ok {
		return code, nil
	}
	return 0, err
}

// Exit codes a shell gives a command it cannot run, recorded for a command that could not start.
const (
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// StartExit is the exit code a shell gives a command that supervise could not start: 127 when it
// was not found, 126 when it cannot be executed; ok is false for any other failure.
func StartExit(err error) (code int, ok bool) {
	switch {
	case errors.Is(err, supervise.ErrNotFound):
		return ExitNotFound, true
	case errors.Is(err, supervise.ErrNotExecutable):
		return ExitNotExecutable, true
	}
	return 0, false
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
