package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// ageFlag is an age such as 90d, 2w, 36h or 1d12h (parseWindow: days and weeks, then a Go
// duration), positive and at most maxWindow.
type ageFlag struct{ d *time.Duration }

func (f ageFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f ageFlag) Set(s string) error {
	d, err := parseWindow(s)
	if err != nil {
		return fmt.Errorf("%q: give an age such as 90d, 2w, 36h or 1d12h, at most %s", s, fmtMax(maxWindow))
	}
	if err := checkCoarse(s, "days, weeks or hours, such as 90d for about three months"); err != nil {
		return err
	}
	*f.d = d
	return nil
}

// checkCoarse refuses an age of what to delete or forget written only in minutes or smaller
// units. "6m" reads as six months to a person and is six minutes to Go: prune --older-than 6m
// --forget-slots made every slot done more than six minutes ago run again in a catch-up or a
// backfill, and keys forget --older-than 6m --include-done handed the keys out again. Such an age
// needs days, weeks or hours (0h30m still says thirty minutes, on purpose).
// hint names the units the flag takes.
func checkCoarse(s, hint string) error {
	if strings.ContainsAny(s, "dwh") {
		return nil
	}
	return fmt.Errorf("%q is in minutes or seconds (m is minutes, not months): give %s; for %s itself write 0h%s", s, hint, s, s)
}

func (ageFlag) Type() string { return "age" }

func (a *app) pruneCmd() *cobra.Command {
	var r store.PruneRequest
	var older time.Duration
	var asJSON, quiet bool
	c := &cobra.Command{
		Use:   "prune --older-than AGE [--task T] [--forget-slots] [--dry-run] [--json] [-q]",
		Short: "Remove old history that no decision needs",
		Long: `Remove history older than AGE (by the store's clock) that no decision of once reads:

  - attempts of a settled slot (its last attempt succeeded, or a person resolved it) that are
    not the slot's last attempt nor the last one that reported a checkpoint
  - events (skipped, busy, review, missed), except a review that keeps a slot waiting for a person

Kept, whatever their age: every slot's last attempt (so a slot that succeeded is never run again,
by a catch-up or a backfill), every attempt of a slot still failing or unknown (its attempts are
its budget), a running attempt, anything a slot waiting for review needs. Leases (and so fencing
tokens) are never touched.

--forget-slots also removes whole slots that are done (last attempt succeeded or resolved as
succeeded), ended before AGE and have no entry since: such a slot reads as never run, so a
catch-up window or a backfill reaching back past AGE would run it again. Give it only with an
AGE longer than any window you catch up or backfill.

It works in short transactions and may run while jobs run. --dry-run counts and removes nothing.
-q prints nothing unless it fails: cron mails whatever a job prints, the count included.
To prune as jobs run, see once run --retain.`,
		Example: `  once prune --older-than 90d --dry-run
  once prune --older-than 90d
  # a crontab line: keep a year, forget done slots older than that
  30 3 * * * /usr/bin/once prune -q --older-than 400d --forget-slots`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if older <= 0 {
				return usage("give --older-than AGE, e.g. 90d: only history older than that is removed")
			}
			if r.Task != "" {
				if err := once.ValidateTask(r.Task); err != nil {
					return err
				}
			}
			if quiet && asJSON {
				return usage("-q and --json: give one of them")
			}
			return a.prune(c.Context(), r, older, asJSON, quiet)
		},
	}
	c.Flags().Var(ageFlag{&older}, "older-than", "remove history older than this age, e.g. 90d, 2w, 36h (required)")
	c.Flags().StringVar(&r.Task, "task", "", "only this task")
	c.Flags().BoolVar(&r.ForgetSlots, "forget-slots", false, "also remove done slots older than AGE whole (they read as never run)")
	c.Flags().BoolVar(&r.DryRun, "dry-run", false, "count what would be removed, remove nothing")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"before":…,"attempts":…,"events":…,"slots":…}`)
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing unless it fails (a crontab line: cron mails whatever it prints)")
	return c
}

// prune removes (or with DryRun counts) the history older than older by the store's clock that r
// allows, and says how much unless quiet.
func (a *app) prune(ctx context.Context, r store.PruneRequest, older time.Duration, asJSON, quiet bool) error {
	open := a.open
	if r.DryRun {
		open = a.openToRead // it only counts
	}
	s, _, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	now, err := storeNow(ctx, s)
	if err != nil {
		return err
	}
	r.Before = now.Add(-older)
	res, err := s.Prune(ctx, r)
	if err != nil {
		return err
	}
	if quiet {
		return nil
	}
	if asJSON {
		return writeJSON(a.stdout, struct {
			Before      time.Time `json:"before"`
			Task        string    `json:"task,omitempty"`
			ForgetSlots bool      `json:"forget_slots"`
			DryRun      bool      `json:"dry_run"`
			store.PruneResult
		}{r.Before.UTC(), r.Task, r.ForgetSlots, r.DryRun, res})
	}
	verb, scope := "removed", ""
	if r.DryRun {
		verb = "would remove"
	}
	if r.Task != "" {
		scope = " of task " + r.Task
	}
	fmt.Fprintf(a.stdout, "%s %d attempts and %d events older than %s%s", verb, res.Attempts, res.Events, fmtTime(r.Before), scope)
	if r.ForgetSlots {
		fmt.Fprintf(a.stdout, " (%d slots forgotten whole)", res.Slots)
	}
	fmt.Fprintln(a.stdout)
	return nil
}

// storeNow is the store's time when it can tell it (store.Clock), else this host's: the cutoff of
// a prune is measured on the clock that stamped the history.
func storeNow(ctx context.Context, s store.Store) (time.Time, error) {
	if c, ok := s.(store.Clock); ok {
		return c.Now(ctx)
	}
	return time.Now(), nil
}
