package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesUnsafeSetups: once serve starts nothing it cannot guard, and says how to fix it
// in one line, exit 64.
func TestServeRefusesUnsafeSetups(t *testing.T) {
	e, _ := dashEnv(t)
	short := filepath.Join(e.home, "short")
	open := filepath.Join(e.home, "open")
	good := filepath.Join(e.home, "good")
	for path, c := range map[string]struct {
		text string
		mode os.FileMode
	}{short: {"tooshort\n", 0o600}, open: {"0123456789abcdef0123\n", 0o644}, good: {"0123456789abcdef0123\n", 0o600}} {
		if err := os.WriteFile(path, []byte(c.text), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil {
			t.Fatal(err)
		}
	}
	jobs := filepath.Join(e.home, "jobs.toml")
	if err := os.WriteFile(jobs, []byte("[[job]]\nname = \"j\"\nschedule = \"@hourly\"\ncommand = [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:0"}, "reachable from other hosts"},
		{[]string{"serve", "--listen", "localhost"}, "HOST:PORT"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", short}, "at least 16"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", open}, "chmod 600"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", filepath.Join(e.home, "missing")}, "does not exist"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", good, "--tls-cert", good}, "together"},
		{[]string{"daemon", "--jobs", jobs, "--http", "0.0.0.0:0"}, "--http 0.0.0.0:0: reachable from other hosts"},
	} {
		r := e.run(c.args...)
		if r.code != 64 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("once %s: exit %d, want 64 and one line with %q\n%s", strings.Join(c.args, " "), r.code, c.want, r.stderr)
		}
		if strings.Contains(r.stderr, "0123456789abcdef") {
			t.Errorf("once %s printed the token", strings.Join(c.args, " "))
		}
	}
}
