package job

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/once-run/once/supervise"
)

// Signals the Runner handles. Before the command starts, each of them cancels the call (nothing
// runs). After, the stop signals are forwarded to every process of the run, which is killed after
// Grace, and cancel the call before a sequence's next attempt begins (prepare); the others are only
// forwarded. SIGPIPE is caught so that a closed stderr cannot kill the
// process before it records the outcome.
var (
	stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
	passSignals = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}
)

// HandleSignals takes this process's signals for the run (a command line's, not a scheduler's of
// many): before the command starts they cancel the returned context (see Signal); after, they go
// to the command's run. The returned stop undoes it.
func (r *Runner) HandleSignals(ctx context.Context) (context.Context, func()) {
	sigs := make(chan os.Signal, 4)
	// A signal ignored when this process started stays ignored: SIGHUP under nohup (an ssh
	// session that ends must not stop the run), SIGINT for a script's background job. Notify
	// would install a handler for it (os/signal), and a hangup stopped the run (129).
	take := []os.Signal{syscall.SIGPIPE}
	for _, s := range append(append([]os.Signal{}, stopSignals...), passSignals...) {
		if !signal.Ignored(s) {
			take = append(take, s)
		}
	}
	signal.Notify(sigs, take...)
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for s := range sigs {
			sig := s.(syscall.Signal)
			if sig == syscall.SIGPIPE {
				continue
			}
			if p := r.proc.Load(); p != nil && slices.Contains(passSignals, s) {
				_ = p.Signal(sig)
				continue
			}
			// A stop signal (or any, before a command runs): recorded for prepare before the
			// command is looked at, so that a command ending now (whose Stop would go nowhere)
			// cannot let the next one start.
			r.gotSig.Store(sig)
			r.sigCancel.Store(&cancelBox{cancel, sig})
			if p := r.proc.Load(); p != nil {
				p.Stop(sig, r.j.Grace)
				continue
			}
			cancel(fmt.Errorf("interrupted by %v", sig))
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(sigs); cancel(nil) }
}

// Stop stops the call as the stop signal sig would, for a program that decides itself when a run
// must end (a scheduler's timeout, drain or replace): a running command gets sig and is killed
// after Grace; a command not started yet is stopped as it starts. It reports whether a command
// was running. The call still records the outcome (the exit status 128+N of a command that
// honoured sig), so the slot follows the usual rules.
func (r *Runner) Stop(sig syscall.Signal) bool {
	r.gotSig.Store(sig)
	if p := r.proc.Load(); p != nil {
		p.Stop(sig, r.j.Grace)
		return true
	}
	return false
}

// Signal is the stop signal HandleSignals received, or 0: when the call's context was cancelled
// by it, the command had not started.
func (r *Runner) Signal() syscall.Signal {
	if v := r.gotSig.Load(); v != nil {
		return v.(syscall.Signal)
	}
	return 0
}

// Adopt makes this process the subreaper of the runs it supervises, so that nothing a command
// starts can escape to init even if the command kills its own shim. log says when it cannot.
func Adopt(log *slog.Logger) {
	if err := supervise.BecomeSubreaper(); err != nil {
		log.Debug("cannot become a child subreaper; a command that kills its own shim may leave orphans", "err", err)
	}
}

// cancelBox is HandleSignals' cancel with the stop signal that came while a command ran: the
// call's next attempt is not begun (prepare cancels the call with it).
type cancelBox struct {
	cancel context.CancelCauseFunc
	sig    syscall.Signal
}
