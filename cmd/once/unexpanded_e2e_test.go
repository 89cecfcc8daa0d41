package main

import (
	"os"
	"strings"
	"testing"
)

// TestUnexpandedVariablesExit64: cron takes a crontab's NAME=value lines as written (no $HOME, no
// ~), and so does systemd's Environment=. ONCE_STORE=sqlite:$HOME/once.db ran, with a ledger in
// ./$HOME/once.db under cron's working directory (the home): another ledger than the shell's
// ~/once.db, where the slots done by hand are, so cron ran them again, and what the shell
// resolved cron never saw. sqlite://$HOME/once.db was refused as a "host". Each is 64 now, with
// the reason, and nothing is created.
func TestUnexpandedVariablesExit64(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cwd := t.TempDir()
	run := func(name, value string) result {
		t.Helper()
		saved := e.vars
		e.vars = append(append([]string{}, saved...), name+"="+value)
		defer func() { e.vars = saved }()
		c := e.cmd(t.Context(), "run", "--task", "unexpanded", "--", "echo", "ran")
		c.Dir = cwd
		var so, se strings.Builder
		c.Stdout, c.Stderr = &so, &se
		c.Run()
		return result{code: c.ProcessState.ExitCode(), stdout: so.String(), stderr: se.String()}
	}
	for _, tc := range []struct{ name, value, want string }{
		{"ONCE_STORE", "sqlite:$HOME/once.db", "'$' is not expanded"},
		{"ONCE_STORE", "sqlite://$HOME/once.db", "'$' is not expanded"},
		{"ONCE_STORE", "sqlite:///${HOME}/once.db", "'$' is not expanded"},
		{"ONCE_HOME", "$HOME/once", "'~' and '$' are not expanded"},
		{"ONCE_HOME", "~/once", "'~' and '$' are not expanded"},
		{"ONCE_HOME", "/srv/$USER/once", "'~' and '$' are not expanded"},
	} {
		r := run(tc.name, tc.value)
		if r.code != 64 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s=%s: exit %d, stdout %q, stderr %q; want 64, nothing run, %q", tc.name, tc.value, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
		t.Errorf("the working directory has %v: a ledger was made", ents)
	}
	// A '$' in a file name is still possible, percent-encoded.
	if r := run("ONCE_STORE", "sqlite://"+cwd+"/a%24b.db"); r.code != 0 || r.stdout != "ran\n" {
		t.Errorf("a %%24 in the path: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(cwd + "/a$b.db"); err != nil {
		t.Errorf("the ledger with a '$' in its name: %v", err)
	}
}
