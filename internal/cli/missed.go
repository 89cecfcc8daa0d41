package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/store"
)

// Missed slots: a scheduler (once daemon) records a missed event for a slot whose fire time passed
// while no node ran it, outside the job's catch-up window. status shows the newest of the last
// week, doctor warns about those of the last month that have not run since. Both read a bounded
// page of missed events (HistoryQuery.Kind: an index walk on the SQL stores), whatever the size
// of the history.
const (
	statusMissed    = 20                  // missed events status reads
	statusMissedAge = 7 * 24 * time.Hour  // and how far back it shows them
	doctorMissed    = 100                 // missed events doctor reads
	doctorMissedAge = 30 * 24 * time.Hour // and how far back it counts them
)

// newMissed reads the newest missed events, at most limit, and keeps those recorded after since:
// the first ones, history being newest first. full says the read was cut by limit with every
// event still after since, so that there may be more.
func newMissed(ctx context.Context, s store.Store, limit int, since time.Time) (es []store.Entry, full bool, err error) {
	es, err = s.History(ctx, store.HistoryQuery{Kind: store.Missed, Limit: limit})
	if err != nil {
		return nil, false, err
	}
	n := 0
	for n < len(es) && es[n].StartedAt.After(since) {
		n++
	}
	return es[:n], n == limit, nil
}

// recentMissed is what status shows: the newest missed events of the last statusMissedAge
// before now, never nil (--json always has "missed": [] or more).
func recentMissed(ctx context.Context, s store.Store, now time.Time) ([]store.Entry, bool, error) {
	es, more, err := newMissed(ctx, s, statusMissed, now.Add(-statusMissedAge))
	if es == nil {
		es = []store.Entry{}
	}
	return es, more, err
}

// ranSince reads, for each missed event (at most statusMissed), the slot's last attempt: a slot
// missed and then run (a backfill, a late run) is not one "nothing ran" (doctor reads the same).
// A slot that cannot be read is nil, shown as not run.
func ranSince(ctx context.Context, s store.Store, missed []store.Entry) []*store.Attempt {
	out := make([]*store.Attempt, len(missed))
	for i, e := range missed {
		if st, err := s.Slot(ctx, e.Task, e.Slot); err == nil {
			out[i] = st.Last
		}
	}
	return out
}

// printMissed writes status's MISSED section, when there is a missed slot to show; ran is
// ranSince's, by event.
func (a *app) printMissed(missed []store.Entry, ran []*store.Attempt, more bool) error {
	if len(missed) == 0 {
		return nil
	}
	count := fmt.Sprint(len(missed))
	if more {
		count = fmt.Sprintf("the newest %d; all: once history --kind missed", len(missed))
	}
	fmt.Fprintf(a.stdout, "\nMISSED IN THE LAST 7 DAYS (%s)\n", count)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSLOT\tMISSED AT\tHOLDER\tRUN SINCE\tNOTE")
	unrun := 0
	for i, e := range missed {
		since := "no"
		if i < len(ran) && ran[i] != nil {
			since = fmt.Sprintf("attempt %d, %s", ran[i].Number, ran[i].State)
		} else {
			unrun++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Task), cell(dash(e.Slot)), fmtTime(e.StartedAt), cell(dash(e.Holder)), since, oneLineText(e.Note))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unrun > 0 {
		fmt.Fprintln(a.stdout, "the slots not run since (RUN SINCE no): to run them: once backfill --task TASK --from SLOT --to SLOT, with the job's --per or --schedule and -- COMMAND (once doctor prints the line per task)")
	}
	return nil
}

// missedTask is what doctor tells of one task's missed slots.
type missedTask struct {
	slots      []string // distinct
	seen       map[string]bool
	ran        int    // slots missed, then run (a backfill, a late run)
	newestNote string // the note of the newest missed event
}

// checkMissed adds doctor's missed findings: per task, the slots missed in the last
// doctorMissedAge before now (the store's time) that have not run since (warn, with the backfill
// to run them), from at most doctorMissed events and one Slot read per slot they name.
func (a *app) checkMissed(ctx context.Context, s store.Store, dsn string, now time.Time, r *report) {
	es, full, err := newMissed(ctx, s, doctorMissed, now.Add(-doctorMissedAge))
	if err != nil {
		r.add("missed", store.LevelFail, "", "cannot read missed events: %v", err)
		return
	}
	tasks := map[string]*missedTask{}
	for i := len(es) - 1; i >= 0; i-- { // oldest first
		e := es[i]
		m := tasks[e.Task]
		if m == nil {
			m = &missedTask{seen: map[string]bool{}}
			tasks[e.Task] = m
		}
		m.newestNote = e.Note
		if m.seen[e.Slot] {
			continue
		}
		m.seen[e.Slot] = true
		if st, err := s.Slot(ctx, e.Task, e.Slot); err == nil && st.Last != nil {
			m.ran++ // it has run since: a person backfilled it, or a node ran it late
			continue
		}
		m.slots = append(m.slots, e.Slot)
	}
	atLeast := ""
	if full {
		atLeast = "at least "
	}
	warned := 0
	for _, task := range sortedKeys(tasks) {
		m := tasks[task]
		if len(m.slots) == 0 {
			continue
		}
		warned++
		sortSlots(m.slots)
		first, last := m.slots[0], m.slots[len(m.slots)-1]
		span := first
		if len(m.slots) > 1 {
			span = first + " … " + last
		}
		note := ""
		if m.newestNote != "" {
			note = " (the newest note: " + m.newestNote + ")"
		}
		them, their := "them", "their"
		if len(m.slots) == 1 {
			them, their = "it", "its"
		}
		r.add("missed", store.LevelWarn, task, "%s%s missed in the last 30 days and not run since (%s): no node ran %s at %s fire time, and that was outside the catch-up window%s; to run %s: %s, with the job's --per or --schedule (and --tz) and -- COMMAND; to leave %s unrun, nothing: this warning ends 30 days after a slot was missed",
			atLeast, slots(len(m.slots)), span, them, their, note, them, a.backfillCommand(dsn, task, first, last), them)
	}
	if warned == 0 {
		ran := 0
		for _, m := range tasks {
			ran += m.ran
		}
		msg := "no slot missed in the last 30 days"
		if ran > 0 {
			msg = slots(ran) + " missed in the last 30 days, each run since"
		}
		r.add("missed", store.LevelOK, "", "%s (read the newest %d missed events)", msg, doctorMissed)
	}
}

// sortSlots puts slot values in time order: fire times (RFC 3339, --schedule) by the instant, the
// rest (2026-11-29, 2026-11-29T02, 2026-W48, 2026-11) by their text, which is their order.
func sortSlots(ss []string) {
	sort.SliceStable(ss, func(i, j int) bool {
		a, errA := time.Parse(time.RFC3339, ss[i])
		b, errB := time.Parse(time.RFC3339, ss[j])
		if errA == nil && errB == nil {
			return a.Before(b)
		}
		return ss[i] < ss[j]
	})
}

// slots is "1 slot" or "N slots".
func slots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}

// backfillCommand is the start of the once backfill line that runs task's slots from first to
// last; the job's schedule and command are the person's to add.
func (a *app) backfillCommand(dsn, task, first, last string) string {
	return strings.Join([]string{"once backfill", shell.Flag("task", task), "--from", shellQuote(first), "--to", shellQuote(last)}, " ") + a.storeArg(dsn)
}
