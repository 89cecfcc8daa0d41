package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeRefusesUnsafeSetups: once serve starts nothing it cannot guard, and says how to fix it
// in one line, exit 64.
func TestServeRefusesUnsafeSetups(t *testing.T) {
	e, _ := dashEnv(t)
	short := filepath.Join(e.home, "short")
	open := filepath.Join(e.home, "open")
	good := filepath.Join(e.home, "good")
	spaced := filepath.Join(e.home, "spaced") // an editor's trailing spaces: no client could send them back
	for path, c := range map[string]struct {
		text string
		mode os.FileMode
	}{short: {"tooshort\n", 0o600}, open: {"0123456789abcdef0123\n", 0o644}, good: {"0123456789abcdef0123\n", 0o600}, spaced: {"0123456789abcdef0123  \n", 0o600}} {
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
		{[]string{"serve", "--listen", "127.0.0.1:-1"}, "the port must be 0 to 65535"},
		{[]string{"serve", "--listen", "127.0.0.1:65536"}, "the port must be 0 to 65535"},
		{[]string{"serve", "--listen", "127.0.0.1:"}, "the port must be 0 to 65535"},
		{[]string{"daemon", "--jobs", jobs, "--http", "127.0.0.1:99999"}, "--http \"127.0.0.1:99999\": the port must be 0 to 65535"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", short}, "at least 16"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", open}, "chmod 600"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", spaced}, "--token-file: the token has whitespace at an end"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", filepath.Join(e.home, "missing")}, "does not exist"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--token-file", good, "--tls-cert", good}, "together"},
		// A certificate once cannot read is a bad flag, found before the listener serves (it was
		// 69 after "serving https://…", and a daemon ran its jobs without the dashboard).
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", filepath.Join(e.home, "missing.pem"), "--tls-key", filepath.Join(e.home, "missing.key")}, "--tls-cert"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", jobs, "--tls-key", jobs}, "PEM"},
		{[]string{"daemon", "--jobs", jobs, "--http", "127.0.0.1:0", "--tls-cert", jobs, "--tls-key", jobs}, "--tls-cert"},
		{[]string{"daemon", "--jobs", jobs, "--http", "0.0.0.0:0"}, "--http 0.0.0.0:0: reachable from other hosts"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--reads-need-token"}, "--reads-need-token: give the token"},
		{[]string{"daemon", "--jobs", jobs, "--http", "127.0.0.1:0", "--reads-need-token"}, "--reads-need-token: give the token"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--store-timeout", "500ms"}, "--store-timeout 500ms is too short"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--store-timeout", "6m"}, "--store-timeout"},
		{[]string{"daemon", "--jobs", jobs, "--http", "127.0.0.1:0", "--store-timeout", "0s"}, "--store-timeout 0s is too short"},
	} {
		r := e.run(c.args...)
		if r.code != 64 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("once %s: exit %d, want 64 and one line with %q\n%s", strings.Join(c.args, " "), r.code, c.want, r.stderr)
		}
		if strings.Contains(r.stderr, "0123456789abcdef") {
			t.Errorf("once %s printed the token", strings.Join(c.args, " "))
		}
	}
	// The server started with such a token and refused every client that sent it.
	for _, tok := range []string{"0123456789abcdef0123 ", " 0123456789abcdef0123", "0123456789abcdef0123\n", "0123456789\tabcdef0123"} {
		r := e.runIn("", []string{"ONCE_SERVE_TOKEN=" + tok}, "serve", "--listen", "127.0.0.1:0")
		if r.code != 64 || !strings.Contains(r.stderr, "ONCE_SERVE_TOKEN: the token has whitespace at an end or a control character") || strings.Contains(r.stderr, "0123456789") {
			t.Errorf("ONCE_SERVE_TOKEN=%q: exit %d, want 64 and one line without the token\n%s", tok, r.code, r.stderr)
		}
	}
}

// TestServeClosesReadsWhenAsked: with --reads-need-token a loopback listener shows nothing
// without the token (other users of the host reach 127.0.0.1 too), and without it a request that
// came through a reverse proxy on this host (X-Forwarded-For) needs the token all the same.
func TestServeClosesReadsWhenAsked(t *testing.T) {
	e, _ := dashEnv(t)
	tok := filepath.Join(e.home, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(base string, hdr ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/api/v1/tasks", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const bearer = "Bearer 0123456789abcdef0123"
	closed := startServe(t, e, "--listen", "127.0.0.1:0", "--token-file", tok, "--reads-need-token")
	if got := read(closed); got != 401 {
		t.Errorf("--reads-need-token, a loopback read without the token: %d, want 401", got)
	}
	if got := read(closed, "Authorization", bearer); got != 200 {
		t.Errorf("--reads-need-token, a read with the token: %d, want 200", got)
	}
	open := startServe(t, e, "--listen", "127.0.0.1:0", "--token-file", tok)
	if got := read(open); got != 200 {
		t.Errorf("a loopback read: %d, want 200", got)
	}
	if got := read(open, "X-Forwarded-For", "203.0.113.9"); got != 401 {
		t.Errorf("a read through a proxy without the token: %d, want 401", got)
	}
}

// TestDaemonJobsDoNotInheritTheServeToken: once daemon --http given its token in ONCE_SERVE_TOKEN
// (a unit's Environment=) passed it to every job, and a job that prints its environment put it in
// the output tail the dashboard shows to readers, who need no token on loopback. It is taken out
// of the environment once read.
func TestDaemonJobsDoNotInheritTheServeToken(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	const tok = "0123456789abcdef0123-not-for-jobs"
	jobs := writeJobs(t, dir, "jobs.toml", fmt.Sprintf("[[job]]\nname = \"envdump\"\nschedule = \"@every 1s\"\ntz = \"UTC\"\ncommand = %q\n",
		"env > "+dir+"/env.tmp && mv "+dir+"/env.tmp "+dir+"/env"))
	e.vars = append(e.vars, "ONCE_SERVE_TOKEN="+tok, "ONCE_SERVE_TOKEN_KEEP=other")
	startDaemon(t, e, "n1", "--jobs", jobs, "--http", "127.0.0.1:0")
	deadline := time.Now().Add(60 * time.Second)
	var env []byte
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, "env")); err == nil {
			env = b
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if env == nil {
		t.Fatal("the job did not run within 60 s")
	}
	if strings.Contains(string(env), tok) || !strings.Contains(string(env), "ONCE_SERVE_TOKEN_KEEP=other") {
		t.Fatalf("the job's environment:\n%s", env)
	}
}

// SIGQUIT and SIGHUP (a closed terminal) stop once serve as SIGTERM does, exit 0: left to Go,
// SIGQUIT dumped the goroutines and exited 2, and SIGHUP killed it (129). SIGQUIT still prints
// the goroutines' stacks first, which is what an operator sends it for.
func TestServeStopsAtQuitAndHangup(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			e, _ := dashEnv(t)
			if r := e.run("run", "--task", "x", "--", "true"); r.code != 0 {
				t.Fatalf("run: %d %s", r.code, r.stderr)
			}
			d, _ := serveProc(t, e, "--listen", "127.0.0.1:0")
			if code := d.stop(sig, 10*time.Second); code != 0 {
				t.Errorf("exit %d after %v, want 0", code, sig)
			}
			if dumped := strings.Contains(d.logText(), "goroutine "); dumped != (sig == syscall.SIGQUIT) {
				t.Errorf("%v: goroutines dumped %v, want %v", sig, dumped, sig == syscall.SIGQUIT)
			}
		})
	}
}
