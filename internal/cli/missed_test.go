package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// missedLedger answers History with its entries of the query's Kind, newest first, and Slot with
// the slots in ran as run; the rest of store.Store is not called.
type missedLedger struct {
	store.Store
	hist  []store.Entry // newest first
	ran   map[string]bool
	reads int
}

func (l *missedLedger) History(_ context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	l.reads++
	var out []store.Entry
	for _, e := range l.hist {
		if q.Selects(e.State) && (q.Limit == 0 || len(out) < q.Limit) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (l *missedLedger) Slot(_ context.Context, task, slot string) (store.SlotState, error) {
	st := store.SlotState{Task: task, Slot: slot}
	if l.ran[task+"/"+slot] {
		st.Last = &store.Attempt{Task: task, Slot: slot, Number: 1, State: store.Succeeded}
	}
	return st, nil
}

// missedEvents is n missed events of task, one an hour back from now, each of the slot that fired
// an hour before it was recorded: slotAt(now, i) for the i-th newest.
func missedEvents(task string, n int, now time.Time) []store.Entry {
	var es []store.Entry
	for i := range n {
		es = append(es, store.Entry{Attempt: store.Attempt{Task: task, Slot: slotAt(now, i), State: store.Missed,
			StartedAt: now.Add(-time.Duration(i) * time.Hour), Note: fmt.Sprint("note ", i)}})
	}
	return es
}

func slotAt(now time.Time, i int) string {
	return now.Add(-time.Duration(i+1) * time.Hour).Format(time.RFC3339)
}

// TestStatusMissed: status shows the newest missed events of the last 7 days, at most 20, and says
// when there may be more.
func TestStatusMissed(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		n, want int
		more    bool
	}{{0, 0, false}, {3, 3, false}, {20, 20, true}, {30, 20, true}, {24 * 7, 20, true}} {
		l := &missedLedger{hist: missedEvents("t", c.n, now)}
		es, more, err := recentMissed(context.Background(), l, now)
		if err != nil || es == nil || len(es) != c.want || more != c.more || l.reads != 1 {
			t.Errorf("%d missed: %d shown (more %v), %v, %d reads; want %d (more %v), one read", c.n, len(es), more, err, l.reads, c.want, c.more)
		}
	}
	// Older than 7 days: not shown.
	old := missedEvents("t", 3, now.Add(-8*24*time.Hour))
	l := &missedLedger{hist: append(missedEvents("t", 2, now), old...)}
	if es, more, _ := recentMissed(context.Background(), l, now); len(es) != 2 || more {
		t.Errorf("2 recent and 3 old missed events: %d shown (more %v)", len(es), more)
	}
	var out bytes.Buffer
	a := &app{stdout: &out}
	if err := a.printMissed(missedEvents("t", 20, now), nil, true); err != nil || !strings.Contains(out.String(), "MISSED IN THE LAST 7 DAYS (the newest 20; all: once history --kind missed)") {
		t.Errorf("status with more missed events than it shows: %v\n%s", err, out.String())
	}
}

// TestStatusMissedRunSince: a slot missed and then run (a backfill) shows its attempt under RUN
// SINCE, and the backfill advice is printed only while a slot shown was not run since.
func TestStatusMissedRunSince(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	es := missedEvents("t", 2, now)
	l := &missedLedger{hist: es, ran: map[string]bool{"t/" + slotAt(now, 0): true}}
	ran := ranSince(context.Background(), l, es)
	var out bytes.Buffer
	a := &app{stdout: &out}
	if err := a.printMissed(es, ran, false); err != nil || !strings.Contains(out.String(), "attempt 1, succeeded") ||
		!strings.Contains(out.String(), "RUN SINCE") || !strings.Contains(out.String(), "the slots not run since") {
		t.Errorf("one of two missed slots run since: %v\n%s", err, out.String())
	}
	l.ran["t/"+slotAt(now, 1)] = true
	out.Reset()
	if err := a.printMissed(es, ranSince(context.Background(), l, es), false); err != nil || strings.Contains(out.String(), "backfill") {
		t.Errorf("both run since: %v, still advises a backfill:\n%s", err, out.String())
	}
}

// TestDoctorMissed: doctor warns per task about the slots missed in the last 30 days and not run
// since (each slot once), from at most 100 events, with the range to backfill; a slot run since,
// and one missed long ago, is no warning.
func TestDoctorMissed(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	hist := append(missedEvents("a", 3, now), missedEvents("b", 2, now)...)
	// Slot 1 of task a missed again, recorded before the others (by another node).
	hist = append(hist, store.Entry{Attempt: store.Attempt{Task: "a", Slot: slotAt(now, 1), State: store.Missed, StartedAt: now.Add(-10 * time.Hour)}})
	hist = append(hist, store.Entry{Attempt: store.Attempt{Task: "b", Slot: slotAt(now, 1), State: store.Busy, StartedAt: now}})
	hist = append(hist, missedEvents("old", 2, now.Add(-31*24*time.Hour))...)
	l := &missedLedger{hist: hist, ran: map[string]bool{"b/" + slotAt(now, 0): true, "b/" + slotAt(now, 1): true}}
	sortHistory(hist)
	r := &report{}
	a := &app{}
	a.checkMissed(context.Background(), l, "sqlite:///x", now, r)
	want := fmt.Sprintf("3 slots missed in the last 30 days and not run since (%s … %s)", slotAt(now, 2), slotAt(now, 0))
	if len(r.Findings) != 1 || r.Findings[0].Level != store.LevelWarn || r.Findings[0].Task != "a" ||
		!strings.Contains(r.Findings[0].Message, want) || !strings.Contains(r.Findings[0].Message, "(the newest note: note 0)") ||
		!strings.Contains(r.Findings[0].Message, fmt.Sprintf("once backfill --task a --from %s --to %s", slotAt(now, 2), slotAt(now, 0))) {
		t.Fatalf("findings: %+v; want %q", r.Findings, want)
	}
	// Every one of task b's run since: OK, saying so.
	r = &report{}
	a.checkMissed(context.Background(), &missedLedger{hist: missedEvents("b", 2, now), ran: l.ran}, "sqlite:///x", now, r)
	if len(r.Findings) != 1 || r.Findings[0].Level != store.LevelOK || !strings.Contains(r.Findings[0].Message, "2 slots missed in the last 30 days, each run since") {
		t.Fatalf("findings: %+v", r.Findings)
	}
	// More than doctor reads: at least.
	r = &report{}
	big := &missedLedger{hist: missedEvents("c", 500, now)}
	a.checkMissed(context.Background(), big, "sqlite:///x", now, r)
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0].Message, "at least 100 slots missed") || big.reads != 1 {
		t.Fatalf("findings: %+v (%d reads)", r.Findings, big.reads)
	}
}

// sortHistory puts es newest first, as History gives them.
func sortHistory(es []store.Entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].StartedAt.After(es[j-1].StartedAt); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}
