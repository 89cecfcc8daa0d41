// Package job runs a command as the guarded work of package once: the checks that come before the
// store is touched, the command's environment, its supervised process tree and the signals sent to
// it, and the notifications and pings of its results. The once command's run, backfill and drill
// use it; so can any program that launches commands under the guard (a scheduler).
//
// A program that uses it must run the supervision shim when started as one, first thing in main:
//
//	if len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
//		os.Exit(supervise.ShimMain(os.Args[2:]))
//	}
package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/supervise"
)

// Job is a command and how to run it under the guard.
type Job struct {
	// Args is the command and its arguments (required). Args[0] is looked up in PATH.
	Args []string
	// Dir is the command's working directory; "" is this process's.
	Dir string
	// Stdout and Stderr receive the command's output; nil inherits this process's.
	Stdout, Stderr io.Writer
	// Env, when set, returns variables added to every attempt's environment, after the process's
	// own (without once's variables, see Environ) and the run's (once.Run.Env): the once command
	// adds ONCE_STORE there.
	Env func() []string
	// Shim is the argv prefix that runs the supervision shim; default {"/proc/self/exe",
	// supervise.ShimArg}: this program re-executed (see the package comment). cmd/once passes
	// supervise.DefaultShim(), which prefers an installed once-shim.
	Shim []string
	// Grace is how long the command has after a stop signal or a lost lease (SIGTERM) before the
	// whole run is killed; a lost lease shortens it to the run's StopBy. 0 kills at once.
	Grace time.Duration
	// Notify is the URL that receives a JSON event (package notify) when an attempt fails, ends
	// unknown, needs review or loses its lease; Ping is a Healthchecks-style URL pinged as each
	// attempt starts and ends. Empty: none. They must pass notify.CheckURL.
	Notify, Ping string
	// NotifyTimeout bounds how long Close waits for notifications still pending.
	NotifyTimeout time.Duration
	// Logger receives the lease-lost and notification lines; nil discards them.
	Logger *slog.Logger
	// Resolve, when set, returns the commands a person runs to decide a slot that needs review,
	// for the notifications that announce one.
	Resolve func(slot string) *notify.Resolve
	// Before, when set, is called as each attempt's command is about to start (progress).
	Before func(run *once.Run)
	// StartFailed, when set, is told why a command that was prepared could not start after all (its
	// file changed since it was checked): the attempt is recorded with the exit code a shell would
	// give (127, 126). Nil logs it.
	StartFailed func(err error)
}

// Runner runs a Job as the work of one guarded call at a time: Do, CatchUp or SequenceStream,
// then Close.
type Runner struct {
	j    Job
	path string
	log  *slog.Logger
	out  *notify.Sender

	proc      atomic.Pointer[supervise.Process]
	gotSig    atomic.Value              // syscall.Signal: the stop signal received, if any
	sigCancel atomic.Pointer[cancelBox] // a stop signal that came while a command ran (HandleSignals)
	pending   *supervise.Prepared       // the next attempt's command, ready to start (guard goroutine only)
	early     chan early                // a shim started before the attempt was known (startEarly), nil when none
}

// New checks the job before anything touches a store: a command that cannot be found or run
// returns its error (wrapping supervise.ErrNotFound, supervise.ErrNotExecutable or an
// *exec.Error), and nothing runs. The guard checks again, with the shim started, before it
// records an attempt (once.Options.Prepare).
func New(j Job) (*Runner, error) {
	if len(j.Args) == 0 {
		return nil, fmt.Errorf("%w: no command", once.ErrInvalid)
	}
	if j.Args[0] == "" { // exec.LookPath's error would name nothing: "command not found: "
		return nil, supervise.Check(supervise.Config{Args: j.Args})
	}
	path, err := exec.LookPath(j.Args[0])
	if err == nil {
		err = supervise.Check(supervise.Config{Args: append([]string{path}, j.Args[1:]...)})
	}
	if err != nil {
		return nil, err
	}
	if j.Dir != "" { // else the shim's start fails naming the shim: "fork/exec /proc/self/exe: no such file or directory"
		if fi, err := os.Stat(j.Dir); err != nil {
			return nil, fmt.Errorf("working directory %s: %w", j.Dir, errors.Unwrap(err))
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s is not a directory", j.Dir)
		}
	}
	if j.Shim == nil {
		j.Shim = []string{"/proc/self/exe", supervise.ShimArg}
	}
	log := j.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{j: j, path: path, log: log, out: notify.New(notify.Options{Logger: log})}, nil
}

// Do is once.Do with the command as its work, then the result's notifications. Without a slot the
// run will most likely run its command (only a held lease stops it), so the command's shim starts
// as the guard starts its store work, and the two overlap; with a slot, which a run most often
// finds done already, the shim starts only once the ledger says to run.
func (r *Runner) Do(ctx context.Context, o once.Options) (once.Result, error) {
	ro := r.options(o)
	if o.Slot == "" && len(r.j.Shim) > 0 {
		caller := o.Locked
		ro.Locked = func() {
			if caller != nil {
				caller()
			}
			r.startEarly()
		}
	}
	res, err := once.Do(ctx, ro, r.work)
	r.endEarly()
	r.notifyResult(o, res)
	return res, err
}

// CatchUp is once.CatchUp with the command as its work, then the results' notifications.
func (r *Runner) CatchUp(ctx context.Context, o once.Options, spec slot.Spec, window time.Duration, max int) ([]once.Result, error) {
	rs, err := once.CatchUp(ctx, r.options(o), spec, window, max, r.work)
	for _, res := range rs {
		r.notifyResult(o, res)
	}
	return rs, err
}

// SequenceStream is once.SequenceStream with the command as its work; each result's
// notifications are sent before so.OnResult sees it.
func (r *Runner) SequenceStream(ctx context.Context, o once.Options, slots iter.Seq[string], busySlot string, so once.SeqOptions) error {
	onResult := so.OnResult
	so.OnResult = func(res once.Result) {
		r.notifyResult(o, res)
		if onResult != nil {
			onResult(res)
		}
	}
	return once.SequenceStream(ctx, r.options(o), slots, busySlot, so, r.work)
}

// options is o with the command prepared before each attempt is recorded, after the caller's
// own Prepare, if it has one, agreed (an error from it prepares nothing).
func (r *Runner) options(o once.Options) once.Options {
	first := o.Prepare
	o.Prepare = r.prepare
	if first != nil {
		o.Prepare = func(ctx context.Context, run *once.Run) error {
			if err := first(ctx, run); err != nil {
				return err
			}
			return r.prepare(ctx, run)
		}
	}
	return o
}

// Close ends a command prepared for an attempt the guard did not record (the lease was lost
// first), and waits, at most NotifyTimeout, for notifications still pending.
func (r *Runner) Close() {
	r.Release()
	r.WaitNotifications()
}

// Release is Close without the wait: the notifications still pending go on in the background
// until WaitNotifications, which a caller that must not be held up by a slow endpoint (the
// daemon, whose next slot waits for the launch) calls in a goroutine of its own.
func (r *Runner) Release() { r.cancelPending() }

// WaitNotifications waits, at most NotifyTimeout, for notifications still pending.
func (r *Runner) WaitNotifications() {
	if n := r.out.Wait(r.j.NotifyTimeout); n > 0 {
		r.log.Warn("gave up on notifications still pending", "pending", n, "after", r.j.NotifyTimeout.String())
	}
}

// ExitError is a command's non-zero exit status (128+N when killed by signal N), as the work's
// error: the guard records it as the attempt's exit code (once.ExitCoder).
type ExitError struct{ Code int }

// Error reads like exec.ExitError's.
func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitCode is the status.
func (e ExitError) ExitCode() int { return e.Code }

// onceVars are the variables once sets for a command; a nested once gets fresh ones.
var onceVars = []string{"ONCE_TASK", "ONCE_SLOT", "ONCE_RUN_ID", "ONCE_ATTEMPT", "ONCE_FENCING_TOKEN",
	"ONCE_IDEMPOTENCY_KEY", "ONCE_PREVIOUS", "ONCE_CHECKPOINT", "ONCE_STORE", "ONCE_STORE_PASSWORD_FILE"}

// Environ is this process's environment without the variables once sets for a command (those of
// once.Run.Env, ONCE_STORE and ONCE_STORE_PASSWORD_FILE): the base of a command's environment.
func Environ() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(onceVars, k) {
			out = append(out, kv)
		}
	}
	return out
}
