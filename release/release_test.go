package main

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A release binary is the same bytes when built again from a copy of the checkout somewhere else
// (-trimpath: no path of the machine in it; the stamp from the commit: no clock), and it says
// which version, commit and date it was built from.
//
// Go's build cache keys compiled packages by their contents (with -trimpath, not by their
// directory), so the second build links the packages the first compiled: it checks paths, the
// stamp and the link. ONCE_TEST_RELEASE_COLD=1 gives the second build an empty cache instead,
// which recompiles everything (minutes on two cores).
func TestReleaseBinaryReproducible(t *testing.T) {
	s, bin := hostBinary(t)
	src := copyCheckout(t)
	again := filepath.Join(t.TempDir(), "once")
	if os.Getenv("ONCE_TEST_RELEASE_COLD") != "" {
		t.Setenv("GOCACHE", t.TempDir())
	}
	if err := buildBinary(src, again, platform{"linux", runtime.GOARCH}, s); err != nil {
		t.Fatal(err)
	}
	sameFile(t, bin, again)
	sameFile(t, shimFile(bin), shimFile(again))

	var got struct{ Version, Go, Commit, Date string }
	if err := json.Unmarshal([]byte(mustRun(t, exec.Command(bin, "version", "--json"))), &got); err != nil {
		t.Fatal(err)
	}
	if got.Version != s.Version || got.Commit != s.Commit || got.Date != s.Date.Format(time.RFC3339) {
		t.Errorf("once version --json: %+v; want version %s, commit %s, date %s", got, s.Version, s.Commit, s.Date.Format(time.RFC3339))
	}
	text := mustRun(t, exec.Command(bin, "version"))
	for _, want := range []string{"once " + s.Version + " (go", "\nstores: ", "\ncommit: " + s.Commit + "\n", "\ndate: " + s.Date.Format(time.RFC3339) + "\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("once version printed %q; want it to contain %q", text, want)
		}
	}
	checkStatic(t, bin)
}

// checkStatic: no program interpreter (a static binary runs FROM scratch), built without cgo,
// with -trimpath, and stripped.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not a static binary", bin)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: want -s -w", bin)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["vcs.revision"] != "" {
		t.Errorf("build settings %v: want CGO_ENABLED=0, -trimpath=true and no vcs.* (-buildvcs=false)", settings)
	}
}

// copyCheckout copies the files of the checkout (tracked and new, as they are now) to a directory
// of another name and depth: what a second machine building the same commit has.
func copyCheckout(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "elsewhere", "once-src")
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		from := filepath.Join(root, rel)
		fi, err := os.Lstat(from)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		if err := copyFile(from, filepath.Join(dst, rel), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyFile(from, to string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func TestDebVersion(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3-1"},
		{"v1.2.3-rc.1", "1.2.3~rc.1-1"},
		{"v0.0.0-20261203061335-1000cf5abcde", "0.0.0~20261203061335.1000cf5abcde-1"},
		{"v0.0.0-20261203061335-1000cf5abcde+dirty", "0.0.0~20261203061335.1000cf5abcde+dirty-1"},
	} {
		if got := (stamp{Version: c.in}).debVersion(); got != c.want {
			t.Errorf("debVersion(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// The stamp comes from the commit: SOURCE_DATE_EPOCH and VERSION override it, a bad VERSION is
// refused.
func TestStamp(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1764745200")
	t.Setenv("VERSION", "v1.2.3")
	s, err := readStamp(root)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != "v1.2.3" || !s.Date.Equal(time.Unix(1764745200, 0)) || len(s.Commit) != 40 {
		t.Errorf("stamp %+v", s)
	}
	t.Setenv("VERSION", "1.2.3 ; rm")
	if _, err := readStamp(root); err == nil {
		t.Error("VERSION '1.2.3 ; rm' accepted")
	}
}

// SHA256SUMS is what sha256sum -c reads, over the release files only.
func TestChecksums(t *testing.T) {
	dir := t.TempDir()
	for n, data := range map[string]string{"once-linux-amd64": "a", "once_1.2.3-1_amd64.deb": "b", "notes.txt": "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeChecksums(dir); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  once-linux-amd64\n" +
		"3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  once_1.2.3-1_amd64.deb\n"
	if string(data) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", data, want)
	}
	if p, err := exec.LookPath("sha256sum"); err == nil {
		c := exec.Command(p, "-c", "SHA256SUMS")
		c.Dir = dir
		mustRun(t, c)
	}
}

// debVersionRE is what dpkg takes as an upstream version with a revision (deb-version(7)).
var debVersionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*-1$`)

// Every version the stamp accepts makes a Debian version dpkg takes, and no other is accepted.
func FuzzDebVersion(f *testing.F) {
	for _, s := range []string{"v1.2.3", "v1.2.3-rc.1", "v0.0.0-20261203061335-1000cf5abcde+dirty", "v1.2.3+meta", "1.2.3", "v1.2", "v1.2.3 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if !versionRE.MatchString(v) {
			return
		}
		if d := (stamp{Version: v}).debVersion(); !debVersionRE.MatchString(d) {
			t.Errorf("version %q → Debian version %q: not one dpkg takes", v, d)
		}
		if tag := imageTag(stamp{Version: v}); strings.Contains(tag, "+") || len(tag) > 128 && len(v) <= 128 {
			t.Errorf("version %q → image tag %q", v, tag)
		}
	})
}

// A commit after a release tag gets the pseudo-version Go gives it, which sorts after the release:
// its package upgrades the release's instead of being older than it.
func TestPseudoVersionAfterTag(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	g := func(args ...string) {
		t.Helper()
		c := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	g("init", "-q")
	g("commit", "-q", "--allow-empty", "-m", "a")
	s := stamp{Commit: "1000cf5abcde1000cf5abcde1000cf5abcde1000", Date: time.Unix(1764745200, 0).UTC()}
	for _, c := range []struct{ tag, want string }{
		{"", "v0.0.0-20251203070000-1000cf5abcde"},
		{"v1.2.3", "v1.2.4-0.20251203070000-1000cf5abcde"},
		{"v1.3.0-rc.1", "v1.3.0-rc.1.0.20251203070000-1000cf5abcde"},
	} {
		if c.tag != "" {
			g("tag", c.tag)
		}
		g("commit", "-q", "--allow-empty", "-m", "after "+c.tag)
		v, err := gitVersion(dir, s)
		if err != nil || v != c.want {
			t.Errorf("after tag %q: %q, %v; want %q", c.tag, v, err, c.want)
		}
		if c.tag != "" {
			if p, err := exec.LookPath("dpkg"); err == nil {
				rel, dev := (stamp{Version: c.tag}).debVersion(), (stamp{Version: v}).debVersion()
				if exec.Command(p, "--compare-versions", dev, "gt", rel).Run() != nil {
					t.Errorf("package %s does not sort after the release's %s", dev, rel)
				}
			}
		}
	}
}
