package cli

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/once-run/once"
	"github.com/once-run/once/job"
	"github.com/once-run/once/slot"
	"github.com/once-run/once/store"
)

type backfillFlags struct {
	runFlags
	from, to  string
	dryRun    bool
	keepGoing bool
	max       int
}

func (a *app) backfillCmd() *cobra.Command {
	f := &backfillFlags{}
	c := &cobra.Command{
		Use:   "backfill --task NAME (--per P | --schedule CRON) --from A --to B [flags] -- COMMAND [ARG...]",
		Short: "Run COMMAND for every slot from A to B (inclusive) that has not succeeded, oldest first",
		Long: `Run COMMAND once for every slot from --from to --to, inclusive, that has not succeeded, oldest first,
each through the same guard as once run (its own ONCE_SLOT, attempt numbers, --on-unknown and
--max-attempts), all under one lease: the task's regular runs are busy meanwhile.

--from and --to are slot values (2026-11-29, 2026-11-29T02, 2026-W48, 2026-11, or a fire time for
--schedule), or dates (YYYY-MM-DD) and RFC 3339 times: --from a date starts with the slot that
contains its midnight (for --schedule: the first fire time at or after it), --to a date ends with the
last slot that starts on that day.

It stops at the first slot that fails or needs review, unless --keep-going. A reversed range, or one
of more than --max slots, is refused (64) and nothing runs. --dry-run lists the slots with their
state and what a backfill would do, and runs nothing.

Exit status: 0 when every slot succeeded or was already done; else the exit code of the first slot
that failed, 76 when a slot needs review, 75 when the task is running elsewhere.`,
		Example: `  # the nightly sync missed last week: see, then run, each missing day, oldest first
  once backfill --task sync-orders --per day --from 2026-11-20 --to 2026-11-26 --dry-run -- /usr/local/bin/sync-orders
  once backfill --task sync-orders --per day --from 2026-11-20 --to 2026-11-26 -- /usr/local/bin/sync-orders`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usage("put the command after --: once backfill --task %s [flags] -- %s", orDefault(f.task, "NAME"), args[0])
			}
			return a.backfill(c.Context(), f, args)
		},
	}
	fl := c.Flags()
	addRunFlags(fl, &f.runFlags, false)
	fl.StringVar(&f.from, "from", "", "first slot (slot value, date or RFC 3339 time), inclusive (required)")
	fl.StringVar(&f.to, "to", "", "last slot (slot value, date or RFC 3339 time), inclusive (required)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list the slots with their state and what would happen; run nothing")
	fl.BoolVar(&f.keepGoing, "keep-going", false, "go on after a slot fails or needs review")
	fl.IntVar(&f.max, "max", 1000, "refuse (64) a range of more than this many slots")
	return c
}

// parseBound turns --from or --to into an instant for spec.Range: an exact slot value is its
// start; a date YYYY-MM-DD or an RFC 3339 time t is, for --from, the start of the --per period
// containing t (for --schedule, t itself), and for --to, t (a date: the end of that day).
func parseBound(spec slot.Spec, value string, isTo bool) (time.Time, error) {
	flag := "--from"
	if isTo {
		flag = "--to"
	}
	if value == "" {
		return time.Time{}, usage("%s is required: give a slot value or a date such as 2026-11-29", flag)
	}
	if t, err := spec.Parse(value); err == nil {
		return t, nil
	}
	var t time.Time
	date := false
	if d, err := time.ParseInLocation("2006-01-02", value, spec.Location()); err == nil {
		t, date = d, true
	} else if x, err := time.Parse(time.RFC3339, value); err == nil {
		t = x
	} else {
		return time.Time{}, usage("%s %q: not a slot of %s, a date (2026-11-29) or an RFC 3339 time", flag, value, spec)
	}
	if isTo {
		if date {
			y, m, d := t.Date()
			t = time.Date(y, m, d+1, 0, 0, 0, 0, spec.Location()).Add(-time.Nanosecond)
		}
		return t, nil
	}
	if spec.Kind() == slot.KindPer {
		s, err := spec.Start(t)
		if err != nil {
			return time.Time{}, usage("%s %q: %v", flag, value, err)
		}
		return s, nil
	}
	return t, nil
}

// slotRange is the slots of a backfill, oldest first. They are produced one at a time and never
// listed, so memory is the same whatever --max is; n (at most --max) and last are counted up
// front, so that a range over --max is refused before anything runs.
type slotRange struct {
	spec     slot.Spec
	from, to time.Time
	n        int
	last     string
}

// all yields the slots whose start lies in [from, to], oldest first.
func (r *slotRange) all() iter.Seq[slot.Slot] {
	return func(yield func(slot.Slot) bool) {
		for s := r.spec.Next(r.from.Add(-time.Nanosecond)); s.Value != "" && !s.Start.After(r.to); s = r.spec.Next(s.Start) {
			if !yield(s) {
				return
			}
		}
	}
}

// values yields the slot values.
func (r *slotRange) values() iter.Seq[string] {
	return func(yield func(string) bool) {
		for s := range r.all() {
			if !yield(s.Value) {
				return
			}
		}
	}
}

// backfillSlots checks the range and counts its slots. A slot that has not begun at now is refused:
// run ahead of time, it would be done when it comes, and its own run would skip it (a typo'd year
// in --to lost the real runs of every slot up to it).
func backfillSlots(f *backfillFlags, spec slot.Spec, now time.Time) (*slotRange, error) {
	if k := spec.Kind(); k != slot.KindPer && k != slot.KindSchedule {
		return nil, usage("backfill needs --per or --schedule: give the task's period or schedule")
	}
	if f.max < 1 {
		return nil, usage("--max %d: give 1 or more", f.max)
	}
	from, err := parseBound(spec, f.from, false)
	if err != nil {
		return nil, err
	}
	to, err := parseBound(spec, f.to, true)
	if err != nil {
		return nil, err
	}
	if to.Before(from) {
		return nil, usage("--from %s is after --to %s: the range is reversed", f.from, f.to)
	}
	if next := spec.Next(now); next.Value != "" && !next.Start.After(to) {
		cur := "the current slot"
		if c := spec.Prev(now); c.Value != "" {
			cur = c.Value + ", the current slot"
		}
		return nil, usage("--to %s reaches slot %s, which has not begun: run ahead of time it would be skipped as done when it comes; give a --to up to %s",
			f.to, next.Value, cur)
	}
	r := &slotRange{spec: spec, from: from, to: to}
	for s := range r.all() {
		if r.n == f.max {
			return nil, usage("range %s to %s holds more than %d slots of %s: narrow --from/--to, or raise --max",
				from.Format(time.RFC3339), to.Format(time.RFC3339), f.max, spec)
		}
		r.n++
		r.last = s.Value
	}
	return r, nil
}

func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(file.Fd()), ioctlGetTermios)
	return err == nil
}

func (a *app) backfill(ctx context.Context, f *backfillFlags, args []string) error {
	rn, err := a.validate(&f.runFlags, args, "backfill")
	if err != nil {
		return err
	}
	slots, err := backfillSlots(f, rn.spec, time.Now())
	if err != nil {
		return err
	}
	ctx, stop := rn.job.HandleSignals(a.traceParent(ctx))
	defer stop()
	defer rn.job.Close()
	job.Adopt(rn.log)
	open := a.open
	if f.dryRun {
		open = a.openToRead // it lists, runs nothing
	}
	s, dsn, err := open(ctx)
	if err != nil {
		return rn.interrupted(ctx, err)
	}
	defer s.Close()
	rn.dsn = dsn
	if err := checkSlotNames(ctx, s, f.task, rn.spec); err != nil {
		return err
	}
	opts := rn.options(s)
	if f.dryRun {
		return a.backfillPlan(ctx, s, opts, slots)
	}

	tty := isTerminal(a.rawStderr)
	n, done, started := slots.n, 0, time.Time{}
	rn.before = func(run *once.Run) {
		started = time.Now()
		if tty {
			fmt.Fprintf(a.stderr, "once: backfill [%d/%d] %s: running (attempt %d)\n", done+1, n, run.Slot, run.Attempt)
		}
	}
	counts := map[string]int{}
	var firstBad *once.Result
	if n == 0 {
		fmt.Fprintf(a.stderr, "once: backfill of task %s: no slot of %s starts in the range\n", f.task, rn.spec)
		return nil
	}
	err = rn.job.SequenceStream(ctx, opts, slots.values(), slots.last, once.SeqOptions{KeepGoing: f.keepGoing, Quiet: true, OnResult: func(r once.Result) {
		done++
		what := string(r.Decision)
		if r.Decision == once.Ran {
			what = string(r.Attempt.State)
		}
		counts[what]++
		if firstBad == nil && (what == string(store.Failed) || r.Decision == once.Review || r.Decision == once.Busy || r.RecordErr != nil) {
			firstBad = &r
		}
		if tty {
			line := describe(r)
			if r.Decision == once.Ran {
				line += " in " + time.Since(started).Round(time.Millisecond).String()
			} else if r.Decision == once.Skipped {
				line = "already done"
			}
			fmt.Fprintf(a.stderr, "once: backfill [%d/%d] %s: %s\n", done, n, r.Slot, cell(line))
		}
	}})
	left := n - done
	if err == nil || done > 0 {
		a.backfillSummary(f.task, n, left, counts, firstBad)
	}
	if err != nil {
		return rn.notStarted(rn.interrupted(ctx, err))
	}
	return rn.backfillEnd(firstBad, left, dsn)
}

// backfillEnd is a backfill's exit after its summary: that of its first slot that failed, needed
// review or found the task busy (firstBad, nil when none), with the line that says how to go on.
func (rn *runner) backfillEnd(firstBad *once.Result, left int, dsn string) error {
	if firstBad == nil {
		return nil
	}
	if left > 0 && firstBad.Decision != once.Busy {
		more := ", or add --keep-going"
		if rn.job.Signal() != 0 { // --keep-going would not have gone on after a stop signal
			more = ""
		}
		fmt.Fprintf(rn.a.stderr, "once: stopped at slot %s (%s); run the backfill again to resume there%s\n", firstBad.Slot, cell(describe(*firstBad)), more)
	}
	return rn.exitFor(*firstBad, dsn)
}

// checkSlotNames refuses (64) a --schedule backfill whose zone names the task's slots otherwise
// than its ledger does. A schedule's slot value is its fire time with the offset of --tz, and the
// value is the slot's name: a backfill without the job's --tz read every slot as never run and
// ran those that had succeeded again. The task's newest slot that is a fire time of the schedule
// is the naming in use.
func checkSlotNames(ctx context.Context, s store.Store, task string, spec slot.Spec) error {
	if spec.Kind() != slot.KindSchedule {
		return nil // a period's value has no offset
	}
	hist, err := s.History(ctx, store.HistoryQuery{Task: task, Limit: 50})
	if err != nil {
		return err
	}
	for _, e := range hist {
		t, err := spec.Parse(e.Slot)
		if err != nil {
			continue
		}
		if mine := spec.At(t); mine != e.Slot {
			return usage("task %s names its slots in another zone: its slot %s is %s in %s; give the job's --tz, or the backfill would run slots that succeeded again under new names",
				task, e.Slot, mine, spec.Location())
		}
		return nil
	}
	return nil
}

// backfillSummary prints the line that ends a backfill: what became of its n slots, or, when the
// task was busy, that none was begun and why (the counts left that result out, and off a terminal
// nothing said it was busy).
func (a *app) backfillSummary(task string, n, left int, counts map[string]int, firstBad *once.Result) {
	if firstBad != nil && firstBad.Decision == once.Busy && left == n-1 {
		fmt.Fprintf(a.stderr, "once: backfill of task %s: %d slots, none begun: %s\n", task, n, cell(describe(*firstBad)))
		return
	}
	fmt.Fprintf(a.stderr, "once: backfill of task %s: %d slots: %d ran (%d succeeded, %d failed), %d already done, %d need review, %d not reached\n",
		task, n, counts["succeeded"]+counts["failed"], counts["succeeded"], counts["failed"], counts["skipped"], counts["review"], left)
}

// backfillPlan prints each slot, its state and what a backfill would do; it runs nothing. The
// slots are read a block at a time (store.ReadSlots: one read per block where the store is a
// store.SlotsReader, not one per slot) and their rows written and aligned together, so memory does
// not grow with the range and its cost per slot is flat.
func (a *app) backfillPlan(ctx context.Context, s store.Store, opts once.Options, slots *slotRange) error {
	// tabwriter writes a row a cell and a pad at a time: buffered, a block is a few writes, not
	// eight system calls a row.
	out := bufio.NewWriterSize(a.stdout, 64<<10)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATE\tATTEMPTS\tACTION")
	plan := map[once.Decision]int{}
	if opts.Holder == "" {
		opts.Holder = once.DefaultHolder() // once, not by Decide for every slot (a uname and more each)
	}
	block := make([]string, 0, store.MaxSlotsRead)
	for v := range slots.values() {
		if block = append(block, v); len(block) == cap(block) {
			if err := planBlock(ctx, tw, s, opts, block, plan); err != nil {
				return err
			}
			if err := out.Flush(); err != nil { // as it goes, a block at a time
				return err
			}
			block = block[:0]
		}
	}
	if err := planBlock(ctx, tw, s, opts, block, plan); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%d slots: %d to run, %d done, %d need review (dry run: nothing was run)\n",
		slots.n, plan[once.Ran], plan[once.Skipped], plan[once.Review])
	return nil
}

// planBlock reads the states of block, decides each slot as a backfill would and writes its row,
// then flushes tw; plan counts the decisions.
func planBlock(ctx context.Context, tw *tabwriter.Writer, s store.Store, opts once.Options, block []string, plan map[once.Decision]int) error {
	sts, err := store.ReadSlots(ctx, s, opts.Task, block)
	if err != nil {
		return err
	}
	for i, st := range sts {
		o := opts
		o.Slot = block[i]
		d, reason, err := once.Decide(o, st)
		if err != nil {
			return err
		}
		plan[d]++
		state, attempts := "never run", 0
		if st.Last != nil {
			state, attempts = string(st.Last.State), st.Last.Number
			if r := st.Last.Resolution; r != nil {
				state += " (resolved as " + string(r.As) + ")"
			}
		}
		action := "run"
		switch d {
		case once.Skipped:
			action = "skip: " + reason
		case once.Review:
			action = "stop for review: " + reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", block[i], cell(state), attempts, cell(action))
	}
	return tw.Flush()
}
