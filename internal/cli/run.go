package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/once-run/once"
	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/job"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
	"github.com/once-run/once/supervise"
)

type runFlags struct {
	task, holder              string
	per, schedule, slot, tz   string
	ttl, minHold, wait, grace time.Duration
	onUnknown                 string
	maxAttempts, busyExit     int
	catchUp                   string
	catchUpMax                int
	notifyURL, pingURL        string
	notifyTimeout             time.Duration
	retain                    time.Duration // once run --retain: prune the task's history older than this after a run
	replace                   bool          // once run --replace: take the task over from its running holder
	limit                     int           // once run --limit: at most this many holders at once
}

func (a *app) runCmd() *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run --task NAME [flags] -- COMMAND [ARG...]",
		Short: "Run COMMAND at most once at a time per task, and at most once successfully per slot",
		Long: `Run COMMAND under the guard: a kernel file lock in $ONCE_HOME/locks, a lease in the store (renewed
every ttl/3, with a fencing token), and the ledger for the slot.

With --catch-up WINDOW (and --per or --schedule), every slot that started within the window and has
not succeeded runs first, oldest first, each with its own ONCE_SLOT, then the current slot. The
sequence stops at the first slot that fails or needs review; the next run starts again there.

Exit status: COMMAND's own (128+N if killed by signal N); 0 when the slot already succeeded; 75 when
the task is running elsewhere (--busy-exit); 76 when the slot needs review; 69 when the store is
unavailable; 64 on bad usage. In every case but the first, COMMAND was not run.

Under cron (stderr not a terminal) a run that succeeds, is skipped or is busy prints nothing, so cron
mails only failures and reviews; -v prints every line, --log-file FILE (or syslog) keeps them. cron's
PATH is /usr/bin:/bin: call once by its absolute path.`,
		Example: `  # replace "flock -n /tmp/sync.lock sync-orders" in a crontab:
  0 2 * * * /usr/bin/once run --task sync-orders --per day -- /usr/local/bin/sync-orders

  # after the machine was off for a weekend, run each missed day once, oldest first
  0 2 * * * /usr/bin/once run --task sync-orders --per day --catch-up 7d -- /usr/local/bin/sync-orders

  # a schedule-aligned slot in a zone, and a lease shared by every host through PostgreSQL
  once run --store postgres://once@db/once --task report --schedule "30 2 * * *" --tz Europe/Berlin -- ./report.sh`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usage("put the command after --: once run --task %s [flags] -- %s", orDefault(f.task, "NAME"), strings.Join(args, " "))
			}
			if c.Flags().Changed("catch-up-max") && f.catchUp == "" {
				return usage("--catch-up-max needs --catch-up WINDOW")
			}
			if f.replace && c.Flags().Changed("wait") {
				return usage("--replace does not wait for the running holder: drop --wait")
			}
			if err := checkLimit(c, f); err != nil {
				return err
			}
			if err := retainFromEnv(c, f); err != nil {
				return err
			}
			return a.run(c.Context(), f, args)
		},
	}
	fl := c.Flags()
	addRunFlags(fl, f, true)
	fl.StringVar(&f.catchUp, "catch-up", "", "with --per/--schedule: first run every slot of this window (e.g. 3d, 12h) that has not succeeded, oldest first")
	fl.IntVar(&f.catchUpMax, "catch-up-max", 100, "refuse (64) when catch-up would run more than this many missed slots")
	fl.BoolVar(&f.replace, "replace", false, "when the task runs elsewhere, stop that run (through its lost lease) and run instead of exiting busy")
	fl.IntVar(&f.limit, "limit", 0, "let up to N holders run the task at once, each with its own lease seat and token (1 to 1000; default exclusive)")
	fl.Var(ageFlag{&f.retain}, "retain", "after a run, remove the task's history older than this age that no decision needs, as once prune does (env ONCE_RETAIN)")
	return c
}

// checkLimit refuses a --limit out of range, or with --replace.
func checkLimit(c *cobra.Command, f *runFlags) error {
	if !c.Flags().Changed("limit") {
		return nil
	}
	if f.limit < 1 || f.limit > store.MaxLimit {
		return usage("--limit %d: give the number of holders that may run at once, 1 to %d", f.limit, store.MaxLimit)
	}
	if f.replace {
		return usage("--limit and --replace cannot be combined")
	}
	return nil
}

// addRunFlags registers the flags of once run that backfill and drill share. slotFlag adds --slot.
func addRunFlags(fl *pflag.FlagSet, f *runFlags, slotFlag bool) {
	fl.StringVar(&f.task, "task", "", "the task's identity: 1–200 of A-Z a-z 0-9 . _ : @ / - (required)")
	fl.StringVar(&f.holder, "holder", os.Getenv("ONCE_HOLDER"), "this process's identity in leases and history (env ONCE_HOLDER; default user@hostname:pid)")
	fl.StringVar(&f.per, "per", "", "slot = start of the current day|hour|minute|week|month in --tz")
	fl.StringVar(&f.schedule, "schedule", "", `slot = latest fire time of a 5-field cron (or 6 with leading seconds), @daily-style or "@every D" schedule`)
	if slotFlag {
		fl.StringVar(&f.slot, "slot", "", "explicit slot, e.g. a batch number")
	}
	fl.StringVar(&f.tz, "tz", "", "IANA zone for --per and --schedule (default local)")
	durationVar(fl, &f.ttl, "ttl", 60*time.Second, maxTTL, "lease time-to-live; renewed every ttl/3 while COMMAND runs")
	durationVar(fl, &f.minHold, "min-hold", 0, maxMinHold, "keep the lease at least this long after start (short tasks, clock skew)")
	durationVar(fl, &f.wait, "wait", 0, maxWait, "wait up to this long for a busy lock or lease instead of failing at once")
	durationVar(fl, &f.grace, "grace", 10*time.Second, maxGrace, "after a signal or a lost lease: SIGTERM the command's group, SIGKILL after this")
	fl.StringVar(&f.onUnknown, "on-unknown", "review", "when the slot's last attempt ended unknown: review, rerun or skip")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "failed attempts allowed per slot, then review (0: no limit)")
	fl.IntVar(&f.busyExit, "busy-exit", ExitBusy, "exit code when the task is running elsewhere")
	// ONCE_NOTIFY= and ONCE_PING= (set but empty) are off: the one way to turn them off for a job
	// under a crontab or a unit that sets them (--notify '' is refused as an unset variable).
	fl.StringVar(&f.notifyURL, "notify", os.Getenv("ONCE_NOTIFY"), "POST a JSON event here on failed, unknown, review and lease lost (env ONCE_NOTIFY)")
	fl.StringVar(&f.pingURL, "ping", os.Getenv("ONCE_PING"), "Healthchecks.io-style ping URL: URL/start, URL (success), URL/EXIT_CODE (env ONCE_PING)")
	durationVar(fl, &f.notifyTimeout, "notify-timeout", 5*time.Second, maxNotifyTimeout, "longest once waits at exit for notifications and pings to be delivered")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// runner is a once run, backfill or drill: its flags made into the guard's options, and its
// command as a job.Runner.
type runner struct {
	a      *app
	f      *runFlags
	args   []string // COMMAND [ARG...]
	dsn    string
	home   string
	spec   slot.Spec
	policy once.Policy
	log    *slog.Logger
	job    *job.Runner
	// before, when set, is called as each attempt starts (backfill progress).
	before func(run *once.Run)
	// began counts the attempts that began, for the line of a stop signal that ends a sequence.
	began atomic.Int32
}

// validate checks the flags and the command before anything touches the store: bad input runs
// nothing.
// Any refusal after --notify and --ping are known good is sent there too (notifyNotRun): a
// crontab line with a bad flag value refuses every launch, and with cron's mail off only they say so.
func (a *app) validate(f *runFlags, args []string, cmdName string) (rn *runner, err error) {
	if err := checkHooks(f); err != nil {
		return nil, err // nowhere to say it but stderr
	}
	sl := "" // the slot, once known
	defer func() {
		if err != nil {
			notifyNotRun(f, a.loggerOrStderr(), sl, err)
		}
	}()
	if err := checkTask(f.task); err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return nil, usage("missing command: once %s --task %s [flags] -- COMMAND [ARG...]", cmdName, f.task)
	}
	policy, err := parsePolicy(f.onUnknown)
	if err != nil {
		return nil, err
	}
	if err := envNotEmpty("ONCE_HOLDER"); err != nil && f.holder == "" {
		return nil, err
	}
	if f.holder != "" {
		if err := store.CheckName("--holder (or ONCE_HOLDER)", f.holder, store.MaxHolderLen); err != nil {
			return nil, err
		}
	}
	if f.ttl < time.Second {
		return nil, usage("--ttl %s is too short: use at least 1s", f.ttl)
	}
	if f.maxAttempts < 0 || f.maxAttempts > store.MaxFailures {
		return nil, usage("--max-attempts %d is out of range: give 0 (no limit) to %d", f.maxAttempts, store.MaxFailures)
	}
	if f.busyExit < 0 || f.busyExit > 255 {
		return nil, usage("--busy-exit %d: give an exit code from 0 to 255", f.busyExit)
	}
	spec, err := slot.New(f.per, f.schedule, f.slot, f.tz)
	if err != nil {
		return nil, usage("%v", err)
	}
	sl = spec.At(time.Now())
	log, err := a.logger()
	if err != nil {
		return nil, err
	}
	if meaning := busyExitClash(f.busyExit); meaning != "" {
		// Warned, not refused: refusing would stop a crontab line that runs today.
		log.Warn(fmt.Sprintf("--busy-exit %d is also once's exit for %s: a script cannot tell a busy task from that; give a code once does not use (0, 75, 1-63, 65-68, 71-74, 77-125, 128)", f.busyExit, meaning))
	}
	rn = &runner{a: a, f: f, args: args, spec: spec, policy: policy, log: log}
	if rn.job, err = job.New(rn.jobOf(args)); err != nil {
		return nil, notRunnable(args[0], err)
	}
	if rn.home, err = home(); err != nil {
		return nil, err // every launch of the crontab line fails so
	}
	return rn, nil
}

// checkHooks refuses a --notify or --ping URL that is not one (64).
func checkHooks(f *runFlags) error {
	if f.notifyURL != "" {
		if err := notify.CheckURL("--notify", f.notifyURL); err != nil {
			return usage("%v", err)
		}
	}
	if f.pingURL != "" {
		if err := notify.CheckURL("--ping", f.pingURL); err != nil {
			return usage("%v", err)
		}
	}
	return nil
}

// loggerOrStderr is once's logger, or a plain one on stderr when the log flags are what was refused.
func (a *app) loggerOrStderr() *slog.Logger {
	if log, err := a.logger(); err == nil {
		return log
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// jobOf is the flags' command as a job: the store reaches it by environment, the commands that
// resolve a slot name the store, a command that fails to start at the last moment is said on
// stderr.
func (rn *runner) jobOf(args []string) job.Job {
	a, f := rn.a, rn.f
	return job.Job{Args: args, Grace: f.grace, Notify: f.notifyURL, Ping: f.pingURL, NotifyTimeout: f.notifyTimeout,
		Shim:    supervise.DefaultShim(), // once-shim when it is installed
		Logger:  rn.log,
		Env:     func() []string { return a.storeEnv(rn.dsn) },
		Resolve: func(slot string) *notify.Resolve { return a.resolveCommands(rn.dsn, f.task, slot) },
		Before: func(run *once.Run) {
			rn.began.Add(1)
			if rn.before != nil {
				rn.before(run)
			}
		},
		StartFailed: func(err error) { fmt.Fprintf(a.stderr, "once: %v\n", err) },
	}
}

// notStarted maps an attempt whose command could not start to its exit.
func (rn *runner) notStarted(err error) error {
	if errors.Is(err, once.ErrNotStarted) {
		return notRunnable(rn.args[0], err)
	}
	return err
}

// interrupted turns an error caused by a stop signal into 128+N: one that came before the
// command started, or while a sequence's (catch-up, backfill) command ran, which ends the
// sequence there (the next slot's attempt is not begun).
func (rn *runner) interrupted(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
		if sig := rn.job.Signal(); sig != 0 {
			if n := rn.began.Load(); n > 0 {
				return exit(128+int(sig), "%v: stopped after %d slot(s) began; the slots after them were not run (run the same command again to go on from there)", c, n)
			}
			return exit(128+int(sig), "%v before the command started (nothing was run)", c)
		}
	}
	return err
}

// options are the guard's options from the flags (the command's job adds Prepare).
func (rn *runner) options(s store.Store) once.Options {
	f := rn.f
	return once.Options{Store: s, Task: f.task, Holder: f.holder, TTL: f.ttl, MinHold: f.minHold,
		Wait: f.wait, Replace: f.replace, Limit: f.limit, OnUnknown: rn.policy, MaxAttempts: f.maxAttempts, LockDir: lockDir(rn.home), Logger: rn.log,
		TracerProvider: rn.a.tracerProvider(),
		ResolveHint:    func(slot string) string { return rn.a.resolveCommand(rn.dsn, f.task, slot, store.Failed) }}
}

// catchUpWindow is --catch-up's window, 0 without it.
func (rn *runner) catchUpWindow() (time.Duration, error) {
	f := rn.f
	if f.catchUp == "" {
		return 0, nil
	}
	window, err := parseWindow(f.catchUp)
	if err != nil {
		return 0, err
	}
	if k := rn.spec.Kind(); k != slot.KindPer && k != slot.KindSchedule {
		what := "without a slot there are no missed periods"
		if k == slot.KindSlot {
			what = "an explicit --slot has no missed periods"
		}
		return 0, usage("--catch-up needs --per or --schedule: %s", what)
	}
	if f.catchUpMax < 0 {
		return 0, usage("--catch-up-max %d is negative: give 0 or more", f.catchUpMax)
	}
	return window, nil
}

// notifyNotRun tells --notify (a failed event) and --ping (the exit code) of a run of slot sl that
// ran nothing: a command that cannot start (127, 126), a store that cannot be reached (69), a
// flag value, store DSN or ONCE_HOME that every launch of the line will refuse (64).
// Nothing is recorded, and with cron's mail off they are all that would say so.
func notifyNotRun(f *runFlags, log *slog.Logger, sl string, err error) {
	if f.notifyURL == "" && f.pingURL == "" {
		return
	}
	code, msg := classify(err)
	s := notify.New(notify.Options{Logger: log})
	s.Event(f.notifyURL, notify.Event{Event: notify.Failed, Task: f.task, Slot: sl, ExitCode: &code, Reason: msg})
	s.Ping(f.pingURL, strconv.Itoa(code), "")
	if n := s.Wait(f.notifyTimeout); n > 0 {
		log.Warn("gave up on notifications still pending", "pending", n, "after", f.notifyTimeout.String())
	}
}

// notRunnable is the exit for a command that cannot start: 127 or 126 like a shell, 70 otherwise;
// nothing was run.
func notRunnable(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), once.ErrNotStarted.Error()+": ")
	var ee *exec.Error
	switch {
	case errors.Is(err, supervise.ErrNotFound):
		return exit(ExitNotFound, "%s (nothing was run)", msg)
	case errors.Is(err, supervise.ErrNotExecutable):
		return exit(ExitNotExecutable, "%s (nothing was run)", msg)
	case errors.As(err, &ee) && (errors.Is(ee.Err, exec.ErrNotFound) || errors.Is(ee.Err, fs.ErrNotExist)):
		return exit(ExitNotFound, "command not found: %s (nothing was run)", name)
	case errors.As(err, &ee):
		return exit(ExitNotExecutable, "cannot run %s: %v (nothing was run)", name, ee.Err)
	}
	return exit(ExitInternal, "could not start the command: %s (nothing was run)", msg)
}

func (a *app) run(ctx context.Context, f *runFlags, args []string) error {
	rn, err := a.validate(f, args, "run")
	if err != nil {
		return err
	}
	window, err := rn.catchUpWindow()
	if err != nil {
		notifyNotRun(f, rn.log, rn.spec.At(time.Now()), err)
		return err
	}
	ctx, stop := rn.job.HandleSignals(a.traceParent(ctx))
	defer stop()
	defer rn.job.Close()
	job.Adopt(rn.log)

	dsn, err := a.dsn()
	if err != nil {
		notifyNotRun(f, rn.log, rn.spec.At(time.Now()), err)
		return err
	}
	rn.dsn = dsn

	// The guard opens the store once it holds the task's local lock: a launch that finds the task
	// running on this machine costs the store nothing but its busy event.
	opts := rn.options(nil)
	var opened store.Store
	defer func() {
		if opened != nil {
			closeQuickly(opened)
		}
	}()
	opts.Open = func(ctx context.Context) (store.Store, error) {
		s, err := a.openStore(ctx, dsn)
		if err != nil {
			return nil, err // a backend's nil *Store in an interface is not nil
		}
		opened = s
		return s, nil
	}
	var rs []once.Result
	if window > 0 {
		rs, err = rn.job.CatchUp(ctx, opts, rn.spec, window, f.catchUpMax)
	} else {
		opts.Slot = rn.spec.At(time.Now())
		var r once.Result
		r, err = rn.job.Do(ctx, opts)
		rs = []once.Result{r}
	}
	if err != nil {
		err = catchUpRefused(rn.notStarted(rn.interrupted(ctx, err)))
		if code, _ := classify(err); code == ExitUnavailable || errors.Is(err, store.ErrBadDSN) {
			notifyNotRun(f, rn.log, opts.Slot, err)
		}
		return err
	}
	if opened != nil {
		rn.retain(ctx, opened, rs)
	}
	last := rs[len(rs)-1]
	if window > 0 && len(rs) > 0 {
		if cur := rn.spec.At(time.Now()); last.Slot != cur && last.Decision != once.Busy {
			fmt.Fprintf(a.stderr, "once: catch-up stopped at slot %s (%s); later slots were not run, the next run starts again there\n",
				last.Slot, cell(describe(last)))
		}
	}
	return rn.exitFor(last, dsn)
}

func describe(r once.Result) string {
	if r.Decision == once.Ran && r.Attempt != nil {
		if c := r.Attempt.ExitCode; c != nil {
			return fmt.Sprintf("%s, exit %d", r.Attempt.State, *c)
		}
		return string(r.Attempt.State)
	}
	if r.Reason != "" {
		return string(r.Decision) + ": " + r.Reason
	}
	return string(r.Decision)
}

// exitFor maps a result to once run's exit status, printing what a person must do for review.
func (rn *runner) exitFor(res once.Result, dsn string) error {
	a, f := rn.a, rn.f
	switch res.Decision {
	case once.Ran:
		switch {
		case errors.Is(res.RecordErr, once.ErrMaybeRecorded):
			hist := "once history " + shell.Flag("task", f.task)
			if res.Slot != "" {
				hist += " " + shell.Flag("slot", res.Slot)
			}
			fmt.Fprintf(a.stderr, "once: run %s: %v\nonce: its history tells:\n  %s%s\n",
				res.Attempt.RunID, res.RecordErr, hist, a.storeArg(dsn))
		case res.RecordErr != nil:
			fmt.Fprintf(a.stderr, "once: the outcome of run %s was not recorded: %v\n", res.Attempt.RunID, res.RecordErr)
		}
		var ec once.ExitCoder
		if errors.As(res.WorkErr, &ec) {
			return exit(ec.ExitCode(), "")
		}
		if res.WorkErr != nil {
			return exit(ExitInternal, "could not run the command: %v", res.WorkErr)
		}
		return nil
	case once.Skipped:
		return nil
	case once.Busy:
		return exit(f.busyExit, "")
	case once.Review:
		// Each command on a line of its own, complete: the whole line can be pasted.
		fmt.Fprintf(a.stderr, "once: task %s slot %s needs review: %s\n", f.task, cell(res.Slot), cell(res.Reason))
		fmt.Fprintf(a.stderr, "once: to run it again (add --note TEXT to say why):\n  %s\n", a.resolveCommand(dsn, f.task, res.Slot, store.Failed))
		fmt.Fprintf(a.stderr, "once: to mark it done instead:\n  %s\n", a.resolveCommand(dsn, f.task, res.Slot, store.Succeeded))
		if note := a.hiddenPassword(dsn); note != "" {
			fmt.Fprintf(a.stderr, "once: %s\n", note)
		}
		return exit(ExitReview, "")
	}
	return fmt.Errorf("unexpected decision %q", res.Decision)
}

// closeQuickly closes a store at the end of a command, except the embedded one: closing SQLite's last
// connection checkpoints the WAL into the database file (two more fsyncs, about a fifth of a short
// `once run`), and this process exits right after. Every commit is already durable, and an unclosed
// WAL is what SQLite recovers after a crash, by design; auto-checkpoints still bound its size.
// Networked stores are closed: that ends ZooKeeper sessions and etcd keep-alives at once.
func closeQuickly(s store.Store) {
	if _, ok := s.(*sqlite.Store); ok {
		return
	}
	s.Close()
}

// busyExitClash is what the exit contract (docs/cli.md) already means by code, "" when nothing:
// --busy-exit set to it makes busy look like that.
func busyExitClash(code int) string {
	switch {
	case code == ExitUsage:
		return "bad usage or bad input (nothing was run)"
	case code == ExitUnavailable:
		return "a store unavailable or not to be trusted (nothing was run)"
	case code == ExitInternal:
		return "an internal error"
	case code == ExitReview:
		return "a slot that needs review"
	case code == ExitNotExecutable || code == ExitNotFound:
		return "a command that cannot be run or was not found"
	case code > 128:
		return fmt.Sprintf("a command killed by signal %d", code-128)
	}
	return ""
}
