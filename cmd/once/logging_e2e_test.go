package main

// Issue 12, cron reality: quiet when all is well (cron mails whatever a job prints), every line in
// --log-file, and the log lines back on a terminal.

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run that succeeds, is skipped or finds the task busy prints nothing on a stderr that is not a
// terminal; a failure and a slot that needs review do. -v, --log-level and ONCE_LOG_LEVEL bring
// the lines back; --log-file keeps them whatever stderr shows.
func TestQuietWhenAllIsWell(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	quiet := func(what string, r result, code int) {
		t.Helper()
		if r.code != code || r.stderr != "" {
			t.Errorf("%s: exit %d, stderr %q; want %d and nothing", what, r.code, r.stderr, code)
		}
	}
	quiet("success", e.run("run", "--task", "ok", "--per", "day", "--", "true"), 0)
	quiet("skipped", e.run("run", "--task", "ok", "--per", "day", "--", "true"), 0)
	startOnce(t, e, t.TempDir(), "--task", "held")
	quiet("busy", e.run("run", "--task", "held", "--", "true"), 75)
	quiet("busy, --busy-exit 0", e.run("run", "--task", "held", "--busy-exit", "0", "--", "true"), 0)

	r := e.run("run", "--task", "bad", "--slot", "s", "--max-attempts", "1", "--", "sh", "-c", "exit 3")
	if r.code != 3 || !strings.Contains(r.stderr, "level=WARN msg=end") || !strings.Contains(r.stderr, "state=failed") ||
		strings.Contains(r.stderr, "level=INFO") {
		t.Errorf("failure: exit %d, want 3 and only its WARN end line:\n%s", r.code, r.stderr)
	}
	r = e.run("run", "--task", "bad", "--slot", "s", "--max-attempts", "1", "--", "true")
	if r.code != 76 || !strings.Contains(r.stderr, "needs review") || !strings.Contains(r.stderr, "once resolve --task bad --slot s --as failed") {
		t.Errorf("review: exit %d, want 76 with the resolve commands:\n%s", r.code, r.stderr)
	}

	for _, c := range []struct {
		name  string
		extra []string
		args  []string
	}{
		{"-v", nil, []string{"-v"}},
		{"--log-level info", nil, []string{"--log-level", "info"}},
		{"ONCE_LOG_LEVEL=info", []string{"ONCE_LOG_LEVEL=info"}, nil},
		{"-vv", nil, []string{"-vv"}},
	} {
		r := e.runIn("", c.extra, append(append([]string{"run", "--task", "loud"}, c.args...), "--", "true")...)
		if r.code != 0 || !strings.Contains(r.stderr, "level=INFO msg=start") || !strings.Contains(r.stderr, "level=INFO msg=end") {
			t.Errorf("%s: exit %d, want the start and end lines:\n%s", c.name, r.code, r.stderr)
		}
	}
	if r := e.run("run", "--task", "bad2", "--log-level", "error", "--", "false"); r.code != 1 || r.stderr != "" {
		t.Errorf("--log-level error: a failure's WARN line shown: %q", r.stderr)
	}

	// --log-file: the start and end (and busy, skip) lines of every run, stderr quiet.
	log := filepath.Join(t.TempDir(), "once.log")
	quiet("success with --log-file", e.run("run", "--log-file", log, "--task", "f", "--slot", "s", "--", "true"), 0)
	quiet("skipped with ONCE_LOG_FILE", e.runIn("", []string{"ONCE_LOG_FILE=" + log}, "run", "--task", "f", "--slot", "s", "--", "true"), 0)
	quiet("busy with --log-file", e.run("run", "--log-file", log, "--task", "held", "--", "true"), 75)
	r = e.run("run", "--log-file", log, "--task", "f", "--store", "postgres://127.0.0.1:1/x?connect_timeout=1", "--", "true")
	if r.code != 69 {
		t.Errorf("unreachable store: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"level=INFO msg=start task=f slot=s", "level=INFO msg=end task=f slot=s", "state=succeeded",
		"level=INFO msg=skipped task=f slot=s", "level=INFO msg=busy task=held", "level=ERROR msg=\"store: unavailable", "exit_code=69"} {
		if !strings.Contains(got, want) {
			t.Errorf("log file lacks %q:\n%s", want, got)
		}
	}
	if fi, err := os.Stat(log); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode: %v %v, want 0600", fi, err)
	}
}

// Bad logging flags and variables: 64, one line, nothing run.
func TestLogFlagsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran, script := ranFile(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		extra []string
		args  []string
		want  string
	}{
		{nil, []string{"--log-level", "verbose"}, `--log-level "verbose": use debug, info, warn or error`},
		{nil, []string{"--log-level="}, "--log-level is given but empty"},
		{nil, []string{"-v", "--log-level", "debug"}, "-v and --log-level are both given"},
		{[]string{"ONCE_LOG_LEVEL=loud"}, nil, `ONCE_LOG_LEVEL "loud"`},
		{[]string{"ONCE_LOG_LEVEL="}, nil, "ONCE_LOG_LEVEL is set but empty"},
		{nil, []string{"--log-file="}, "--log-file is given but empty"},
		{[]string{"ONCE_LOG_FILE="}, nil, "ONCE_LOG_FILE is set but empty"},
		{nil, []string{"--log-file", link}, "is a symbolic link"},
		{nil, []string{"--log-file", dir}, "is a directory"},
		{nil, []string{"--log-file", fifo}, "is not a regular file"},
		{nil, []string{"--log-file", filepath.Join(dir, "no", "such")}, "no such file or directory"},
	} {
		r := e.runIn("", c.extra, append(append([]string{"run", "--task", "x"}, c.args...), "--", "sh", "-c", script)...)
		refused(t, r, c.want)
	}
	if n := countLines(t, ran); n != 0 {
		t.Fatalf("the command ran %d times", n)
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
		t.Fatal("once wrote through the symbolic link")
	}
}

// On a terminal the start and end lines are shown, as before.
func TestLogLinesOnATerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	master, slave := openPTY(t)
	c := e.cmd(context.Background(), "run", "--task", "tty", "--", "true")
	c.Stderr = slave
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, master); close(done) }() // ends with EIO once the slave side is closed
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		master.Close()
		<-done
	}
	if s := out.String(); !strings.Contains(s, "level=INFO msg=start") || !strings.Contains(s, "level=INFO msg=end") {
		t.Fatalf("no start and end lines on a terminal: %q", s)
	}
}

// TestBusyExitClashIsWarned: --busy-exit 69 (or 64, 70, 76, 126, 127, over 128) makes a busy task
// look like a store that is down (or bad input, …) to the script reading the status. It is taken,
// since refusing it would stop a crontab line that runs today, with one WARN line on every run
// naming the clash and the codes to use instead; cron mails it, so it is seen. A free code is quiet.
func TestBusyExitClashIsWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	startOnce(t, e, t.TempDir(), "--task", "held")
	for code, meaning := range map[string]string{"69": "store unavailable", "64": "bad usage", "76": "needs review", "143": "signal 15"} {
		r := e.run("run", "--task", "held", "--busy-exit", code, "--", "true")
		if r.code != atoi(t, code) || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "level=WARN") ||
			!strings.Contains(r.stderr, "--busy-exit "+code+" is also once's exit for") || !strings.Contains(r.stderr, meaning) {
			t.Errorf("busy, --busy-exit %s: exit %d, stderr %q; want %s and one WARN line", code, r.code, r.stderr, code)
		}
	}
	if r := e.run("run", "--task", "free", "--busy-exit", "69", "--", "true"); r.code != 0 || !strings.Contains(r.stderr, "--busy-exit 69 is also") {
		t.Errorf("free task, --busy-exit 69: exit %d, stderr %q; want 0 and the warning", r.code, r.stderr)
	}
	for _, code := range []string{"3", "0", "75", "128"} {
		if r := e.run("run", "--task", "held", "--busy-exit", code, "--", "true"); r.code != atoi(t, code) || r.stderr != "" {
			t.Errorf("busy, --busy-exit %s: exit %d, stderr %q; want %s and nothing", code, r.code, r.stderr, code)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
