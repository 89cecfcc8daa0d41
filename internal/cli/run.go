package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
	"github.com/once-run/once/supervise"
)

type runFlags struct {
	task, holder              string
	per, schedule, slot, tz   string
	ttl, minHold, wait, grace time.Duration
	onUnknown                 string
	maxAttempts, busyExit     int
}

func (a *app) runCmd() *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run --task NAME [flags] -- COMMAND [ARG...]",
		Short: "Run COMMAND at most once at a time per task, and at most once successfully per slot",
		Long: `Run COMMAND under the guard: a kernel file lock in $ONCE_HOME/locks, a lease in the store (renewed
every ttl/3, with a fencing token), and the ledger for the slot.

Exit status: COMMAND's own (128+N if killed by signal N); 0 when the slot already succeeded; 75 when
the task is running elsewhere (--busy-exit); 76 when the slot needs review; 69 when the store is
unavailable; 64 on bad usage. In every case but the first, COMMAND was not run.`,
		Example: `  # replace "flock -n /tmp/sync.lock sync-orders" in a crontab:
  0 2 * * * once run --task sync-orders --per day -- /usr/local/bin/sync-orders

  # a schedule-aligned slot in a zone, and a lease shared by every host through PostgreSQL
  once run --store postgres://once@db/once --task report --schedule "30 2 * * *" --tz Europe/Berlin -- ./report.sh`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usage("put the command after --: once run --task %s [flags] -- %s", orDefault(f.task, "NAME"), strings.Join(args, " "))
			}
			return a.run(c.Context(), f, args)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.task, "task", "", "the task's identity: 1–200 of A-Z a-z 0-9 . _ : @ / - (required)")
	fl.StringVar(&f.holder, "holder", os.Getenv("ONCE_HOLDER"), "this process's identity in leases and history (env ONCE_HOLDER; default hostname:pid)")
	fl.StringVar(&f.per, "per", "", "slot = start of the current day|hour|minute|week|month in --tz")
	fl.StringVar(&f.schedule, "schedule", "", `slot = latest fire time of a 5-field cron or @daily-style schedule`)
	fl.StringVar(&f.slot, "slot", "", "explicit slot, e.g. a batch number")
	fl.StringVar(&f.tz, "tz", "", "IANA zone for --per and --schedule (default local)")
	durationVar(fl, &f.ttl, "ttl", 60*time.Second, "lease time-to-live; renewed every ttl/3 while COMMAND runs")
	durationVar(fl, &f.minHold, "min-hold", 0, "keep the lease at least this long after start (short tasks, clock skew)")
	durationVar(fl, &f.wait, "wait", 0, "wait up to this long for a busy lock or lease instead of failing at once")
	durationVar(fl, &f.grace, "grace", 10*time.Second, "after a signal or a lost lease: SIGTERM the command's group, SIGKILL after this")
	fl.StringVar(&f.onUnknown, "on-unknown", "review", "when the slot's last attempt ended unknown: review, rerun or skip")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "failed attempts allowed per slot, then review (0: no limit)")
	fl.IntVar(&f.busyExit, "busy-exit", ExitBusy, "exit code when the task is running elsewhere")
	return c
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (a *app) run(ctx context.Context, f *runFlags, args []string) error {
	// Validate everything before touching the store: bad input runs nothing.
	if err := once.ValidateTask(f.task); err != nil {
		return err
	}
	if len(args) == 0 {
		return usage("missing command: once run --task %s [flags] -- COMMAND [ARG...]", f.task)
	}
	policy, err := once.ParsePolicy(f.onUnknown)
	if err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ttl", f.ttl}, {"min-hold", f.minHold}, {"wait", f.wait}, {"grace", f.grace}} {
		if d.v < 0 {
			return usage("--%s %s is negative: give a duration such as 30s, 5m or 1h", d.name, d.v)
		}
	}
	if f.ttl < time.Second {
		return usage("--ttl %s is too short: use at least 1s", f.ttl)
	}
	if f.maxAttempts < 0 {
		return usage("--max-attempts %d is negative: give 0 (no limit) or more", f.maxAttempts)
	}
	if f.busyExit < 0 || f.busyExit > 255 {
		return usage("--busy-exit %d: give an exit code from 0 to 255", f.busyExit)
	}
	spec, err := slot.New(f.per, f.schedule, f.slot, f.tz)
	if err != nil {
		return usage("%v", err)
	}
	log, err := a.logger()
	if err != nil {
		return err
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) && (errors.Is(ee.Err, exec.ErrNotFound) || errors.Is(ee.Err, fs.ErrNotExist)) {
			return exit(ExitNotFound, "command not found: %s (nothing was run)", args[0])
		}
		return exit(ExitNotExecutable, "cannot run %s: %v (nothing was run)", args[0], errors.Unwrap(err))
	}
	home, err := once.Home()
	if err != nil {
		return err
	}

	// Signals: before the command starts they cancel; after, they are forwarded to its group.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var proc atomic.Pointer[supervise.Process]
	var gotSig atomic.Value
	go func() {
		for s := range sigs {
			sig := s.(syscall.Signal)
			gotSig.Store(sig)
			if p := proc.Load(); p != nil {
				p.Stop(sig, f.grace)
				continue
			}
			cancel(fmt.Errorf("interrupted by %v", sig))
		}
	}()

	s, dsn, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()

	value := spec.At(time.Now())
	opts := once.Options{Store: s, Task: f.task, Holder: f.holder, Slot: value, TTL: f.ttl, MinHold: f.minHold,
		Wait: f.wait, OnUnknown: policy, MaxAttempts: f.maxAttempts, LockDir: once.LockDir(home), Logger: log}
	res, err := once.Do(ctx, opts, func(ctx context.Context, run *once.Run) error {
		env := append(withoutOnceVars(os.Environ()), run.Env()...)
		env = append(env, "ONCE_STORE="+dsn)
		p, err := supervise.Start(supervise.Config{Args: append([]string{path}, args[1:]...), Env: env,
			Shim: []string{"/proc/self/exe", supervise.ShimArg}})
		if err != nil {
			// Recorded like a shell would report it.
			fmt.Fprintf(a.stderr, "once: %v\n", err)
			switch {
			case errors.Is(err, supervise.ErrNotFound):
				return exitCode{ExitNotFound}
			case errors.Is(err, supervise.ErrNotExecutable):
				return exitCode{ExitNotExecutable}
			}
			return err
		}
		proc.Store(p)
		if v := gotSig.Load(); v != nil { // a signal that arrived while starting
			p.Stop(v.(syscall.Signal), f.grace)
		}
		select {
		case <-p.Done():
		case <-run.Lost():
			grace := min(f.grace, max(time.Until(run.StopBy()), 0))
			log.Error("lease lost: stopping the command", "task", run.Task, "run_id", run.RunID,
				"token", run.Token, "grace", grace.String(), "err", run.LostErr())
			p.Stop(syscall.SIGTERM, grace)
		}
		ex, err := p.Wait()
		if err != nil {
			return err
		}
		if ex.Code != 0 {
			return exitCode{ex.Code}
		}
		return nil
	})
	if err != nil {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			if v := gotSig.Load(); v != nil {
				return exit(128+int(v.(syscall.Signal)), "%v before the command started (nothing was run)", c)
			}
		}
		return err
	}
	switch res.Decision {
	case once.Ran:
		if res.RecordErr != nil {
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
		hint := ""
		if a.storeFlag != "" {
			hint = " --store " + once.ShellQuote(store.Redact(dsn))
		}
		fmt.Fprintf(a.stderr, "once: task %s slot %s needs review: %s\n", f.task, value, res.Reason)
		fmt.Fprintf(a.stderr, "once: to run it again:  %s%s --note '…'\n", once.ResolveCommand(f.task, value, store.Failed), hint)
		fmt.Fprintf(a.stderr, "once: to mark it done:  %s%s --note '…'\n", once.ResolveCommand(f.task, value, store.Succeeded), hint)
		return exit(ExitReview, "")
	}
	return fmt.Errorf("unexpected decision %q", res.Decision)
}

// exitCode is the command's non-zero exit status.
type exitCode struct{ code int }

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", e.code) }
func (e exitCode) ExitCode() int { return e.code }

// withoutOnceVars drops the variables once sets for the command, so a nested once gets fresh ones.
func withoutOnceVars(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "ONCE_TASK", "ONCE_SLOT", "ONCE_RUN_ID", "ONCE_ATTEMPT", "ONCE_FENCING_TOKEN",
			"ONCE_IDEMPOTENCY_KEY", "ONCE_PREVIOUS", "ONCE_CHECKPOINT", "ONCE_STORE":
			continue
		}
		out = append(out, kv)
	}
	return out
}
