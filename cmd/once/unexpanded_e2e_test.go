package main

import (
	"os"
	"path/filepath"
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
		{"ONCE_HOME", cwd + "/srv/$USER/once", "'~' and '$' are not expanded"}, // not /srv: a ledger there is an older once's
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

// TestDollarInRealPaths: a '$' in a DSN that once writes itself — the default store under a home
// directory whose name has one (a machine account's /home/ws01$), the absolute form of a relative
// sqlite:./once.db handed to the command (ONCE_STORE) from a working directory such as /srv/a$b —
// is written %24, not refused as a variable that cron did not expand: both were 64, for every
// command (the default store) and for the command's `once report`.
func TestDollarInRealPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := t.TempDir()
	dir := filepath.Join(base, "a$b")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.vars = append(e.vars, "ONCE_STORE=sqlite:./once.db")
	c := e.cmd(t.Context(), "run", "--task", "dollar-cwd", "--", "sh", "-c", `"$0" report --records 5 && echo reported`, e.bin)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reported") {
		t.Errorf("once report under %s with ONCE_STORE=sqlite:./once.db: %v %s", dir, err, out)
	}

	h := newEnv(t)
	vars := []string{"HOME=" + dir}
	for _, v := range h.vars {
		if !strings.HasPrefix(v, "ONCE_HOME=") && !strings.HasPrefix(v, "HOME=") {
			vars = append(vars, v)
		}
	}
	h.vars = vars
	if os.Geteuid() == 0 { // root's default is /var/lib/once: the home's user is uid 65534
		for _, p := range []string{base, filepath.Dir(base)} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		asNobody(t, h)
	}
	if r := h.run("run", "--task", "dollar-home", "--per", "day", "--", "true"); r.code != 0 {
		t.Errorf("once run with HOME=%s, the default store: exit %d %s", dir, r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".local", "state", "once", "once.db")); err != nil {
		t.Errorf("the default ledger under HOME=%s: %v", dir, err)
	}
	// XDG_STATE_HOME=$HOME/.state in a crontab, relative as written, was ignored: the ledger was
	// ~/.local/state/once, not the shell's ~/.state/once, and the shell's done slots ran again.
	h.vars = append(h.vars, "XDG_STATE_HOME=$HOME/.state")
	if r := h.run("run", "--task", "dollar-home", "--per", "day", "--", "echo", "ran"); r.code != 64 || r.stdout != "" || !strings.Contains(r.stderr, "'~' and '$' are not expanded") {
		t.Errorf("XDG_STATE_HOME=$HOME/.state: exit %d, stdout %q, stderr %q; want 64 and nothing run", r.code, r.stdout, r.stderr)
	}
}

// TestUnexpandedLedgerOfAnOlderOnce: an older once took the '$' of ONCE_STORE=sqlite:$HOME/once.db
// (or of an absolute ONCE_HOME=/srv/$USER/once) as written and kept its ledger there, with the slots
// it ran. After the upgrade the 64 said "write the path out": the path meant holds none of those
// slots, so today's ran again, and the slots waiting for review were left behind. The 64 names the
// ledger found and how to go on with it; that DSN finds today's slot done.
func TestUnexpandedLedgerOfAnOlderOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cwd := t.TempDir()
	run := func(name, value string, args ...string) result {
		t.Helper()
		saved := e.vars
		e.vars = append(append([]string{}, saved...), name+"="+value)
		defer func() { e.vars = saved }()
		c := e.cmd(t.Context(), append([]string{"run", "--task", "unexpanded", "--per", "day", "--"}, args...)...)
		c.Dir = cwd
		var so, se strings.Builder
		c.Stdout, c.Stderr = &so, &se
		c.Run()
		return result{code: c.ProcessState.ExitCode(), stdout: so.String(), stderr: se.String()}
	}
	// The ledgers an older once left: ./$HOME/once.db under cron's working directory, and
	// /…/$USER/once/once.db, each with today's slot done.
	kept := "sqlite://" + cwd + "/%24HOME/once.db"
	awayFromMidnight(t)
	if r := run("ONCE_STORE", kept, "echo", "ran"); r.code != 0 || r.stdout != "ran\n" {
		t.Fatalf("seeding %s: exit %d %q %s", kept, r.code, r.stdout, r.stderr)
	}
	home := cwd + "/$USER/once"
	if r := run("ONCE_STORE", "sqlite://"+cwd+"/%24USER/once/once.db", "echo", "ran"); r.code != 0 {
		t.Fatalf("seeding %s: exit %d %s", home, r.code, r.stderr)
	}

	r := run("ONCE_STORE", "sqlite:$HOME/once.db", "echo", "ran again")
	if r.code != 64 || r.stdout != "" || !strings.Contains(r.stderr, "a ledger is at "+cwd+"/$HOME/once.db, the path as written") ||
		!strings.Contains(r.stderr, "write "+kept) {
		t.Fatalf("sqlite:$HOME/once.db beside an older once's ledger: exit %d %q %s; want 64 naming it and %s", r.code, r.stdout, r.stderr, kept)
	}
	if r := run("ONCE_STORE", kept, "echo", "ran again"); r.code != 0 || r.stdout != "" {
		t.Fatalf("the DSN the 64 gives: exit %d %q %s; want today's slot found done", r.code, r.stdout, r.stderr)
	}
	r = run("ONCE_HOME", home, "echo", "ran again")
	if r.code != 64 || r.stdout != "" || !strings.Contains(r.stderr, "an older once kept its ledger in that directory") ||
		!strings.Contains(r.stderr, "mv '"+home+"'") {
		t.Fatalf("ONCE_HOME=%s holding an older once's ledger: exit %d %q %s; want 64 with the mv", home, r.code, r.stdout, r.stderr)
	}
}
