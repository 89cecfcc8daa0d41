package deploy

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// units are the unit files of systemd/, and the names systemd-analyze verifies them as (a template
// as one of its instances).
var units = map[string]string{
	"once-daemon.service": "once-daemon.service",
	"sync@.service":       "sync@orders.service",
	"sync@.timer":         "sync@orders.timer",
}

// unitLine is one KEY=VALUE line of a unit file.
type unitLine struct {
	section, key, value string
	line                int
}

// parseUnit reads a unit file's assignments (comments, blank lines and continuations aside: the
// units here have none of the latter).
func parseUnit(t *testing.T, name string) []unitLine {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []unitLine
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case strings.HasSuffix(l, "\\"):
			t.Fatalf("%s:%d: a continuation line: parseUnit does not read those", name, n)
		case l[0] == '[' && l[len(l)-1] == ']':
			section = l[1 : len(l)-1]
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is neither a section nor KEY=VALUE", name, n, l)
			}
			out = append(out, unitLine{section, strings.TrimSpace(k), strings.TrimSpace(v), n})
		}
	}
	return out
}

func values(lines []unitLine, section, key string) []string {
	var v []string
	for _, l := range lines {
		if l.section == section && l.key == key {
			v = append(v, l.value)
		}
	}
	return v
}

// systemdAnalyze finds systemd-analyze, or skips the test (fails it when ONCE_TEST_REQUIRE asks
// for everything or for systemd, as the test command does).
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if r := os.Getenv("ONCE_TEST_REQUIRE"); r == "all" || strings.Contains(r, "systemd") {
			t.Fatalf("systemd-analyze not found, but ONCE_TEST_REQUIRE=%s requires it: apt-get install systemd", r)
		}
		t.Skip("systemd-analyze not found (Debian package systemd): the unit files are not verified")
	}
	return p
}

// verifyRoot builds a root directory for systemd-analyze verify --root: the system's unit
// directory (for the targets the units name), the units under /etc/systemd/system, and a stub
// executable for every absolute command of their Exec*= lines, so that "/usr/bin/once is not
// executable" does not hide real findings on a machine without once installed.
func verifyRoot(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	sys := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			sys = d
			break
		}
	}
	if sys == "" {
		t.Skip("no systemd unit directory (/usr/lib/systemd/system)")
	}
	if err := copyTree(sys, filepath.Join(root, "usr/lib/systemd/system")); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(root, "etc/systemd/system")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(etc, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range execCommands(data) {
			stub := filepath.Join(root, cmd)
			if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// execCommands are the programs of a unit's Exec*= lines that are absolute paths, prefixes
// (@-:+!) removed and the instance specifier %i filled in as "orders".
func execCommands(unit []byte) []string {
	var out []string
	for _, l := range strings.Split(string(unit), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || !strings.HasPrefix(k, "Exec") {
			continue
		}
		cmd, _, _ := strings.Cut(strings.TrimLeft(v, "@-:+!"), " ")
		if strings.HasPrefix(cmd, "/") {
			out = append(out, strings.ReplaceAll(cmd, "%i", "orders"))
		}
	}
	return out
}

func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, data, 0o644)
		}
		return nil
	})
}

// verify runs systemd-analyze verify on the named units of files and returns what it printed.
// It exits 0 on an unknown key or a bad value (a warning: systemd starts the unit without the
// setting), so any line at all is a finding.
func verify(t *testing.T, files map[string][]byte, names ...string) string {
	t.Helper()
	cmd := exec.Command(systemdAnalyze(t), append([]string{"verify", "--man=no", "--root=" + verifyRoot(t, files)}, names...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Fatalf("systemd-analyze verify: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func unitFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for f := range units {
		data, err := os.ReadFile(filepath.Join("systemd", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = data
	}
	return files
}

// systemd loads every unit file without a warning.
func TestUnitsVerify(t *testing.T) {
	var names []string
	for _, n := range units {
		names = append(names, n)
	}
	if out := verify(t, unitFiles(t), names...); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", strings.Join(names, " "), out)
	}
}

// The check has teeth: a misspelt key and a bad value are found.
func TestUnitsVerifyFindsTypos(t *testing.T) {
	files := unitFiles(t)
	d := string(files["once-daemon.service"])
	for _, c := range []struct{ old, new, want string }{
		{"\nProtectSystem=full\n", "\nProtectSytem=full\n", "Unknown key"},
		{"\nKillMode=mixed\n", "\nKillMode=mixd\n", "kill mode"},
	} {
		if !strings.Contains(d, c.old) {
			t.Fatalf("once-daemon.service has no %q", c.old)
		}
		bad := map[string][]byte{"bad.service": []byte(strings.Replace(d, c.old, c.new, 1))}
		if out := verify(t, bad, "bad.service"); !strings.Contains(out, c.want) {
			t.Errorf("%q → %q: systemd-analyze printed %q; want %q", strings.TrimSpace(c.old), strings.TrimSpace(c.new), out, c.want)
		}
	}
}

// systemdSeconds reads the forms of a systemd time span the units use: "90", "90s", "6min", "1h".
func systemdSeconds(t *testing.T, v string) time.Duration {
	t.Helper()
	for _, u := range []struct {
		suffix string
		d      time.Duration
	}{{"min", time.Minute}, {"h", time.Hour}, {"s", time.Second}, {"", time.Second}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			if i, err := strconv.Atoi(n); err == nil {
				return time.Duration(i) * u.d
			}
		}
	}
	t.Fatalf("time span %q: not a form this test reads", v)
	return 0
}

// The daemon's unit: SIGTERM to the daemon only, a stop timeout above the drain and the grace,
// no restart after a bad jobs file (64), the settings the README promises.
func TestDaemonUnit(t *testing.T) {
	u := parseUnit(t, "systemd/once-daemon.service")
	want := map[string]string{
		"Type":                     "notify",
		"ExecStart":                "/usr/bin/once daemon --jobs /etc/once/jobs.d",
		"KillMode":                 "mixed",
		"Restart":                  "on-failure",
		"RestartPreventExitStatus": "64",
		"StateDirectory":           "once",
		"Environment":              "ONCE_HOME=/var/lib/once",
		"EnvironmentFile":          "-/etc/once/daemon.env",
		"NoNewPrivileges":          "yes",
		"ProtectSystem":            "full",
		"PrivateTmp":               "yes",
	}
	for k, v := range want {
		if got := values(u, "Service", k); len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %q, want %q", k, got, v)
		}
	}
	if r := values(u, "Service", "ExecReload"); len(r) == 0 || r[len(r)-1] != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload %q: want it to end with /bin/kill -HUP $MAINPID", r)
	}
	stop := values(u, "Service", "TimeoutStopSec")
	if len(stop) != 1 || systemdSeconds(t, stop[0]) <= drainDefault+graceDefault {
		t.Errorf("TimeoutStopSec %q: want one, above the drain and the grace (%v)", stop, drainDefault+graceDefault)
	}
}

// The timer example: a persistent timer and a oneshot once run that takes 75 (busy) as success.
func TestSyncUnits(t *testing.T) {
	s := parseUnit(t, "systemd/sync@.service")
	for k, v := range map[string]string{"Type": "oneshot", "SuccessExitStatus": "75", "KillMode": "mixed"} {
		if got := values(s, "Service", k); len(got) != 1 || got[0] != v {
			t.Errorf("sync@.service [Service] %s = %q, want %q", k, got, v)
		}
	}
	if x := values(s, "Service", "ExecStart"); len(x) != 1 || !strings.HasPrefix(x[0], "/usr/bin/once run ") {
		t.Errorf("sync@.service ExecStart %q: want once run", x)
	}
	tm := parseUnit(t, "systemd/sync@.timer")
	if got := values(tm, "Timer", "Persistent"); len(got) != 1 || got[0] != "true" {
		t.Errorf("sync@.timer Persistent = %q, want true", got)
	}
}
