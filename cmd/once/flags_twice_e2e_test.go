package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A flag given twice is its last value, as in every GNU tool, root flags included: `once --store A
// run … --store B` records in B. Wrappers and aliases (alias once='once --store A', a cron line
// built from defaults plus the user's own flags) depend on it; a refusal (64) stopped their cron
// jobs after an upgrade.
func TestFlagGivenTwiceLastWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	r := e.run("--store", "sqlite://"+a, "run", "--task", "first", "--task", "last", "--slot", "s1", "--slot=s2",
		"--ttl", "10s", "--ttl", "20s", "--store", "sqlite://"+b, "--", "true")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(a); err == nil {
		t.Errorf("the first --store was opened too")
	}
	h := e.run("--store", "sqlite://"+b, "history", "--json")
	var got []struct{ Task, Slot string }
	if err := json.Unmarshal([]byte(h.stdout), &got); h.code != 0 || err != nil || len(got) != 1 || got[0].Task != "last" || got[0].Slot != "s2" {
		t.Fatalf("history: %d %v %s %s; want one run of task last, slot s2", h.code, err, h.stdout, h.stderr)
	}
}

// ONCE_NOTIFY= and ONCE_PING=, set but empty, are off and the job runs: `ONCE_NOTIFY= once run …`
// is how one cron job turns off what its crontab sets for all (--notify ” is refused as an unset
// variable). Refusing them (64) stopped such jobs after an upgrade.
func TestNotifyEnvEmptyIsOff(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ONCE_NOTIFY", "ONCE_PING"} {
		e := newEnv(t)
		e.vars = append(e.vars, name+"=")
		if r := e.run("run", "--task", "quiet", "--", "true"); r.code != 0 || strings.Contains(r.stderr, name) {
			t.Errorf("%s=: exit %d, stderr %q; want 0 and nothing said of it", name, r.code, r.stderr)
		}
	}
}
