package once_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/slot"
)

// An @every slot is one instant on every host: it is written in UTC whatever the zone, and a slot
// an older once recorded under its zone's spelling (the same instant) is not run again under the
// new one. Two hosts in different zones ran the same @every slot twice, once under each name.
func TestEverySlotRecordedUnderItsOldSpelling(t *testing.T) {
	s, _ := newStore(t)
	shanghai, err := slot.New("", "@every 1h", "", "Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	utc, _ := slot.New("", "@every 1h", "", "UTC")
	now := time.Date(2026, 12, 6, 2, 30, 0, 0, time.UTC)
	if a, b := shanghai.At(now), utc.At(now); a != b || a != "2026-12-06T02:00:00+00:00" {
		t.Fatalf("@every 1h at %s: %q in Asia/Shanghai, %q in UTC; want both 2026-12-06T02:00:00+00:00", now, a, b)
	}
	old := shanghai.Aliases(shanghai.At(now))
	if !slices.Equal(old, []string{"2026-12-06T10:00:00+08:00"}) {
		t.Fatalf("aliases %v, want the Asia/Shanghai spelling", old)
	}
	if a := utc.Aliases(utc.At(now)); a != nil {
		t.Fatalf("UTC's aliases %v, want none", a)
	}
	cron, _ := slot.New("", "0 * * * *", "", "Asia/Shanghai")
	if a := cron.Aliases(cron.At(now)); a != nil {
		t.Fatalf("a cron schedule's aliases %v, want none (its zone is part of it)", a)
	}

	// The slot ran under its old name (an older once, in Asia/Shanghai).
	o := once.Options{Store: s, Task: "hourly", Slot: old[0], TTL: time.Minute, LockDir: t.TempDir()}
	if r := do(t, o, ok); r.Decision != once.Ran {
		t.Fatalf("old spelling: %s", r.Decision)
	}
	// This once, in any zone: the new name is untried, its alias is done.
	o.Slot, o.SlotAliases = shanghai.At(now), shanghai.Aliases
	ran := false
	r := do(t, o, func(context.Context, *once.Run) error { ran = true; return nil })
	if r.Decision != once.Skipped || ran || !strings.Contains(r.Reason, old[0]) {
		t.Fatalf("new spelling: %s (%s), ran %v; want skipped, naming the old slot", r.Decision, r.Reason, ran)
	}
	// A slot whose old name failed and waits for review waits here too.
	o2 := once.Options{Store: s, Task: "hourly2", Slot: old[0], TTL: time.Minute, LockDir: t.TempDir(), MaxAttempts: 1}
	if r := do(t, o2, func(context.Context, *once.Run) error { return errors.New("boom") }); r.Decision != once.Ran {
		t.Fatalf("old spelling: %s", r.Decision)
	}
	o2.Slot, o2.SlotAliases = shanghai.At(now), shanghai.Aliases
	if r := do(t, o2, func(context.Context, *once.Run) error { ran = true; return nil }); r.Decision != once.Review || ran {
		t.Fatalf("new spelling of a slot waiting for review: %s (%s), ran %v", r.Decision, r.Reason, ran)
	}
	// A slot untried under both names runs, under the new one.
	o.Task = "fresh"
	if r := do(t, o, ok); r.Decision != once.Ran || r.Attempt.Slot != "2026-12-06T02:00:00+00:00" {
		t.Fatalf("untried: %s %+v", r.Decision, r.Attempt)
	}
	if st, _ := s.Slot(context.Background(), "fresh", old[0]); st.Last != nil {
		t.Fatalf("recorded under the old name too: %+v", st.Last)
	}
}
