package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stop signal to once drill reaches its launches: each stops its command and records the
// outcome, and the drill exits 128+N once they have ended. The drill died of the signal and
// left the launch that ran going on with the command (a CI step's timeout sends SIGTERM).
func TestDrillStopSignalStopsItsLaunches(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	began, ended := filepath.Join(dir, "began"), filepath.Join(dir, "ended")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := e.cmd(ctx, "drill", "--task", "d", "--slot", "drill-1", "--", "sh", "-c", "echo $$ > "+began+"; sleep 5; echo x > "+ended)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(20 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command never began\n%s", out.String())
		}
		b, _ := os.ReadFile(began)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	if code := c.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) || !strings.Contains(out.String(), "interrupted by SIGTERM") {
		t.Fatalf("drill after SIGTERM: exit %d, want 143 and the line\n%s", code, out.String())
	}
	if err := syscall.Kill(pid, 0); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command (pid %d) is still running after the drill exited", pid)
	}
	if r := e.run("history", "--task", "d", "--kind", "failed"); !strings.Contains(r.stdout, "143") {
		t.Fatalf("the stopped attempt is not recorded failed, exit 143:\n%s%s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(ended); err == nil {
		t.Fatal("the command ran to its end")
	}
}
