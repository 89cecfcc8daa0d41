package cli

import (
	"bytes"
	"log/slog"
	"log/syslog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --log-file syslog: every line at info and above goes to syslog at its level's priority, without
// a time of its own; stderr (not a terminal) gets warnings and errors only.
func TestSyslogSink(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dial := syslogDial
	syslogDial = func() (*syslog.Writer, error) {
		return syslog.Dial("unixgram", sock, syslog.LOG_USER|syslog.LOG_INFO, "once")
	}
	def := slog.Default()
	t.Cleanup(func() { syslogDial = dial; slog.SetDefault(def) })

	var stderr bytes.Buffer
	a := &app{stderr: &stderr, rawStderr: &stderr, logFormat: "text", logFile: logSyslog}
	log, err := a.logger()
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("task", "t")
	log.Debug("not sent")
	log.Info("start", "attempt", 1)
	log.Warn("end", "state", "failed")
	log.Error("lease lost")
	a.closeLog()

	// Priority = facility user (1) * 8 + severity: info 6, warning 4, err 3.
	want := []string{"<14>", "level=INFO msg=start task=t attempt=1", "<12>", "level=WARN msg=end task=t state=failed", "<11>", "level=ERROR msg=\"lease lost\" task=t"}
	var got []string
	buf := make([]byte, 4096)
	for range 3 {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	for i, g := range got {
		if !strings.HasPrefix(g, want[2*i]) || !strings.Contains(g, " once[") || !strings.HasSuffix(strings.TrimSpace(g), want[2*i+1]) || strings.Contains(g, "time=") {
			t.Errorf("syslog message %d: %q, want %s… once[PID]: %s", i, g, want[2*i], want[2*i+1])
		}
	}
	if s := stderr.String(); strings.Contains(s, "msg=start") || !strings.Contains(s, "msg=end") || !strings.Contains(s, "lease lost") {
		t.Errorf("stderr: %q, want the warning and the error only", s)
	}
}

// FuzzLogLevel: only the four names are levels; anything else is a one-line usage error.
func FuzzLogLevel(f *testing.F) {
	for _, s := range []string{"debug", "info", "warn", "error", "INFO", "warning", "", "info+2", "-4", "debug\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLevel("--log-level", s)
		want, ok := logLevels[s]
		switch {
		case ok && (err != nil || l != want):
			t.Fatalf("%q: %v %v", s, l, err)
		case !ok && err == nil:
			t.Fatalf("%q accepted as %v", s, l)
		case !ok:
			code, msg := classify(err)
			if code != ExitUsage || strings.Contains(msg, "\n") {
				t.Fatalf("%q: %d %q", s, code, msg)
			}
		}
	})
}
