package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/supervise"
)

// shimOf runs `once run` from the binary at exe and returns the argv of the command's parent:
// the shim that supervised it.
func shimOf(t *testing.T, e *env, exe string) string {
	t.Helper()
	e.bin = exe
	out := filepath.Join(t.TempDir(), "parent")
	r := e.run("run", "--task", "shim", "--", "sh", "-c", `tr '\0' ' ' < /proc/$PPID/cmdline > `+out)
	if r.code != 0 {
		t.Fatalf("once run: %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// copyBin copies the built once (and, with shim, once-shim) into a new private directory.
func copyBin(t *testing.T, shim bool) string {
	t.Helper()
	dir := t.TempDir()
	cp := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cp(bin, filepath.Join(dir, "once"))
	if shim {
		cp(filepath.Join(filepath.Dir(bin), supervise.ShimName), filepath.Join(dir, supervise.ShimName))
	}
	return filepath.Join(dir, "once")
}

// TestDedicatedShim: once starts once-shim from beside itself when it is there and trusted, and
// re-executes itself as the shim otherwise (no once-shim; one others can write or own; a symbolic
// link; a second hard link; one that cannot run; one of another protocol version, which answers
// "proto"; the last two cost a second start, once per process); every run
// works. The rest of this package runs with once-shim beside once (TestMain), kill -9 of once
// included; the supervise package's tests and internal/chaos run once re-executed.
func TestDedicatedShim(t *testing.T) {
	e := newEnv(t)
	self := "/proc/self/exe " + supervise.ShimArg + " "

	exe := copyBin(t, true)
	if got := shimOf(t, e, exe); !strings.HasPrefix(got, filepath.Join(filepath.Dir(exe), supervise.ShimName)+" ") {
		t.Errorf("with once-shim beside once, the shim was %q", got)
	}
	if got := shimOf(t, e, copyBin(t, false)); !strings.HasPrefix(got, self) {
		t.Errorf("without once-shim, the shim was %q, want once itself", got)
	}

	writable := copyBin(t, true)
	if err := os.Chmod(filepath.Join(filepath.Dir(writable), supervise.ShimName), 0o775); err != nil {
		t.Fatal(err)
	}
	if got := shimOf(t, e, writable); !strings.HasPrefix(got, self) {
		t.Errorf("a group-writable once-shim was used: %q", got)
	}

	if os.Geteuid() == 0 { // owned by another user (nobody)
		foreign := copyBin(t, true)
		if err := os.Chown(filepath.Join(filepath.Dir(foreign), supervise.ShimName), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if got := shimOf(t, e, foreign); !strings.HasPrefix(got, self) {
			t.Errorf("a once-shim owned by another user was used: %q", got)
		}
	}

	linked := copyBin(t, false)
	if err := os.Symlink(filepath.Join(filepath.Dir(bin), supervise.ShimName), filepath.Join(filepath.Dir(linked), supervise.ShimName)); err != nil {
		t.Fatal(err)
	}
	if got := shimOf(t, e, linked); !strings.HasPrefix(got, self) {
		t.Errorf("a once-shim that is a symbolic link was used: %q", got)
	}

	// ../libexec/once/once-shim from once's directory, as the Debian package installs it.
	root := t.TempDir()
	for _, d := range []string{"bin", "libexec/once"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	built := copyBin(t, true)
	for from, to := range map[string]string{built: "bin/once", filepath.Join(filepath.Dir(built), supervise.ShimName): "libexec/once/" + supervise.ShimName} {
		if err := os.Rename(from, filepath.Join(root, to)); err != nil {
			t.Fatal(err)
		}
	}
	if got := shimOf(t, e, filepath.Join(root, "bin/once")); !strings.HasPrefix(got, filepath.Join(root, "libexec/once", supervise.ShimName)+" ") {
		t.Errorf("with once-shim in ../libexec/once, the shim was %q", got)
	}

	// A second hard link: someone could have linked a file of root's there.
	hard := copyBin(t, true)
	if err := os.Link(filepath.Join(filepath.Dir(hard), supervise.ShimName), filepath.Join(filepath.Dir(hard), "second-link")); err != nil {
		t.Fatal(err)
	}
	if got := shimOf(t, e, hard); !strings.HasPrefix(got, self) {
		t.Errorf("a once-shim with two links was used: %q", got)
	}

	// One that cannot run (another architecture's, a truncated copy): once falls back.
	broken := copyBin(t, false)
	if err := os.WriteFile(filepath.Join(filepath.Dir(broken), supervise.ShimName), []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shimOf(t, e, broken); !strings.HasPrefix(got, self) {
		t.Errorf("after a once-shim that cannot run, the shim was %q", got)
	}

	// A once-shim of another protocol version: it answers "proto" on the status pipe and exits.
	other := copyBin(t, false)
	fake := "#!/bin/sh\necho proto once-shim-v0 >&3\nexit 64\n"
	if err := os.WriteFile(filepath.Join(filepath.Dir(other), supervise.ShimName), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shimOf(t, e, other); !strings.HasPrefix(got, self) {
		t.Errorf("after a shim of another protocol, the shim was %q", got)
	}

	// One that answers "proto" and stays (not the shim it claims to be): it is killed, not waited for.
	lingering := copyBin(t, false)
	fake = "#!/bin/sh\necho proto once-shim-v0 >&3\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(filepath.Dir(lingering), supervise.ShimName), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := shimOf(t, e, lingering); !strings.HasPrefix(got, self) || time.Since(start) > 20*time.Second {
		t.Errorf("after a lingering shim of another protocol: shim %q, %s", got, time.Since(start))
	}
}
