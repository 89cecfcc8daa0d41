package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// asNobody makes e's processes run as uid/gid 65534 (root only), with bin's directory (0700 from
// os.MkdirTemp) opened to them for the rest of the package's tests (TestMain removes it): a
// restore at one test's end would close it under another's running processes.
func asNobody(t *testing.T, e *env) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(e.bin), 0o711); err != nil {
		t.Fatal(err)
	}
	e.nobody = true
}

// TestAnotherUsersHomeExits69 is a crontab of www-data's (or any user's) with the ONCE_HOME of
// root's jobs, /var/lib/once (mode 0700, root's, as the Debian package makes it): the lock
// directory under it cannot even be looked at. That is the contract's 69 (the lock directory
// cannot be used: no permission) with what to do, not 70 "internal error" (which it was).
// As root the test runs the second user as uid 65534; as any other user it makes its own
// ONCE_HOME unreadable (mode 0), which fails the same way.
func TestAnotherUsersHomeExits69(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("run", "--task", "users-a", "--", "true"); r.code != 0 {
		t.Fatalf("setup as this user: %d %s", r.code, r.stderr)
	}
	if os.Geteuid() == 0 {
		// /var/lib/once's layout: the parents searchable by all, the state directory root's 0700.
		for _, p := range []string{filepath.Dir(e.home), filepath.Dir(filepath.Dir(e.home))} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		asNobody(t, e)
	} else {
		if err := os.Chmod(e.home, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(e.home, 0o700) })
	}
	r := e.run("run", "--task", "users-a", "--", "sh", "-c", "echo ran")
	if r.code != 69 || strings.Contains(r.stdout, "ran") {
		t.Fatalf("once run with another user's ONCE_HOME: exit %d, stdout %q, stderr %s; want 69 and nothing run", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"lock directory cannot be used", "permission denied", "ONCE_HOME must be a directory of this user's", "(nothing was run)"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q: %s", w, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "internal error") {
		t.Errorf("stderr calls it an internal error: %s", r.stderr)
	}
}

// nobodyAttr is the process attribute of a process run as uid/gid 65534.
func nobodyAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
}

// TestAnotherUsersReadableHomeNotChowned: root's state directory, readable by others (an
// ONCE_HOME made with install -d -m 755), named in another user's crontab. once refuses it (69),
// and its fix must not be "chown 65534 DIR" alone: that hands root's lock directory and ledger
// to the other user, root's own runs are refused from then on, and their fix is the chown back.
// The fix offers this user a state directory of its own first.
func TestAnotherUsersReadableHomeNotChowned(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a directory of another user's")
	}
	e := newEnv(t)
	if r := e.run("run", "--task", "users-b", "--", "true"); r.code != 0 {
		t.Fatalf("setup as root: %d %s", r.code, r.stderr)
	}
	for _, p := range []string{e.home, filepath.Dir(e.home), filepath.Dir(filepath.Dir(e.home))} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(e.home, "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody(t, e)
	for _, args := range [][]string{{"run", "--task", "users-b", "--", "echo", "ran"}, {"history", "--task", "users-b"}} {
		r := e.run(args...)
		if r.code != 69 || strings.Contains(r.stdout, "ran") {
			t.Errorf("once %v as uid 65534 with root's ONCE_HOME: exit %d, stdout %q, stderr %s; want 69", args, r.code, r.stdout, r.stderr)
		}
		// history only reads: it opens the ledger read-only (a reader trusts the ledger's owner),
		// and names the file this user cannot read (the ledger's marker, 0600) and the fix.
		if args[0] == "history" && strings.Contains(r.stderr, "permission denied; fix: make it readable by this user") {
			continue
		}
		if !strings.Contains(r.stderr, "owned by uid 0, not 65534") || !strings.Contains(r.stderr, "fix: give this user a state directory of its own") {
			t.Errorf("once %v: stderr %s; want the owner named and a directory of this user's offered first", args, r.stderr)
		}
	}
	// Root's runs are as they were.
	e.nobody = false
	if r := e.run("run", "--task", "users-b", "--", "true"); r.code != 0 {
		t.Errorf("root after the refusal: %d %s", r.code, r.stderr)
	}
}
