package scheduler

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A log file that cannot be written (a full file system) is said once, not passed over in silence.
func TestOutputWriteFailureWarnsOnce(t *testing.T) {
	var logs bytes.Buffer
	s := &Scheduler{c: Config{LogSize: 10 << 20}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	p := filepath.Join(t.TempDir(), "j.log")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p) // read-only: every write fails, as on a full tmpfs
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o := &output{s: s, name: "j", file: f}
	for range 3 {
		if n, err := o.Write([]byte("line\n")); n != 5 || err != nil {
			t.Fatalf("Write: %d, %v; want 5, nil (the command never sees once's trouble)", n, err)
		}
	}
	if got := strings.Count(logs.String(), "cannot write the job's log file"); got != 1 {
		t.Errorf("%d warnings; want 1:\n%s", got, logs.String())
	}
}
