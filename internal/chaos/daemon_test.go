package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A once daemon whose wall clock is an hour off refuses to fire, says why, and runs nothing; on
// every server store with a clock (etcd has none, and SQLite's is the machine's, which every node
// of its fleet shares: docs/daemon.md).
func TestDaemonClockOffRefuses(t *testing.T) {
	bin := onceBinary(t)
	for _, b := range backends(t, false) {
		if b.Name == "etcd" || b.Name == "sqlite" {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			b := isolate(t, b)
			dir := t.TempDir()
			env := append(os.Environ(), "ONCE_HOME="+filepath.Join(dir, "home"), "ONCE_STORE="+b.DSN)
			// A true clock opens the store first (SQLite fixes its boot epoch then).
			if out, err := exec.Command(bin, "history", "--store", b.DSN).CombinedOutput(); err != nil {
				t.Fatalf("history: %v %s", err, out)
			}
			jobs := filepath.Join(dir, "jobs.toml")
			ran := filepath.Join(dir, "ran")
			if err := os.WriteFile(jobs, []byte(fmt.Sprintf("[[job]]\nname = \"skew\"\nschedule = \"@every 1s\"\ncommand = \"echo x >> %s\"\n", ran)), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			c := exec.CommandContext(ctx, skewedBin, "daemon", "--jobs", jobs, "--node", "skewed", "-v")
			c.Env = append(env, "ONCE_CHAOS_WALL_OFFSET_SEC=3600")
			var log bytes.Buffer
			c.Stdout, c.Stderr = &log, &log
			_ = c.Run()
			if _, err := os.Stat(ran); err == nil {
				t.Fatalf("a node an hour off fired:\n%s", log.String())
			}
			if !strings.Contains(log.String(), "not firing: this node's clock is off") {
				t.Fatalf("no refusal in the log:\n%s", log.String())
			}
		})
	}
}
