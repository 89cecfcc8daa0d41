package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// launchAll starts every args at the same moment (as cron does at midnight) and returns the results in
// order.
func (e *env) launchAll(args [][]string) []result {
	e.t.Helper()
	out := make([]result, len(args))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range args {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = e.run(a...)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// The midnight burst: many different jobs of one host start in the same second on the embedded
// store with its default settings. Every one runs; none is turned away because the ledger was busy
// (69: it used to be 16–20 % of 200, SQLite's busy handler polling while the lock sat idle).
func TestBurstOfDifferentTasksAllRun(t *testing.T) {
	const n = 200
	e := newEnv(t).atVolume()
	if r := e.run("run", "--task", "warm", "--", "true"); r.code != 0 { // the store exists, as on a real host
		t.Fatalf("warm-up: %d %s", r.code, r.stderr)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	awayFromMidnight(t)
	args := make([][]string, n)
	for i := range args {
		args[i] = []string{"run", "--task", fmt.Sprintf("nightly-%d", i), "--per", "day", "--", "sh", "-c", "echo x >> " + marker}
	}
	began := time.Now()
	rs := e.launchAll(args)
	t.Logf("%d launches in %s", n, time.Since(began).Round(time.Millisecond))
	for i, r := range rs {
		if r.code != 0 {
			t.Errorf("launch %d: exit %d after %s: %s", i, r.code, r.dur.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		}
	}
	if got := countLines(t, marker); got != n {
		t.Fatalf("%d commands ran, want %d", got, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		h := e.history(fmt.Sprintf("nightly-%d", i))
		if len(h) != 1 || h[0]["state"] != "succeeded" {
			t.Fatalf("history of nightly-%d: %v", i, h)
		}
	}
	// And again: every slot is done, so each launch skips.
	for i, r := range e.launchAll(args[:20]) {
		if r.code != 0 {
			t.Errorf("second launch %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
	if got := countLines(t, marker); got != n {
		t.Fatalf("%d commands ran after the second burst, want %d", got, n)
	}
}

// The contended launch: many launches of one task at once. One runs; every other finds it busy on
// this machine (its local lock), which costs it no durable write, yet its busy event is in history.
func TestContendedLaunchBusyEventsInHistory(t *testing.T) {
	const n = 40
	e := newEnv(t).atVolume()
	marker := filepath.Join(t.TempDir(), "ran")
	args := make([][]string, n)
	for i := range args {
		args[i] = []string{"run", "--task", "contended", "--", "sh", "-c", "echo x >> " + marker + "; sleep 4"}
	}
	// A launch with a bad store DSN that finds the task busy is still bad input (64), not busy.
	badc := make(chan result, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		badc <- e.run("run", "--store", "sqlite:///tmp/x.db?bogus=1", "--task", "contended", "--", "true")
	}()
	rs := e.launchAll(args)
	bad := <-badc
	ran, busy := 0, 0
	for i, r := range rs {
		switch r.code {
		case 0:
			ran++
		case 75:
			busy++
		default:
			t.Errorf("launch %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
	if got := countLines(t, marker); got != 1 || ran != 1 || busy != n-1 {
		t.Fatalf("executions %d, ran %d, busy %d; want 1, 1, %d", got, ran, busy, n-1)
	}
	if bad.code != 64 || !strings.Contains(bad.stderr, "bogus") {
		t.Errorf("a busy launch with a bad DSN: exit %d %q, want 64 naming the parameter", bad.code, bad.stderr)
	}
	h := e.history("contended")
	events, runs := 0, map[string]bool{}
	for _, x := range h {
		if x["state"] == "busy" {
			events++
			runs[fmt.Sprint(x["run_id"])] = true
			if !strings.Contains(fmt.Sprint(x["note"]), "another once on this machine") {
				t.Errorf("busy event %v: want the local lock's reason", x)
			}
		}
	}
	if events != n-1 || len(runs) != n-1 {
		t.Fatalf("history shows %d busy events (%d runs), want %d: %v", events, len(runs), n-1, h)
	}
}
