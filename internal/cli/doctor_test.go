package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// overlaps: two attempts of a task at once are an incident, but for seats' attempts of different
// slots (once run --limit); one slot twice at once is, even when an attempt of another slot that
// runs longer lies between them; and more seats' attempts at once than their limit is.
func TestOverlaps(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(run, sl string, limit, from, to int) store.Entry {
		end := t0.Add(time.Duration(to) * time.Second)
		return store.Entry{Attempt: store.Attempt{Task: "t", Slot: sl, RunID: run, Number: 1, State: store.Succeeded, Limit: limit,
			StartedAt: t0.Add(time.Duration(from) * time.Second), EndedAt: &end}}
	}
	for _, c := range []struct {
		name string
		hist []store.Entry
		want int // overlap findings at LevelFail
	}{
		{"exclusive", []store.Entry{at("a", "s1", 0, 0, 10), at("b", "s2", 0, 5, 15)}, 1},
		{"one after the other", []store.Entry{at("a", "s1", 0, 0, 10), at("b", "s2", 0, 10, 15)}, 0},
		{"seats, two slots", []store.Entry{at("a", "s1", 2, 0, 10), at("b", "s2", 2, 5, 15)}, 0},
		{"seats, one slot, a longer one between", []store.Entry{at("a", "s1", 3, 0, 50), at("b", "s2", 3, 10, 100), at("c", "s1", 3, 40, 45)}, 1},
		{"three seats of two", []store.Entry{at("a", "s1", 2, 0, 50), at("b", "s2", 2, 10, 100), at("c", "s3", 2, 40, 45)}, 1},
		{"an exclusive run among seats", []store.Entry{at("a", "s1", 2, 0, 50), at("x", "s9", 0, 10, 20)}, 1},
		// Seats' attempts recorded before schema 6 carry no limit: a warning, not an incident, in a
		// task with seats; one slot twice at once is still one.
		{"seats before schema 6", []store.Entry{at("a", "s1", 0, 0, 10), at("b", "s2", 0, 5, 15), at("c", "s3", 2, 100, 110)}, 0},
		{"one slot twice before schema 6", []store.Entry{at("a", "s1", 0, 0, 10), at("b", "s1", 0, 5, 15), at("c", "s3", 2, 100, 110)}, 1},
	} {
		r := &report{}
		overlaps(c.hist, t0.Add(time.Hour), r)
		n := 0
		for _, f := range r.Findings {
			if f.Check == "overlap" && f.Level == store.LevelFail {
				n++
				if !strings.HasPrefix(f.Message, "OVERLAP: ") {
					t.Errorf("%s: %q", c.name, f.Message)
				}
			}
		}
		if warned := slices.ContainsFunc(r.Findings, func(f store.Finding) bool { return f.Level == store.LevelWarn }); warned != (c.name == "seats before schema 6") {
			t.Errorf("%s: warned %v: %+v", c.name, warned, r.Findings)
		}
		if n != c.want {
			t.Errorf("%s: %d overlap findings, want %d: %+v", c.name, n, c.want, r.Findings)
		}
	}
}

// slotForms: a slot an older once recorded in NFD ("cafe\u0301") is named (INFO: a new run in it is
// refused, and its NFC form is another slot); recorded beside its NFC form, the work ran in both
// (WARN). ASCII and NFC slots, and one text in two tasks, are not findings.
func TestSlotForms(t *testing.T) {
	e := func(task, sl string) store.Entry { return store.Entry{Attempt: store.Attempt{Task: task, Slot: sl}} }
	r := &report{}
	slotForms([]store.Entry{e("a", "2026-12-01"), e("a", "caf\u00e9"), e("b", "cafe\u0301"), e("b", "cafe\u0301"),
		e("c", "cafe\u0301"), e("c", "caf\u00e9"), e("c", "x"), e("d", "日本"), e("d", "")}, r)
	if len(r.Findings) != 2 {
		t.Fatalf("findings %+v, want 2", r.Findings)
	}
	if f := r.Findings[0]; f.Task != "b" || f.Level != store.LevelInfo || !strings.Contains(f.Message, `slot "cafe\u0301" is not in Unicode NFC`) ||
		!strings.Contains(f.Message, `its NFC form "café" is another slot`) {
		t.Errorf("NFD slot alone: %+v", f)
	}
	if f := r.Findings[1]; f.Task != "c" || f.Level != store.LevelWarn || !strings.Contains(f.Message, `slot "café" was 2 slots, one per encoding ("cafe\u0301", "caf\u00e9"): the work ran in each`) {
		t.Errorf("both forms: %+v", f)
	}
}
