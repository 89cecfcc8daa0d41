package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/internal/who"
	"github.com/once-run/once/notify"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) statusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Leases held now, attempts running, slots waiting for review, and slots missed in the last 7 days",
		Long: `Leases held now; the attempts still running (at most 100), each with whether its holder's lease is
live — one whose lease is gone was left by a holder that died, and is shown with the commands that
settle it now; slots waiting for review (oldest first, with the commands that decide them);
and the newest slots missed in the last 7 days (at most 20; once history --kind missed lists them
all): slots whose fire time passed while no node of once daemon ran them, outside the job's
catch-up window. The MISSED section is shown only when there is one; --json always has "missed".`,
		Example: `  once status
  once status --json | jq '.review[]'
  once status --json | jq -r '.running[] | select(.resolve) | .resolve.failed'
  once status --json | jq -r '.missed[] | "\(.task) \(.slot)"'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return a.status(c.Context(), asJSON) },
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"leases":[…],"missed":[…],"review":[…],"running":[…],…}`)
	return c
}

// review is a slot waiting for review as status lists it.
type review struct {
	store.SlotState
	Resolve *notify.Resolve `json:"resolve"` // one complete command per decision
}

func (a *app) status(ctx context.Context, asJSON bool) error {
	s, dsn, err := a.openToRead(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	run, leases, err := a.readRunning(ctx, s, dsn)
	if err != nil {
		return err
	}
	waiting, err := s.Waiting(ctx)
	if err != nil {
		return err
	}
	missed, more, err := recentMissed(ctx, s, time.Now())
	if err != nil {
		return err
	}
	if leases == nil {
		leases = []store.Lease{}
	}
	reviews := make([]review, len(waiting))
	for i, w := range waiting {
		reviews[i] = review{w, a.resolveCommands(dsn, w.Task, w.Slot)}
	}
	if asJSON {
		unlisted := run.unlisted
		if unlisted == nil {
			unlisted = []string{}
		}
		// missed_run_since: by missed event, the slot's last attempt now (null: not run since).
		return writeJSON(a.stdout, map[string]any{"leases": leases, "review": reviews, "missed": missed, "missed_run_since": ranSince(ctx, s, missed), "running": run.list,
			"running_more": run.more, "running_unlisted": unlisted, "running_listed": run.listed})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LEASES (%d)\n", len(leases))
	if len(leases) > 0 {
		fmt.Fprintln(tw, "TASK\tHOLDER\tRUN ID\tTOKEN\tACQUIRED\tEXPIRES")
		for _, l := range leases {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", cell(l.Task), cell(l.Holder), cell(dash(l.RunID)), l.Token, fmtTime(l.Acquired), fmtTime(l.Expires))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := a.printRunning(run); err != nil {
		return err
	}
	fmt.Fprintf(tw, "\nWAITING FOR REVIEW (%d)\n", len(waiting))
	if len(waiting) > 0 {
		fmt.Fprintln(tw, "TASK\tSLOT\tATTEMPT\tSTATE\tHOLDER\tSTARTED")
		for _, w := range waiting {
			l := w.Last
			if l == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(w.Task), cell(dash(w.Slot)), l.Number, cell(string(l.State)), cell(l.Holder), fmtTime(l.StartedAt))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The commands below the table, each alone on its line: a line pasted whole runs
	// exactly one decision.
	for _, r := range reviews {
		fmt.Fprintf(a.stdout, "\ntask %s slot %s: to run it again (add --note TEXT to say why):\n  %s\nor to mark it done:\n  %s\n",
			cell(r.Task), cell(dash(r.Slot)), r.Resolve.Failed, r.Resolve.Succeeded)
	}
	if note := a.hiddenPassword(dsn); note != "" && len(reviews) > 0 {
		fmt.Fprintf(a.stdout, "%s\n", note)
	}
	return a.printMissed(missed, ranSince(ctx, s, missed), more)
}

func (a *app) resolveCmd() *cobra.Command {
	var r store.ResolveRequest
	var as string
	c := &cobra.Command{
		Use:   "resolve --task T --slot S --as succeeded|failed [--note TEXT]",
		Short: "Record a person's decision on a slot waiting for review",
		Long: `Record a person's decision on a slot whose last attempt ended unknown or used up its attempts.
--as failed lets the next run try the slot again (with a fresh attempt budget); --as succeeded marks
it done. The decision, who made it and when are kept in history. A last attempt still recorded as
running whose holder's lease is gone (once status: LEASE gone) is marked unknown first, as the
task's next run would: resolve takes the task's lease for a moment, and refuses (75) while any
grant of the task is live.`,
		Example: `  once resolve --task nightly-sync --slot 2026-11-29 --as failed --note "checked: no rows written"`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkTask(r.Task); err != nil {
				return err
			}
			if !c.Flags().Changed("slot") {
				return usage("give --slot S (the slot shown by once status; --slot '' for a task without slots)")
			}
			var badSlot error // a slot name --slot refuses, unless the ledger has it (recordedSlot)
			if r.Slot != "" {
				badSlot = slot.CheckValue(r.Slot)
			}
			switch store.State(as) {
			case store.Succeeded, store.Failed:
				r.As = store.State(as)
			default:
				return usage("--as %q: use succeeded (the slot is done) or failed (run it again)", as)
			}
			byName := "--by"
			if !c.Flags().Changed("by") {
				r.By, byName = whoami(), "the default --by (user@host)"
			}
			if err := store.CheckName(byName, r.By, store.MaxByLen); err != nil {
				return err
			}
			if err := store.CheckText("--note", r.Note, store.MaxNoteLen); err != nil {
				return err
			}
			s, _, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			if badSlot != nil && !recordedSlot(c.Context(), s, r.Task, r.Slot) {
				return usage("%v", badSlot)
			}
			att, err := s.Resolve(c.Context(), r)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return usage("task %s has no attempt in slot %q: nothing to resolve (see once history %s)", r.Task, r.Slot, shell.Flag("task", r.Task))
			case errors.Is(err, store.ErrConflict):
				att, err = a.resolveConflict(c.Context(), s, r)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "resolved task %s slot %s (attempt %d, %s) as %s by %s\n", r.Task, cell(dash(r.Slot)), att.Number, att.State, r.As, r.By)
			return nil
		},
	}
	c.Flags().StringVar(&r.Task, "task", "", "the task (required)")
	c.Flags().StringVar(&r.Slot, "slot", "", "the slot (required)")
	allowEmpty(c.Flags(), "slot") // --slot '' names the slot of a task without slots
	c.Flags().StringVar(&as, "as", "", "succeeded or failed (required)")
	c.Flags().StringVar(&r.Note, "note", "", "why: kept in history")
	c.Flags().StringVar(&r.By, "by", "", "who decides (default user@host)")
	return c
}

// resolveConflict explains why the store refused a decision, with a contract code: the slot is
// not waiting for review (already done, already decided, never failed) is bad input, 64, like a
// slot with no attempt; an attempt running now is busy, 75: decide after it ends. Nothing was
// recorded either way. An attempt still recorded as running whose holder's lease is gone (the
// holder died) is settled instead (resolveGone) and the decision recorded.
func (a *app) resolveConflict(ctx context.Context, s store.Store, r store.ResolveRequest) (store.Attempt, error) {
	st, err := s.Slot(ctx, r.Task, r.Slot)
	if err != nil || st.Last == nil {
		return store.Attempt{}, usage("task %s slot %q is not waiting for review: nothing was recorded (see once history %s)", r.Task, r.Slot, shell.Flag("task", r.Task))
	}
	l := st.Last
	switch {
	case l.State == store.Running:
		return a.resolveGone(ctx, s, r, l)
	case l.Resolution != nil:
		return store.Attempt{}, usage("task %s slot %q: attempt %d was already resolved as %s by %s: nothing was recorded", r.Task, r.Slot, l.Number, l.Resolution.As, cell(l.Resolution.By))
	}
	return store.Attempt{}, usage("task %s slot %q: attempt %d %s, so the slot is not waiting for review: nothing was recorded", r.Task, r.Slot, l.Number, l.State)
}

// whoami is who decides when --by is not given: user@host, alice(root)@host under sudo (who.Decider).
func whoami() string { return who.Decider() }

func (a *app) reportCmd() *cobra.Command {
	var records int64
	var progress, checkpoint, note string
	c := &cobra.Command{
		Use:   "report [--records N] [--progress DONE/TOTAL] [--checkpoint VALUE] [--note TEXT]",
		Short: "From inside COMMAND: attach figures, progress, a checkpoint or a note to the current attempt",
		Long: `From inside a command run by once run: attach figures to the current attempt, shown by once history.
A checkpoint is handed to the slot's next attempt as ONCE_CHECKPOINT. Outside a run it exits 64.`,
		Example: `  once report --records 1200 --progress 1200/3000 --checkpoint flow-1200`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			runID, tok := os.Getenv("ONCE_RUN_ID"), os.Getenv("ONCE_FENCING_TOKEN")
			if runID == "" || tok == "" || os.Getenv("ONCE_STORE") == "" {
				return usage("once report works only inside a command run by once run (ONCE_RUN_ID, ONCE_FENCING_TOKEN and ONCE_STORE are not set)")
			}
			token, err := strconv.ParseInt(tok, 10, 64)
			if err != nil {
				return usage("ONCE_FENCING_TOKEN %q is not an integer", tok)
			}
			var r store.Report
			if c.Flags().Changed("records") {
				if records < 0 {
					return usage("--records %d is negative", records)
				}
				if records > store.MaxNumber {
					// Bad input, not a store that did not record it (1): every store keeps up to 2^53-1.
					return usage("--records %d is out of range: give 0 to %d", records, int64(store.MaxNumber))
				}
				r.Records = &records
			}
			if progress != "" {
				if err := checkProgress(progress); err != nil {
					return err
				}
				r.Progress = progress
			}
			if err := store.CheckText("--checkpoint", checkpoint, store.MaxCheckpointLen); err != nil {
				return err
			}
			if err := store.CheckText("--note", note, store.MaxNoteLen); err != nil {
				return err
			}
			r.Checkpoint, r.Note = checkpoint, note
			if r == (store.Report{}) {
				return usage("nothing to report: give --records, --progress, --checkpoint or --note")
			}
			if a.storeFlag == "" {
				a.storeFlag = os.Getenv("ONCE_STORE")
			}
			s, _, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.Report(c.Context(), runID, token, r); err != nil {
				return exit(1, "report for run %s not recorded: %v", runID, err)
			}
			return nil
		},
	}
	c.Flags().Int64Var(&records, "records", 0, "records processed so far (replaces the count)")
	c.Flags().StringVar(&progress, "progress", "", "DONE/TOTAL")
	c.Flags().StringVar(&checkpoint, "checkpoint", "", "a value handed to the slot's next attempt as ONCE_CHECKPOINT")
	c.Flags().StringVar(&note, "note", "", "a note kept with the attempt")
	return c
}

// Version, Commit and Date are stamped at build time by the release build (make release, release/):
//
//	-ldflags "-X github.com/once-run/once/internal/cli.Version=v1.2.3
//	          -X github.com/once-run/once/internal/cli.Commit=<40 hex>
//	          -X github.com/once-run/once/internal/cli.Date=2026-12-03T06:13:35Z"
//
// Date is the commit's time, not the build's, so that two builds of one commit are the same bytes.
// Unstamped, they come from the binary's build info (a go build in a clone records the commit).
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// version is once's version: Version, else the module's, else "devel".
func version() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "" {
		v = bi.Main.Version
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return v
}

// buildInfo is what once version prints.
type buildInfo struct {
	Version string   `json:"version"`
	Go      string   `json:"go"`
	Commit  string   `json:"commit"` // "" when unknown (go install from the module proxy)
	Date    string   `json:"date"`   // the commit's time, RFC 3339; "" when unknown
	Stores  []string `json:"stores"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version(), Commit: Commit, Date: Date, Stores: store.Schemes()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Go = bi.GoVersion
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && b.Commit == "":
			b.Commit = s.Value
		case s.Key == "vcs.time" && b.Date == "":
			b.Date = s.Value
		}
	}
	return b
}

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, the Go version, the commit and its date, and the stores compiled in",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			b := readBuildInfo()
			if asJSON {
				return writeJSON(a.stdout, b)
			}
			fmt.Fprintf(a.stdout, "once %s (%s)\nstores: %s\ncommit: %s\ndate: %s\n",
				b.Version, b.Go, strings.Join(b.Stores, ", "), dash(b.Commit), dash(b.Date))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"version","go","commit","date","stores":[…]}`)
	return c
}

// recordedSlot reports whether task has an attempt in slot sl. A slot that --slot refuses as a name
// (slot.CheckValue: a '/', over 200 bytes, not in Unicode NFC) is still one an older once recorded
// (its library took any value, its command any value in NFD): once status shows it waiting for
// review with the commands that decide it, and they must work. A value the store cannot even look
// up is not recorded.
func recordedSlot(ctx context.Context, s store.Store, task, sl string) bool {
	st, err := s.Slot(ctx, task, sl)
	return err == nil && st.Last != nil
}

// checkProgress validates report --progress: DONE/TOTAL, whole decimal numbers, DONE ≤ TOTAL.
func checkProgress(progress string) error {
	d, t, ok := strings.Cut(progress, "/")
	dn, err1 := strconv.ParseUint(d, 10, 63)
	tn, err2 := strconv.ParseUint(t, 10, 63)
	if !ok || err1 != nil || err2 != nil || dn > tn {
		return usage("--progress %q: give DONE/TOTAL with whole numbers, DONE ≤ TOTAL, e.g. 1200/3000", progress)
	}
	// Leading zeros parse: held to the stores' limit here, or the store refuses the report (exit 1).
	return store.CheckText("--progress", progress, store.MaxProgressLen)
}
