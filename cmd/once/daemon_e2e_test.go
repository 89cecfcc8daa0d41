package main

// once daemon through the real binary: fleets of daemon processes sharing each store.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// acrossStores runs fn on every store at once, each as a subtest: the daemon tests mostly wait
// for slots to come, so they run side by side whatever go test's -parallel. The tests that use it
// do not call t.Parallel: a dozen daemons per store at once is load enough for a 2-core machine
// whose other packages measure timings. And what they check is timed: the fleet's job (0.5 s,
// every 2 s, overlap = skip) run alongside the package's parallel tests started a second late and
// took 1.3 s, so the next slot was skipped on four stores at once (docs/testing.md).
func acrossStores(t *testing.T, fn func(t *testing.T, b backend)) {
	var wg sync.WaitGroup
	for _, b := range backends(t) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(b.name, func(t *testing.T) { fn(t, b) })
		}()
	}
	wg.Wait()
}

// daemon is a once daemon process of a test.
type daemon struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
	code int
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.Write(p)
}

func (d *daemon) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// startDaemon starts once daemon on host e as node name, with args after "daemon".
func startDaemon(t *testing.T, e *env, name string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, name: name, done: make(chan struct{})}
	d.cmd = e.cmd(context.Background(), append([]string{"daemon", "--node", name, "--poll", "1s", "-v"}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(d.done)
		err := d.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			d.code = ee.ExitCode()
		}
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", name, d.logText())
		}
	})
	return d
}

// stop sends sig and waits for the daemon to exit, at most within.
func (d *daemon) stop(sig syscall.Signal, within time.Duration) int {
	d.t.Helper()
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(within):
		d.t.Fatalf("daemon %s did not exit within %s of %v", d.name, within, sig)
	}
	return d.code
}

// waitLog waits until the daemon's log holds s.
func (d *daemon) waitLog(s string, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(d.logText(), s) {
		if time.Now().After(deadline) {
			d.t.Fatalf("daemon %s: no %q within %s", d.name, s, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeJobs writes a jobs file and returns its path.
func writeJobs(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// witnessCommand is a job's command that holds a kernel lock for its whole life and logs its
// slot and fencing token, or OVERLAP when another run of the job holds the lock.
func witnessCommand(dir string, sleep string) string {
	return fmt.Sprintf(`flock -n %[1]s/lock sh -c 'echo "$ONCE_SLOT $ONCE_FENCING_TOKEN" >> %[1]s/runs; sleep %[2]s' || echo "OVERLAP $ONCE_SLOT" >> %[1]s/runs`, dir, sleep)
}

type witnessRun struct {
	slot  string
	token int64
}

func readWitness(t *testing.T, path string) []witnessRun {
	t.Helper()
	var out []witnessRun
	for _, l := range fileLines(t, path) {
		w := strings.Fields(l)
		if len(w) != 2 || w[0] == "OVERLAP" {
			t.Fatalf("witness: %q (two runs of the job at once)", l)
		}
		n, err := strconv.ParseInt(w[1], 10, 64)
		if err != nil {
			t.Fatalf("witness: %q", l)
		}
		out = append(out, witnessRun{w[0], n})
	}
	return out
}

// Three daemons on one store, a job every 2 s for 30 s: every slot of the window ran exactly once
// (or was skipped, said so, behind a run that overran), never two at a time, with strictly
// increasing fencing tokens; on every store.
func TestDaemonFleetEverySlotOnce(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn, dir := b.isolated(), t.TempDir()
		jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"tick\"\nschedule = \"@every 2s\"\ntz = \"UTC\"\nttl = \"5s\"\ncommand = %q\n",
			witnessCommand(dir, "0.5")))
		var ds []*daemon
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			ds = append(ds, startDaemon(t, host(t, n, dsn).atVolume(), n, "--jobs", jobs))
		}
		for _, d := range ds {
			d.waitLog("once daemon started", 20*time.Second)
		}
		from := time.Now().Add(time.Second)
		time.Sleep(30 * time.Second)
		to := time.Now().Add(-2 * time.Second)
		for _, d := range ds {
			if code := d.stop(syscall.SIGTERM, 20*time.Second); code != 0 {
				t.Errorf("daemon %s exited %d", d.name, code)
			}
		}
		runs := readWitness(t, filepath.Join(dir, "runs"))
		seen := map[string]bool{}
		for i, r := range runs {
			if seen[r.slot] {
				t.Fatalf("slot %s ran twice: %v", r.slot, runs)
			}
			seen[r.slot] = true
			if i > 0 && r.token <= runs[i-1].token {
				t.Fatalf("tokens not strictly increasing: %v", runs)
			}
		}
		// A run that overran its 2 s on a loaded machine (0.5 s took 1.6 s) makes the next slot
		// skipped, by the job's overlap policy (skip, the default): said in the node's log and
		// history, not lost. Any other slot of the window must have run.
		overlapped := map[string]bool{}
		for _, d := range ds {
			for _, l := range strings.Split(d.logText(), "\n") {
				if _, rest, ok := strings.Cut(l, "msg=skipped task=tick slot="); ok && strings.Contains(l, `reason="overlap = skip: slot `) {
					overlapped[strings.Fields(rest)[0]] = true
				}
			}
		}
		want := 0
		for s := from.Truncate(2 * time.Second).Add(2 * time.Second); s.Before(to); s = s.Add(2 * time.Second) {
			want++
			if v := s.UTC().Format("2006-01-02T15:04:05-07:00"); !seen[v] && !overlapped[v] {
				t.Errorf("slot %s of the window did not run (runs %v)", v, runs)
			}
		}
		t.Logf("%d slots in the window, %d runs", want, len(runs))
	})
}

// statusJSON is once status --json.
type statusJSON struct {
	Leases []struct {
		Task, Holder string
	} `json:"leases"`
	Review []struct {
		Task, Slot string
	} `json:"review"`
}

func (e *env) status() statusJSON {
	e.t.Helper()
	r := e.run("status", "--json")
	var st statusJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		e.t.Fatalf("status: %d %s %s", r.code, r.stdout, r.stderr)
	}
	return st
}

// kill -9 of the node running a job: its command dies with it; the slot waits for review (or,
// with on-unknown = rerun, runs again on another node); later slots fire on the survivors.
func TestDaemonKill9OfTheRunningNode(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		policies := []string{"review"}
		if b.name == "sqlite" || b.name == "redis" {
			policies = append(policies, "rerun")
		}
		for _, policy := range policies {
			t.Run(policy, func(t *testing.T) { daemonKill9(t, b, policy) })
		}
	})
}

func daemonKill9(t *testing.T, b backend, policy string) {
	dsn, dir := b.isolated(), t.TempDir()
	script := fmt.Sprintf(`if mkdir %[1]s/first 2>/dev/null; then echo "$ONCE_SLOT" > %[1]s/slot; echo $$ > %[1]s/pid.tmp; mv %[1]s/pid.tmp %[1]s/pid; exec sleep 60; fi; echo "$ONCE_SLOT $ONCE_ATTEMPT" >> %[1]s/ran`, dir)
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"k9\"\nschedule = \"@every 3s\"\ntz = \"UTC\"\nttl = \"2s\"\non-unknown = %q\ncommand = %q\n", policy, script))
	hosts := map[string]*env{}
	ds := map[string]*daemon{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		hosts[n] = host(t, n, dsn).atVolume()
		ds[n] = startDaemon(t, hosts[n], n, "--jobs", jobs)
	}
	pid := waitPid(t, filepath.Join(dir, "pid"), 20*time.Second)
	var holder string
	for deadline := time.Now().Add(5 * time.Second); holder == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, l := range hosts["node-a"].status().Leases {
			if l.Task == "k9" {
				holder = l.Holder
			}
		}
	}
	victim := ds[holder]
	if victim == nil {
		t.Fatalf("lease holder %q is none of the nodes", holder)
	}
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	if !waitDead(pid, 2*time.Second) {
		t.Fatalf("the command (pid %d) outlived its node's kill -9", pid)
	}
	slotB, _ := os.ReadFile(filepath.Join(dir, "slot"))
	killed := strings.TrimSpace(string(slotB))
	var survivor *env
	for n, h := range hosts {
		if n != holder {
			survivor = h
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := false
		if policy == "review" {
			for _, r := range survivor.status().Review {
				ok = ok || r.Task == "k9" && r.Slot == killed
			}
		} else {
			out, _ := os.ReadFile(filepath.Join(dir, "ran"))
			ok = strings.Contains(string(out), killed+" 2\n")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s: not %s within 15 s of the kill", killed, map[string]string{"review": "waiting for review", "rerun": "run again as attempt 2"}[policy])
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitLines(t, filepath.Join(dir, "ran"), 2, 15*time.Second) // later slots fire on the survivors
}

func waitPid(t *testing.T, path string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return pid
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s within %s", path, within)
	return 0
}

func waitLines(t *testing.T, path string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for countLines(t, path) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines, want %d within %s", path, countLines(t, path), n, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Every node down for several periods, then one starts: the missed slots within the catch-up
// window run once, oldest first; older ones are recorded missed; each slot has one entry.
func TestDaemonCatchUpAndMissed(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn, dir := b.isolated(), t.TempDir()
		jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"gap\"\nschedule = \"@every 2s\"\ntz = \"UTC\"\ncatch-up = \"5s\"\ncatch-up-max = 10\ncommand = %q\n",
			fmt.Sprintf(`echo "$ONCE_SLOT" >> %s/ran`, dir)))
		h := host(t, "node-a", dsn).atVolume()
		d := startDaemon(t, h, "node-a", "--jobs", jobs)
		waitLines(t, filepath.Join(dir, "ran"), 1, 20*time.Second)
		d.stop(syscall.SIGTERM, 20*time.Second)
		down := time.Now()
		time.Sleep(16 * time.Second)
		d = startDaemon(t, h, "node-a", "--jobs", jobs)
		d.waitLog("catching up", 20*time.Second)
		time.Sleep(2 * time.Second)
		d.stop(syscall.SIGTERM, 20*time.Second)
		entries := map[string][]string{}
		var missed, ran []string
		for _, e := range h.history("gap") {
			sl, st := e["slot"].(string), e["state"].(string)
			entries[sl] = append(entries[sl], st)
			if st == "missed" {
				missed = append(missed, sl)
			}
		}
		out, _ := os.ReadFile(filepath.Join(dir, "ran"))
		ran = strings.Fields(string(out))
		for sl, sts := range entries {
			if len(sts) != 1 {
				t.Errorf("slot %s has %v, want one entry", sl, sts)
			}
		}
		for i := 1; i < len(ran); i++ {
			if ran[i] <= ran[i-1] {
				t.Errorf("not oldest first: %v", ran)
			}
		}
		// 16 s down at 2 s: ~8 slots passed; the 5 s window holds 2–3 of them, the rest are missed.
		if len(missed) < 4 || len(missed) > 7 {
			t.Errorf("%d missed slots %v (down at %s), ran %v", len(missed), missed, down.Format(time.RFC3339), ran)
		}
		for _, m := range missed {
			for _, r := range ran {
				if r == m {
					t.Errorf("slot %s both missed and ran", m)
				}
			}
		}
		if r := h.run("status"); !strings.Contains(r.stdout, "MISSED") || !strings.Contains(r.stdout, missed[0]) {
			t.Errorf("status does not show the missed slots: %s", r.stdout)
		}
		if r := h.run("history", "--kind", "missed", "--task", "gap", "--json"); strings.Count(r.stdout, `"missed"`) != len(missed) {
			t.Errorf("history --kind missed: %s", r.stdout)
		}
	})
}
