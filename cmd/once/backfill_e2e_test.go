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
