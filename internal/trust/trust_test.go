//go:build unix

package trust_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
)

const nobody = 65534

// base is a private directory to build cases in (t.TempDir's parents are 0700 and ours).
func base(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func mkdir(t *testing.T, p string, mode uint32) string {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
	return p
}

// chmod sets raw mode bits (os.Chmod takes os.ModeSticky and os.ModeSetgid, not 01000 and 02000).
func chmod(t *testing.T, p string, mode uint32) {
	t.Helper()
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
}

func wantUnsafe(t *testing.T, err error, fix string) {
	t.Helper()
	if !errors.Is(err, trust.ErrUnsafe) {
		t.Fatalf("want ErrUnsafe, got %v", err)
	}
	if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), fix) {
		t.Fatalf("want one line containing %q, got %q", fix, err)
	}
}

func TestDirPrivateAndMissing(t *testing.T) {
	b := base(t)
	d := mkdir(t, filepath.Join(b, "home"), 0o700)
	if real, ok, err := trust.Dir(d, trust.Policy{}); err != nil || !ok || real != d {
		t.Fatalf("private dir: %q %v %v", real, ok, err)
	}
	if _, ok, err := trust.Dir(filepath.Join(b, "missing", "home"), trust.Policy{}); err != nil || ok {
		t.Fatalf("missing dir: %v %v", ok, err)
	}
	if err := trust.Parents(filepath.Join(b, "missing", "home")); err != nil {
		t.Fatalf("missing parents: %v", err)
	}
	ro := mkdir(t, filepath.Join(b, "ro"), 0o755)
	if _, _, err := trust.Dir(ro, trust.Policy{}); err != nil {
		t.Fatalf("0755 dir: %v", err)
	}
}

func TestDirWritableByOthers(t *testing.T) {
	b := base(t)
	open := mkdir(t, filepath.Join(b, "open"), 0o777)
	_, _, err := trust.Dir(open, trust.Policy{})
	wantUnsafe(t, err, "chmod 700 "+open)
	// Even sticky: others could create the files SQLite opens next to the database.
	sticky := mkdir(t, filepath.Join(b, "sticky"), 0o1777)
	_, _, err = trust.Dir(sticky, trust.Policy{})
	wantUnsafe(t, err, "mkdir -m 700 "+filepath.Join(sticky, "once"))
	if strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a sticky shared directory (/tmp) must not be chmodded: %v", err)
	}
	// As a parent, sticky is fine and non-sticky is not.
	mkdir(t, filepath.Join(sticky, "home"), 0o700)
	if _, _, err := trust.Dir(filepath.Join(sticky, "home"), trust.Policy{}); err != nil {
		t.Fatalf("private dir in a sticky one: %v", err)
	}
	mkdir(t, filepath.Join(open, "home"), 0o700)
	_, _, err = trust.Dir(filepath.Join(open, "home"), trust.Policy{})
	wantUnsafe(t, err, "chmod o-w "+open)
	wantUnsafe(t, trust.Parents(filepath.Join(open, "home", "locks")), "chmod o-w "+open)
}

func TestDirOwnedByAnother(t *testing.T) {
	asRoot(t)
	b := base(t)
	theirs := mkdir(t, filepath.Join(b, "theirs"), 0o700)
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, _, err := trust.Dir(theirs, trust.Policy{})
	wantUnsafe(t, err, "chown 0 "+theirs)
	// A home of ours in a directory of theirs: they can rename it away and put theirs in place.
	if err := os.Chmod(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	mine := mkdir(t, filepath.Join(theirs, "home"), 0o700)
	_, _, err = trust.Dir(mine, trust.Policy{})
	wantUnsafe(t, err, theirs+" is owned by uid 65534")
	wantUnsafe(t, trust.Parents(filepath.Join(mine, "locks")), theirs+" is owned by uid 65534")
}

func TestSymlinks(t *testing.T) {
	b := base(t)
	real := mkdir(t, filepath.Join(b, "real"), 0o700)
	link := filepath.Join(b, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	// A link of ours (or root's) to a private directory is followed: only we could repoint it.
	if got, ok, err := trust.Dir(link, trust.Policy{}); err != nil || !ok || got != real {
		t.Fatalf("own link: %q %v %v", got, ok, err)
	}
	// Through links in the middle of the path, with .. in a target.
	mkdir(t, filepath.Join(real, "sub"), 0o700)
	up := filepath.Join(b, "up")
	if err := os.Symlink("real/sub/..", up); err != nil {
		t.Fatal(err)
	}
	if got, _, err := trust.Dir(filepath.Join(up, "sub"), trust.Policy{}); err != nil || got != filepath.Join(real, "sub") {
		t.Fatalf("link with ..: %q %v", got, err)
	}
	loop := filepath.Join(b, "loop")
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	if _, _, err := trust.Dir(loop, trust.Policy{}); err == nil {
		t.Fatal("a symlink loop was accepted")
	}

	asRoot(t)
	theirLink := filepath.Join(b, "their-link")
	if err := os.Symlink("real", theirLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirLink, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, _, err := trust.Dir(theirLink, trust.Policy{})
	wantUnsafe(t, err, "symbolic link owned by uid 65534")
	theirDir := mkdir(t, filepath.Join(b, "their-dir"), 0o700)
	if err := os.Chown(theirDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	toTheirs := filepath.Join(b, "to-theirs")
	if err := os.Symlink(theirDir, toTheirs); err != nil {
		t.Fatal(err)
	}
	_, _, err = trust.Dir(toTheirs, trust.Policy{})
	wantUnsafe(t, err, "chown 0 "+theirDir)
}

func TestFile(t *testing.T) {
	b := base(t)
	p := filepath.Join(b, "once.db")
	if ok, err := trust.File(p, trust.Policy{}); ok || err != nil {
		t.Fatalf("missing: %v %v", ok, err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := trust.File(p, trust.Policy{}); !ok || err != nil {
		t.Fatalf("private file: %v %v", ok, err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := trust.File(p, trust.Policy{})
	wantUnsafe(t, err, "chmod 600 "+p)
	link := filepath.Join(b, "once.db-wal")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	_, err = trust.File(link, trust.Policy{})
	wantUnsafe(t, err, "symbolic link")
	_, err = trust.File(b, trust.Policy{})
	wantUnsafe(t, err, "not a regular file")

	asRoot(t)
	theirs := filepath.Join(b, "once.db-shm")
	if err := os.WriteFile(theirs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, err = trust.File(theirs, trust.Policy{})
	wantUnsafe(t, err, "chown 0 "+theirs)
}

func TestGroupPolicy(t *testing.T) {
	asRoot(t)
	const g = 4242 // no such group needed: ownership is by number
	pol := trust.Policy{Group: g, Shared: true}
	b := base(t)
	d := mkdir(t, filepath.Join(b, "shared"), 0o2770)
	if err := os.Chown(d, 0, g); err != nil {
		t.Fatal(err)
	}
	chmod(t, d, 0o2770) // chown clears setgid
	if _, _, err := trust.Dir(d, pol); err != nil {
		t.Fatalf("root:%d 2770: %v", g, err)
	}
	// Without the opt-in the same directory is refused.
	_, _, err := trust.Dir(d, trust.Policy{})
	wantUnsafe(t, err, "chmod 700 "+d)
	chmod(t, d, 0o770) // no setgid: members' files would get their own group
	_, _, err = trust.Dir(d, pol)
	wantUnsafe(t, err, "chmod 2770 "+d)
	chmod(t, d, 0o2777)
	_, _, err = trust.Dir(d, pol)
	wantUnsafe(t, err, "chmod 2770 "+d)
	chmod(t, d, 0o2770)
	f := filepath.Join(d, "once.db")
	if err := os.WriteFile(f, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, nobody, g); err != nil { // any member may own a file
		t.Fatal(err)
	}
	if _, err := trust.File(f, pol); err != nil {
		t.Fatalf("member's 0660 file: %v", err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = trust.File(f, pol)
	wantUnsafe(t, err, "chmod 660 "+f)
	if err := os.Chmod(f, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, err = trust.File(f, pol)
	wantUnsafe(t, err, "chgrp 4242 "+f)
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"/var/lib/once": "/var/lib/once", "/a b": "'/a b'", "it's": `'it'\''s'`, "": "''", "$(x)": "'$(x)'"} {
		if got := trust.Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A parent writable by this process's own group is accepted (user-private-group systems create
// ~/.local 0775 under umask 002); by another group, refused.
func TestGroupWritableParent(t *testing.T) {
	asRoot(t)
	b := base(t)
	p := mkdir(t, filepath.Join(b, "p"), 0o770)
	if err := os.Chown(p, 0, os.Getegid()); err != nil {
		t.Fatal(err)
	}
	home := mkdir(t, filepath.Join(p, "home"), 0o700)
	if _, _, err := trust.Dir(home, trust.Policy{}); err != nil {
		t.Fatalf("parent writable by our own group: %v", err)
	}
	if err := os.Chown(p, 0, 4242); err != nil {
		t.Fatal(err)
	}
	_, _, err := trust.Dir(home, trust.Policy{})
	wantUnsafe(t, err, "chmod g-w "+p)
}

// A Reader trusts the state of the user it names as Owner (a ledger read by a monitoring user), and
// still nobody else's: not a third user's file in it, not a directory others can write.
func TestReaderTrustsOwner(t *testing.T) {
	asRoot(t)
	b := base(t)
	theirs := mkdir(t, filepath.Join(b, "theirs"), 0o755)
	f := filepath.Join(theirs, "once.db")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{theirs, f} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := trust.Dir(theirs, trust.Policy{})
	wantUnsafe(t, err, "is owned by uid 65534")
	reader := trust.Policy{Reader: true, Owner: nobody}
	if _, _, err := trust.Dir(theirs, reader); err != nil {
		t.Fatalf("a reader of uid 65534's directory: %v", err)
	}
	if _, err := trust.File(f, reader); err != nil {
		t.Fatalf("a reader of uid 65534's file: %v", err)
	}
	if err := os.Chown(f, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	_, err = trust.File(f, reader)
	wantUnsafe(t, err, "not by uid 65534 who owns its directory")
	chmod(t, theirs, 0o775)
	_, _, err = trust.Dir(theirs, reader)
	wantUnsafe(t, err, "chmod 700")
	// Above the directory, the owner may own the parents too; a third user may not.
	chmod(t, theirs, 0o755)
	sub := mkdir(t, filepath.Join(theirs, "home"), 0o755)
	if err := os.Chown(sub, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if _, _, err := trust.Dir(sub, reader); err != nil {
		t.Fatalf("a reader, below a parent of the owner's: %v", err)
	}
	_, _, err = trust.Dir(sub, trust.Policy{Reader: true, Owner: 1234})
	wantUnsafe(t, err, "is owned by uid 65534")
}

// A Reader's Owner is trusted only for what only root or the owner could have made: a directory of
// uid 65534's in a sticky directory anyone may add to (a pre-created /tmp/once-svc) is refused.
func TestReaderOwnerNotInOpenDir(t *testing.T) {
	asRoot(t)
	b := base(t)
	for _, mode := range []uint32{0o1777, 0o775} {
		open := mkdir(t, filepath.Join(b, fmt.Sprintf("open%o", mode)), mode)
		theirs := mkdir(t, filepath.Join(open, "svc"), 0o755)
		if err := os.Chown(theirs, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, _, err := trust.Dir(theirs, trust.Policy{Reader: true, Owner: nobody})
		wantUnsafe(t, err, "which others can write")
		// The same directory of this user's is not the Owner's exception: the rules as before.
		if err := os.Chown(theirs, 0, 0); err != nil {
			t.Fatal(err)
		}
		if mode&0o1000 != 0 {
			if _, _, err := trust.Dir(theirs, trust.Policy{Reader: true, Owner: nobody}); err != nil {
				t.Fatalf("root's directory in a sticky one: %v", err)
			}
		}
	}
}
