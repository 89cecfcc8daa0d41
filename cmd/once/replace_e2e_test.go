package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// witnessScript is a command that appends "start NAME NS" to file w as it starts and "stop NAME
// NS" as it ends (after sleep seconds, or when it gets SIGTERM), NS the wall clock in ns.
func witnessScript(w, name, sleep string) string {
	return fmt.Sprintf(`echo "start %[2]s $(date +%%s%%N)" >> %[1]s
trap 'echo "stop %[2]s $(date +%%s%%N)" >> %[1]s; exit 143' TERM
sleep %[3]s & wait $!
echo "stop %[2]s $(date +%%s%%N)" >> %[1]s`, w, name, sleep)
}

// witnessSpans reads a witness file: name → [start, stop] in ns (stop 0 while it runs).
func witnessSpans(t *testing.T, w string) map[string][2]int64 {
	t.Helper()
	spans := map[string][2]int64{}
	for _, line := range fileLines(t, w) {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("witness line %q", line)
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sp := spans[f[1]]
		if f[0] == "start" {
			sp[0] = ns
		} else {
			sp[1] = ns
		}
		spans[f[1]] = sp
	}
	return spans
}

// TestReplaceStopsTheRunningHolder: once run --replace, on every store, from another host and
// from the same one (where the old once also holds the kernel lock), over an exclusive run and
// over a seat of --limit 2: the running command is
// stopped through its lost lease, the new one starts only after it stopped, the old attempt is
// recorded unknown and resolved as failed ("replaced by run …"), and the new one succeeds.
func TestReplaceStopsTheRunningHolder(t *testing.T) {
	acrossStores(t, func(t *testing.T, b backend) {
		dsn := b.isolated()
		w := filepath.Join(t.TempDir(), "witness")
		hostA, hostB := host(t, "hostA", dsn), host(t, "hostB", dsn)
		for _, e := range []*env{hostA, hostB} {
			if err := os.MkdirAll(e.home, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		const task = "replaced"
		rounds := []struct {
			slot, old, new string
			newHost        *env
			oldArgs        []string
		}{{"s1", "A", "B", hostB, nil}, {"s2", "C", "D", hostA, nil},
			// A seat of --limit 2, replaced by an exclusive run: the takeover ends every seat.
			{"s3", "E", "F", hostB, []string{"--limit", "2"}}, {"s4", "G", "H", hostA, []string{"--limit", "2"}}}
		for _, round := range rounds {
			old := startWitness(t, hostA, w, round.old, append([]string{"--task", task, "--slot", round.slot, "--ttl", "3s"}, round.oldArgs...)...)
			waitFor(t, 10*time.Second, func() bool { _, ok := witnessSpans(t, w)[round.old]; return ok })
			began := time.Now()
			r := round.newHost.run("run", "--replace", "--task", task, "--slot", round.slot, "--ttl", "3s", "--",
				"sh", "-c", witnessScript(w, round.new, "0.3"))
			if r.code != 0 {
				t.Fatalf("%s: once run --replace exited %d: %s", round.new, r.code, r.stderr)
			}
			done := make(chan error, 1)
			go func() { done <- old.Wait() }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatalf("the replaced once (%s) did not exit", round.old)
			}
			sp := witnessSpans(t, w)
			o, n := sp[round.old], sp[round.new]
			if o[1] == 0 || n[0] == 0 || n[1] == 0 {
				t.Fatalf("witness spans %v", sp)
			}
			if n[0] <= o[1] {
				t.Fatalf("%s started %s before %s stopped: two at once", round.new, time.Duration(o[1]-n[0]), round.old)
			}
			t.Logf("%s: %s stopped %s after --replace began; %s started %s after that (round %s)", b.name, round.old,
				time.Duration(o[1]-began.UnixNano()).Round(time.Millisecond), round.new, time.Duration(n[0]-o[1]).Round(time.Millisecond), round.slot)
		}
		h := hostB.history(task)
		replaced, succeeded := 0, 0
		for _, a := range h {
			res, _ := a["resolution"].(map[string]any)
			switch {
			case a["state"] == "unknown" && res != nil && res["as"] == "failed" && strings.Contains(fmt.Sprint(res["note"]), "replaced by run"):
				replaced++
			case a["state"] == "succeeded":
				succeeded++
			}
		}
		if replaced != len(rounds) || succeeded != len(rounds) {
			t.Fatalf("history: %d replaced attempts and %d succeeded, want %d of each: %v", replaced, succeeded, len(rounds), h)
		}
		out := hostB.run("history", "--task", task)
		if !strings.Contains(out.stdout, "replaced by run") {
			t.Fatalf("once history does not show the replacement:\n%s", out.stdout)
		}
	})
}

// startWitness starts once run with a witness command that runs until it is stopped.
func startWitness(t *testing.T, e *env, w, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := e.cmd(context.Background(), append(append([]string{"run"}, args...), "--", "sh", "-c", witnessScript(w, name, "300"))...)
	var se bytes.Buffer
	c.Stderr = &se
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill() })
	return c
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", within)
		}
	}
}
