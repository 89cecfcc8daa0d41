package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/scheduler"
	"github.com/once-run/once/store"
)

// The daemon's fleet-wide commands: jobs, pause, resume, trigger, logs. They read and write the
// store, so they act on every node of a fleet.

func (a *app) jobsCmd() *cobra.Command {
	var path string
	var asJSON bool
	var next int
	c := &cobra.Command{
		Use:   "jobs --jobs PATH [--next N] [--json]",
		Short: "The daemon's jobs: schedule, next fire times, last attempt, paused, which node runs it now",
		Example: `  once jobs --jobs /etc/once/jobs.d
  once jobs --jobs jobs.toml --json | jq '.[] | select(.paused)'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if path == "" {
				return usage("give --jobs PATH: the jobs file the daemons run")
			}
			if next < 1 || next > 100 {
				return usage("--next %d: give 1 to 100", next)
			}
			jobs, err := loadJobs(path)
			if err != nil {
				return err
			}
			s, _, err := a.openToRead(c.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			infos, err := scheduler.Describe(c.Context(), s, jobs, time.Now(), next)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, infos)
			}
			return a.printJobs(infos)
		},
	}
	c.Flags().StringVar(&path, "jobs", "", "the jobs file (or directory) the daemons run")
	c.Flags().IntVar(&next, "next", 1, "how many next fire times to show")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func (a *app) printJobs(infos []scheduler.JobInfo) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tNEXT\tSTATE\tRUNNING ON\tLAST SLOT\tLAST\tLAST STARTED")
	for _, ji := range infos {
		nexts := make([]string, len(ji.Next))
		for i, t := range ji.Next {
			nexts[i] = fmtTime(t)
		}
		state := "active"
		if ji.Paused != nil {
			state = "paused"
		}
		if ji.Trigger != "" {
			state += ", triggered"
		}
		running, lastSlot, last, started := "-", "-", "never ran", "-"
		if l := ji.Running; l != nil {
			running = l.Holder
			if ji.Holders > 1 {
				running += fmt.Sprintf(" +%d", ji.Holders-1) // seats: once status lists each
			}
		}
		if at := ji.Last; at != nil {
			lastSlot, last, started = at.Slot, fmt.Sprintf("%s (attempt %d)", at.State, at.Number), fmtTime(at.StartedAt)
		}
		sched := ji.Schedule
		if ji.TZ != "" {
			sched += " " + ji.TZ
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(ji.Name), cell(sched), strings.Join(nexts, ", "), state,
			cell(running), cell(lastSlot), cell(last), started)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, ji := range infos {
		if p := ji.Paused; p != nil {
			fmt.Fprintf(a.stdout, "\n%s is paused (%s, since %s): once resume %s\n", cell(ji.Name), cell(p.RunID), fmtTime(p.ClaimedAt), ji.Name)
		}
	}
	return nil
}

func (a *app) pauseCmd() *cobra.Command {
	var note string
	c := &cobra.Command{
		Use:   "pause JOB [--note TEXT]",
		Short: "Pause a daemon job on every node: its slots are skipped (and recorded) until once resume",
		Example: `  once pause nightly-sync --note "orders DB migration until 06:00"
  once resume nightly-sync`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := store.CheckText("--note", note, scheduler.MaxPauseNote); err != nil {
				return usage("%v", err)
			}
			return a.withJobStore(c.Context(), args[0], func(ctx context.Context, s store.Store) error {
				ok, k, err := scheduler.Pause(ctx, s, args[0], whoami(), note)
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(a.stdout, "%s was already paused (%s, since %s)\n", args[0], cell(k.RunID), fmtTime(k.ClaimedAt))
					return nil
				}
				fmt.Fprintf(a.stdout, "paused %s on every node (within their --poll): once resume %s\n", args[0], args[0])
				return nil
			})
		},
	}
	c.Flags().StringVar(&note, "note", "", "why, shown by once jobs and in each skipped slot's note")
	return c
}

func (a *app) resumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "resume JOB",
		Short:   "Resume a paused daemon job on every node: it fires again from its next slot",
		Example: `  once resume nightly-sync`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withJobStore(c.Context(), args[0], func(ctx context.Context, s store.Store) error {
				ok, err := scheduler.Resume(ctx, s, args[0])
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(a.stdout, "%s was not paused\n", args[0])
					return nil
				}
				fmt.Fprintf(a.stdout, "resumed %s: it fires again from its next slot\n", args[0])
				return nil
			})
		},
	}
}

func (a *app) triggerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger JOB",
		Short: "Run a daemon job now, once, in a slot of its own (manual:TIME), on a node of the fleet",
		Long: `Ask the fleet to run JOB now: one node that runs the job picks the request up (within its --poll)
and runs it through the guard in the slot manual:TIME, once, as any slot: lease, ledger, history,
notifications. A trigger waits while the job runs; only one trigger per job waits at a time.`,
		Example: `  once trigger nightly-sync && once history --task nightly-sync --limit 1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withJobStore(c.Context(), args[0], func(ctx context.Context, s store.Store) error {
				ok, sl, err := scheduler.Trigger(ctx, s, args[0], time.Now())
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(a.stdout, "a trigger of %s already waits: slot %s\n", args[0], cell(sl))
					return nil
				}
				fmt.Fprintf(a.stdout, "triggered %s: slot %s\n", args[0], cell(sl))
				return nil
			})
		},
	}
}

func (a *app) logsCmd() *cobra.Command {
	var sl string
	var attempt int
	c := &cobra.Command{
		Use:   "logs JOB [--slot S] [--attempt N]",
		Short: "The output tail of a daemon job's attempt, kept in the store (any node can show it)",
		Long: `Print the end of an attempt's output (the daemon keeps the last --tail-size bytes of each attempt
in the store; the whole output is in the log file of the node that ran it, $ONCE_HOME/logs/JOB.log).
Without --slot: the job's newest attempt; with --slot: that slot's last attempt, or --attempt N.`,
		Example: `  once logs nightly-sync
  once logs nightly-sync --slot 2026-11-29T02:00:00+00:00 --attempt 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if attempt < 0 || attempt > 0 && sl == "" {
				return usage("--attempt N needs --slot S, and N ≥ 1")
			}
			return a.withJobStoreFrom(c.Context(), a.openToRead, args[0], func(ctx context.Context, s store.Store) error {
				at, err := findAttempt(ctx, s, args[0], sl, attempt)
				if err != nil {
					return err
				}
				tail, ok, err := scheduler.Tail(ctx, s, at.RunID)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "once: %s slot %s attempt %d (%s, run %s, on %s)\n", args[0], cell(at.Slot), at.Number, at.State, at.RunID, cell(at.Holder))
				if !ok {
					return exit(ExitUnavailable, "no output kept for run %s: it printed nothing, ran outside the daemon, kept none (--tail-size 0), or is older than %s", at.RunID, scheduler.TailRetention)
				}
				_, err = a.stdout.Write(tail)
				return err
			})
		},
	}
	c.Flags().StringVar(&sl, "slot", "", "the slot (default: the job's newest attempt)")
	c.Flags().IntVar(&attempt, "attempt", 0, "the attempt number within --slot (default: its last)")
	return c
}

// findAttempt is the attempt once logs shows.
func findAttempt(ctx context.Context, s store.Store, task, sl string, n int) (*store.Attempt, error) {
	if sl == "" {
		at, err := scheduler.LastAttempt(ctx, s, task)
		if err == nil && at == nil {
			err = usage("task %s has no attempt in its newest history", task)
		}
		return at, err
	}
	h, err := s.History(ctx, store.HistoryQuery{Task: task, Slot: sl})
	if err != nil {
		return nil, err
	}
	for _, e := range h {
		if e.State.IsAttempt() {
			if n == 0 || e.Number == n {
				at := e.Attempt
				return &at, nil
			}
		}
	}
	if n == 0 {
		return nil, usage("task %s slot %s has no attempt (see once history %s %s)", task, sl, shell.Flag("task", task), shell.Flag("slot", sl))
	}
	return nil, usage("task %s slot %s has no attempt %d (see once history %s %s)", task, sl, n, shell.Flag("task", task), shell.Flag("slot", sl))
}

// withJobStore validates a job name and runs fn with the store.
func (a *app) withJobStore(ctx context.Context, name string, fn func(context.Context, store.Store) error) error {
	return a.withJobStoreFrom(ctx, a.open, name, fn)
}

// withJobStoreFrom is withJobStore, the store opened by open (a.open, or a.openToRead to only read).
func (a *app) withJobStoreFrom(ctx context.Context, open func(context.Context) (store.Store, string, error), name string, fn func(context.Context, store.Store) error) error {
	if err := checkTask(name); err != nil {
		return err
	}
	s, _, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	a.warnUnknownJob(ctx, s, name)
	err = fn(ctx, s)
	if errors.Is(err, scheduler.ErrNoKeys) {
		return exit(ExitUnavailable, "%v", err)
	}
	if errors.Is(err, once.ErrInvalid) {
		return usage("%v", err)
	}
	return err
}

// warnUnknownJob says on stderr when the store has no history of task name: a typo ("backpu") is
// paused, resumed or triggered without a word while the real job goes on. A job that never ran yet
// is legitimate, so it is a warning, and the command goes on.
func (a *app) warnUnknownJob(ctx context.Context, s store.Store, name string) {
	if h, err := s.History(ctx, store.HistoryQuery{Task: name, Limit: 1}); err == nil && len(h) == 0 {
		fmt.Fprintf(a.stderr, "once: warning: no job named %s has run on this store (a typo? see once jobs or once history); going on\n", name)
	}
}
