package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var testDeb struct {
	once sync.Once
	path string
	err  error
}

// buildTestDeb packages the host binary, twice, once per test binary: the package must be the
// same bytes both times.
func buildTestDeb(t *testing.T) (stamp, string) {
	t.Helper()
	s, bin := hostBinary(t)
	testDeb.once.Do(func() {
		arch := strings.TrimPrefix(filepath.Base(bin), "once-linux-")
		dir := filepath.Dir(bin)
		var sums []string
		for _, n := range []string{"b", "a"} {
			testDeb.path = filepath.Join(dir, n+"-"+debName(s, arch))
			if testDeb.err = buildDeb(root, dir, bin, arch, testDeb.path, s); testDeb.err != nil {
				return
			}
			sum, _ := fileSHA256(testDeb.path)
			sums = append(sums, sum)
		}
		if sums[0] != sums[1] {
			testDeb.err = fmt.Errorf("two builds of the package differ (sha256 %s, %s): not reproducible", sums[0], sums[1])
		}
	})
	if testDeb.err != nil {
		t.Fatal(testDeb.err)
	}
	return s, testDeb.path
}

// debWant are files of the package and their modes as dpkg-deb -c lists them.
var debWant = map[string]string{
	"./usr/bin/once":                                      "-rwxr-xr-x root/root",
	"./usr/libexec/once/once-shim":                        "-rwxr-xr-x root/root",
	"./usr/share/man/man1/once.1.gz":                      "-rw-r--r-- root/root",
	"./usr/share/man/man1/once-run.1.gz":                  "-rw-r--r-- root/root",
	"./usr/share/man/man1/once-daemon.1.gz":               "-rw-r--r-- root/root",
	"./usr/share/bash-completion/completions/once":        "-rw-r--r-- root/root",
	"./usr/share/zsh/vendor-completions/_once":            "-rw-r--r-- root/root",
	"./usr/share/fish/vendor_completions.d/once.fish":     "-rw-r--r-- root/root",
	"./lib/systemd/system/once-daemon.service":            "-rw-r--r-- root/root",
	"./usr/share/doc/once/examples/systemd/sync@.service": "-rw-r--r-- root/root",
	"./usr/share/doc/once/examples/systemd/sync@.timer":   "-rw-r--r-- root/root",
	"./usr/share/doc/once/copyright":                      "-rw-r--r-- root/root",
	"./usr/share/doc/once/changelog.Debian.gz":            "-rw-r--r-- root/root",
	"./etc/once/":        "drwxr-xr-x root/root",
	"./etc/once/jobs.d/": "drwxr-xr-x root/root",
}

// The package holds what it promises, and lintian finds no error or warning in it (the
// overrides in debian/lintian-overrides say why for each one it may not report).
func TestDebPackage(t *testing.T) {
	dpkgDeb := needTool(t, "dpkg-deb", "dpkg")
	s, deb := buildTestDeb(t)
	listing := mustRun(t, exec.Command(dpkgDeb, "-c", deb))
	for path, mode := range debWant {
		found := false
		for _, l := range strings.Split(listing, "\n") {
			f := strings.Fields(l)
			if len(f) >= 6 && f[len(f)-1] == path {
				found = true
				if got := f[0] + " " + f[1]; got != mode {
					t.Errorf("%s: %s, want %s", path, got, mode)
				}
			}
		}
		if !found {
			t.Errorf("the package has no %s", path)
		}
	}
	info := mustRun(t, exec.Command(dpkgDeb, "-f", deb, "Package", "Version", "Architecture"))
	if want := "Version: " + s.debVersion() + "\n"; !strings.Contains(info, want) {
		t.Errorf("control fields:\n%s\nwant %q", info, want)
	}
	lintian := needTool(t, "lintian", "lintian")
	out, err := exec.Command(lintian, "--fail-on", "error,warning", "--display-level", ">=warning", deb).CombinedOutput()
	if err != nil {
		t.Errorf("lintian %s: %v\n%s", filepath.Base(deb), err, out)
	}
	t.Logf("lintian:\n%s", out)
}

// What a newcomer does: dpkg -i, then once run from PATH, as root and as another user; the daemon
// unit passes systemd-analyze verify where it is installed; dpkg --purge leaves nothing behind.
func TestDebInstall(t *testing.T) {
	needRoot(t, "dpkg -i")
	dpkg := needTool(t, "dpkg", "dpkg")
	// The test installs and purges the package: it must not take a once of the machine's with it.
	if exec.Command("dpkg-query", "-s", "once").Run() == nil {
		require(t, "root", "the package once is installed: the test would purge it; dpkg --purge once to run the test")
	}
	for _, p := range []string{"/usr/bin/once", "/var/lib/once", "/etc/once"} {
		stash(t, p)
	}
	_, deb := buildTestDeb(t)
	mustRun(t, exec.Command(dpkg, "-i", deb))
	purged := false
	t.Cleanup(func() {
		if !purged {
			exec.Command(dpkg, "--purge", "once").Run()
		}
	})
	// What must go on purge: the package's files (not the directories it shares with others, such
	// as /usr/bin) and its own directories.
	gone := []string{"/var/lib/once", "/etc/once", "/usr/share/doc/once"}
	for _, p := range strings.Fields(mustRun(t, exec.Command("dpkg-query", "-L", "once"))) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			gone = append(gone, p)
		}
	}
	if fi, err := os.Stat("/var/lib/once"); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/once after install: %v, %v; want a directory of mode 0700", fi, err)
	}
	newcomerRuns(t, "root", os.Getenv("HOME"), nil)
	home := t.TempDir()
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	newcomerRuns(t, "nobody", home, []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"})
	verifyInstalledUnit(t)
	// An admin's systemctl enable goes with the purge: no link left to a unit that is gone.
	if sc, err := exec.LookPath("systemctl"); err == nil {
		mustRun(t, exec.Command(sc, "enable", "once-daemon.service"))
		gone = append(gone, "/etc/systemd/system/multi-user.target.wants/once-daemon.service")
	}

	// An upgrade keeps the state directory's owner: systemd's StateDirectory= gives it to the
	// daemon's User=, and a running daemon must not be locked out of its ledger by the postinst.
	if err := os.Chown("/var/lib/once", 65534, 65534); err != nil {
		t.Fatal(err)
	}
	mustRun(t, exec.Command(dpkg, "-i", deb))
	if fi, err := os.Stat("/var/lib/once"); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/once after an upgrade: %v, %v; want it still 65534's, mode 0700", fi, err)
	}

	mustRun(t, exec.Command(dpkg, "--purge", "once"))
	purged = true
	for _, p := range gone {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there after dpkg --purge once", p)
		}
	}
	if exec.Command("dpkg-query", "-s", "once").Run() == nil {
		t.Error("dpkg-query -s once: still known to dpkg after the purge")
	}
}

// stash moves p (a once built by hand, the state of another test that ran once as root) out of
// the package's way until the test ends.
func stash(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err != nil {
		return
	}
	aside := p + ".before-release-test"
	if err := os.Rename(p, aside); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s was there: moved to %s until the test ends", p, aside)
	t.Cleanup(func() {
		os.RemoveAll(p)
		if err := os.Rename(aside, p); err != nil {
			t.Errorf("put %s back: %v", p, err)
		}
	})
}

// newcomerRuns: once run --task t --per day -- true runs, then skips (today's slot succeeded),
// as a user with a clean environment would, the binary found through PATH.
func newcomerRuns(t *testing.T, user, home string, as []string) {
	t.Helper()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8"}
	once := func(args ...string) *exec.Cmd {
		argv := append(append(append([]string{}, as...), "env", "-i"), env...)
		argv = append(argv, append([]string{"once"}, args...)...)
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir = "/"
		return c
	}
	awayFromMidnight(t)
	mustRun(t, once("run", "--task", "t", "--per", "day", "--", "true"))
	mustRun(t, once("run", "--task", "t", "--per", "day", "--", "true"))
	// The installed once starts the installed shim, not itself re-executed.
	if shim := mustRun(t, once("run", "--task", "shim", "--", "sh", "-c", `tr '\0' ' ' < /proc/$PPID/cmdline`)); !strings.HasPrefix(shim, "/usr/libexec/once/once-shim ") {
		t.Errorf("as %s: the command's shim was %q; want /usr/libexec/once/once-shim", user, shim)
	}
	var hist []struct{ State string }
	if err := json.Unmarshal([]byte(mustRun(t, once("history", "--task", "t", "--json"))), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].State != "skipped" || hist[1].State != "succeeded" {
		t.Errorf("as %s: history %+v; want the run succeeded, then the second skipped", user, hist)
	}
}

func verifyInstalledUnit(t *testing.T) {
	t.Helper()
	sa := needTool(t, "systemd-analyze", "systemd")
	out, err := exec.Command(sa, "verify", "--man=no", "/lib/systemd/system/once-daemon.service").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify once-daemon.service: %v\n%s", err, out)
	}
}
