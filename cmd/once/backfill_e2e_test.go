package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A backfill that finds the task running elsewhere says so in its summary line, the one line it
// prints off a terminal: it said "0 ran ..., 0 already done, 0 need review, 4 not reached" of 5
// slots, with exit 75 and no word of why.
func TestBackfillBusySaysSo(t *testing.T) {
	e := newEnv(t)
	began := filepath.Join(t.TempDir(), "began")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hold := e.cmd(ctx, "run", "--task", "bb", "--slot", "hold", "--", "sh", "-c", "touch "+began+"; sleep 3")
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(began); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holding run never began")
		}
	}
	r := e.run("backfill", "--task", "bb", "--per", "day", "--tz", "UTC", "--from", "2026-11-01", "--to", "2026-11-05", "--", "true")
	if r.code != 75 || !strings.Contains(r.stderr, "5 slots, none begun: busy") {
		t.Fatalf("busy backfill: %d, want 75 and the line\n%s", r.code, r.stderr)
	}
}

// A --schedule backfill whose zone names the slots otherwise than the task's ledger (the job's
// --tz left out) is refused: a schedule's slot value carries its offset, and such a backfill
// read every slot as never run and ran the three that had succeeded again.
func TestBackfillScheduleInAnotherZoneRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "slots")
	bf := func(schedule, tz string) result {
		return e.run("backfill", "--task", "bz", "--schedule", schedule, "--tz", tz, "--from", "2026-11-01", "--to", "2026-11-03",
			"--", "sh", "-c", `echo "$ONCE_SLOT" >> `+out)
	}
	if r := bf("30 2 * * *", "Europe/Berlin"); r.code != 0 || len(readLines(t, out)) != 3 {
		t.Fatalf("backfill in Berlin: %d, ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
	// 02:30 in Berlin is 01:30 UTC in November: the same three instants.
	r := bf("30 1 * * *", "UTC")
	if r.code != 64 || !strings.Contains(r.stderr, "give the job's --tz") || len(readLines(t, out)) != 3 {
		t.Fatalf("the same slots in UTC: %d, ran %v, want 64 and nothing run\n%s", r.code, readLines(t, out), r.stderr)
	}
	if r := bf("30 2 * * *", "Europe/Berlin"); r.code != 0 || len(readLines(t, out)) != 3 {
		t.Fatalf("again in Berlin: %d, ran %v\n%s", r.code, readLines(t, out), r.stderr)
	}
}
