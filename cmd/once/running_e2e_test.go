package main

// once status lists the attempts still running with whether their holder's lease is live, and
// says what to do about one whose holder died (issue: an attempt left running by a kill -9 or a
// lost host showed nowhere in status until the slot's next run, up to a day later for a daily job).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// parentOf is pid's parent process id, from /proc (0 when it cannot be read).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, …: after the command's name
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// statusRunning is once status --json's running list, by task.
func statusRunning(t *testing.T, e *env) map[string]map[string]any {
	t.Helper()
	m, _ := statusRunningHeld(t, e)
	return m
}

// statusRunningHeld is once status --json's running list, by task, and the tokens of the leases
// the same status listed, by task.
func statusRunningHeld(t *testing.T, e *env) (map[string]map[string]any, map[string]map[float64]bool) {
	t.Helper()
	list, held := statusRunningJSON(t, e)
	m := map[string]map[string]any{}
	for _, x := range list {
		m[x["task"].(string)] = x
	}
	return m, held
}

// statusRunningJSON is once status --json's running list and the tokens of its leases, by task.
func statusRunningJSON(t *testing.T, e *env) ([]map[string]any, map[string]map[float64]bool) {
	t.Helper()
	r := e.run("status", "--json")
	if r.code != 0 {
		t.Fatalf("status --json: %d %s", r.code, r.stderr)
	}
	var out struct {
		Leases  []map[string]any `json:"leases"`
		Running []map[string]any `json:"running"`
		Listed  *bool            `json:"running_listed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Running == nil || out.Listed == nil || !*out.Listed {
		t.Fatalf("status --json has no running list (%v): %s", err, r.stdout)
	}
	held := map[string]map[float64]bool{}
	for _, l := range out.Leases {
		task := l["task"].(string)
		if held[task] == nil {
			held[task] = map[float64]bool{}
		}
		held[task][l["token"].(float64)] = true
	}
	return out.Running, held
}

// loseHost kills once (c), its shim and the command (pid) at once, as a lost host ends them:
// nothing records an outcome. It returns when they are dead, with the time of the kill.
func loseHost(t *testing.T, c *exec.Cmd, pid int) time.Time {
	t.Helper()
	shim := parentOf(pid)
	if shim == 0 || shim == c.Process.Pid {
		// Parent 0: the command is gone before the kill. Once stops it when it loses its lease: a
		// renewal later than two thirds of the TTL (a process stalled that long on a loaded machine).
		t.Fatalf("no shim between once %d and the command %d (parent %d; 0: the command ended before the kill, as when once lost its lease)", c.Process.Pid, pid, shim)
	}
	for _, p := range []int{c.Process.Pid, shim, pid} { // once first: nothing left to record an outcome
		// ESRCH: gone already, taken down by another's death (the shim takes its command with it).
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	c.Wait()
	if !waitDead(pid, time.Second) || !waitDead(shim, time.Second) {
		t.Fatal("the command or the shim outlived kill -9")
	}
	return killed
}

func TestStatusShowsAttemptLeftRunningByDeadHolder(t *testing.T) {
	e := newEnv(t)
	startOnce(t, e, t.TempDir(), "--task", "rlive", "--slot", "s1", "--ttl", "30s")
	c, pid := startOnce(t, e, t.TempDir(), "--task", "rdead", "--slot", "d1", "--ttl", "2s")
	killed := loseHost(t, c, pid)
	// Within the TTL the dead holder's lease is still live: status cannot tell yet. Whether it
	// still is when status reads it depends on when its last renewal was (up to a third of the
	// TTL before the kill, later on a loaded machine): the same status's leases say.
	got, held := statusRunningHeld(t, e)
	if d := got["rdead"]; d == nil || (d["lease"] == "live") != held["rdead"][d["token"].(float64)] {
		t.Fatalf("running %v, leases held %v: rdead's lease is live in one and not the other", got, held)
	}
	time.Sleep(time.Until(killed.Add(2200 * time.Millisecond)))
	got = statusRunning(t, e)
	dead, live := got["rdead"], got["rlive"]
	if dead == nil || dead["lease"] != "gone" || dead["slot"] != "d1" || dead["state"] != "running" || dead["resolve"] == nil {
		t.Fatalf("after the TTL: rdead %v; want its attempt running with lease gone and the resolve commands", dead)
	}
	if live == nil || live["lease"] != "live" || live["resolve"] != nil {
		t.Fatalf("rlive %v; want its attempt running with lease live", live)
	}
	text := e.run("status").stdout
	for _, want := range []string{"RUNNING (2)", "task rdead slot d1: attempt 1 is still recorded as running but its holder's lease is gone: the holder died or was cut off",
		"once resolve --task rdead --slot d1 --as failed", "once resolve --task rdead --slot d1 --as succeeded"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "task rlive slot s1: attempt") {
		t.Errorf("status tells of the live attempt as of a dead one:\n%s", text)
	}
	// Doctor finds it from the same list, however much history came after it.
	for range 2 {
		if r := e.run("run", "--task", "rother", "--", "true"); r.code != 0 {
			t.Fatalf("run rother: %d %s", r.code, r.stderr)
		}
	}
	if r := e.run("doctor", "--scan", "1"); r.code != 1 || !strings.Contains(r.stdout, `slot "d1" attempt 1`) || !strings.Contains(r.stdout, "its holder's lease is gone") {
		t.Errorf("doctor --scan 1: %d, want 1 with the stale attempt of rdead\n%s", r.code, r.stdout)
	}
	// The command status prints settles it now; the live attempt is refused (busy: decide after).
	if r := e.run("resolve", "--task", "rlive", "--slot", "s1", "--as", "failed"); r.code != 75 {
		t.Fatalf("resolve of a live attempt: %d, want 75\n%s", r.code, r.stderr)
	}
	if r := e.run("resolve", "--task", "rdead", "--slot", "d1", "--as", "failed", "--note", "host lost"); r.code != 0 ||
		!strings.Contains(r.stdout, "(attempt 1, unknown) as failed") || !strings.Contains(r.stderr, "marked unknown") {
		t.Fatalf("resolve of the dead attempt: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := statusRunning(t, e); got["rdead"] != nil || got["rlive"] == nil {
		t.Fatalf("after resolve: running %v; want rlive alone", got)
	}
	if r := e.run("run", "--task", "rdead", "--slot", "d1", "--", "true"); r.code != 0 {
		t.Fatalf("the slot resolved as failed runs again: %d %s", r.code, r.stderr)
	}
}

// On every store: another host's status shows the attempt a lost host left running, live until
// its lease expires and gone after, and its once resolve settles it.
func TestStoresStatusShowsDeadHolder(t *testing.T) {
	const ttl = 2 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dsn := b.isolated()
			a, other := host(t, "host-a", dsn), host(t, "host-b", dsn)
			c, pid := startOnce(t, a, t.TempDir(), "--task", "k9", "--slot", "s", "--ttl", ttl.String())
			killed := loseHost(t, c, pid)
			var dead map[string]any
			for deadline := killed.Add(ttl + 8*time.Second); ; {
				dead = statusRunning(t, other)["k9"]
				if dead == nil {
					t.Fatal("status does not list the attempt left running")
				}
				if dead["lease"] == "gone" || time.Now().After(deadline) {
					break
				}
				if dead["lease"] != "live" {
					t.Fatalf("lease %v, want live or gone", dead["lease"])
				}
				time.Sleep(200 * time.Millisecond)
			}
			if dead["lease"] != "gone" || dead["holder"] != "host-a" || dead["resolve"] == nil {
				t.Fatalf("after the TTL: %v; want host-a's attempt with lease gone and the resolve commands", dead)
			}
			// etcd deletes an expired lease's key up to ~1 s after its recorded expiry, and resolve
			// waits 3 s for it: on a loaded machine a 75 may still come, so try again for a while.
			for try := 0; ; try++ {
				r := other.run("resolve", "--task", "k9", "--slot", "s", "--as", "succeeded")
				if r.code == 0 {
					break
				}
				if r.code != 75 || try == 5 {
					t.Fatalf("resolve: %d %s", r.code, r.stderr)
				}
				time.Sleep(time.Second)
			}
			if got := statusRunning(t, other); len(got) != 0 {
				t.Fatalf("after resolve: running %v; want none", got)
			}
			if r := other.run("run", "--task", "k9", "--slot", "s", "--", "false"); r.code != 0 {
				t.Fatalf("the slot resolved as succeeded: %d, want 0 (skipped)\n%s", r.code, r.stderr)
			}
		})
	}
}

// A seat (once run --limit) whose holder died while another seat of the task runs: status names the
// live seat and offers no once resolve line, which would be refused (75) while that seat is live.
//
// Seat a's once renews through seat b's start (a race-built once, its shim and command: seconds on
// a loaded machine), and loses its lease, stopping its command, when a renewal comes later than two
// thirds of its TTL: with a TTL of 2 s a stall of 1.33 s fails the test (loseHost: parent 0; shown
// by stopping that once with SIGSTOP for 1.6 s). 6 s tolerates a stall of 4 s. Its grant expires
// at most a TTL after the kill, by SQLite's clock (this machine's boot clock).
func TestStatusDeadSeatBesideLiveSeat(t *testing.T) {
	const ttl = 6 * time.Second
	e := newEnv(t)
	c, pid := startOnce(t, e, t.TempDir(), "--task", "rseat", "--limit", "2", "--slot", "a", "--ttl", ttl.String())
	startOnce(t, e, t.TempDir(), "--task", "rseat", "--limit", "2", "--slot", "b", "--ttl", "30s")
	killed := loseHost(t, c, pid)
	time.Sleep(time.Until(killed.Add(ttl + 200*time.Millisecond)))
	list, _ := statusRunningJSON(t, e)
	bySlot := map[string]map[string]any{}
	for _, x := range list {
		bySlot[x["slot"].(string)] = x
	}
	if a := bySlot["a"]; a == nil || a["lease"] != "gone" || a["resolve"] != nil || a["held_by"] == nil {
		t.Fatalf("seat a: %v; want lease gone, held_by the live seat and no resolve commands", a)
	}
	text := e.run("status").stdout
	if strings.Contains(text, "once resolve --task rseat") || !strings.Contains(text, "task rseat is held now") {
		t.Errorf("status offers resolve lines that would be refused, or does not say the task is held:\n%s", text)
	}
	if r := e.run("resolve", "--task", "rseat", "--slot", "a", "--as", "failed"); r.code != 75 {
		t.Fatalf("resolve while the other seat is live: %d, want 75\n%s", r.code, r.stderr)
	}
}
