//go:build unix

// Package trust decides whether once's local state — the lock directory, the embedded ledger and
// its files — can be changed by anyone but this user and root. That state decides what runs: a
// user who can replace the ledger can make root's job skip ("already succeeded") or resolve a
// slot in someone else's name.
//
// The rules, for a path P:
//   - every directory from / down to P's directory is owned by root or this user, and is not
//     writable by others unless it is sticky (like /tmp, where others cannot rename what is
//     ours) or its group is this process's own group (user-private-group systems);
//   - every symbolic link on the way is owned by root or this user (the owner of a link can
//     point it elsewhere), and is followed;
//   - the directory holding the state (Dir) is owned by this user and writable by nobody else
//     (shared with a group only on explicit opt-in, Policy.Group);
//   - a state file (File) is a regular file, never a symbolic link, owned by this user and not
//     writable by group or others.
//
// Errors match ErrUnsafe and are one line ending in the command that fixes the problem.
package trust

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe matches every error of this package about a path others could change.
var ErrUnsafe = errors.New("unsafe path")

type unsafeError struct{ msg string }

func (e *unsafeError) Error() string        { return e.msg }
func (e *unsafeError) Is(target error) bool { return target == ErrUnsafe }

func unsafef(format string, a ...any) error { return &unsafeError{msg: fmt.Sprintf(format, a...)} }

// Policy says who besides this user may write the state directory and its files.
type Policy struct {
	// Group, when Shared, is the group whose members share the directory and its files: the
	// directory must be owned by root or this user, belong to Group, carry the setgid bit and not
	// be writable by others; the files must belong to Group and not be writable by others (any
	// member may own them).
	Group  int
	Shared bool
	// Reader is for a process that only reads the state, never writes it (`once status` by a
	// monitoring user): the directory, its files and the directories and links above it may then
	// belong to Owner, the user whose state it is, as well as to this user and root. Nobody else
	// may change them still: what is read must be what its owner wrote.
	Reader bool
	Owner  uint32
}

// owns says whether uid may own what p trusts besides root: this user, or Owner for a Reader.
func (p Policy) owns(uid uint32) bool {
	return uid == uint32(os.Geteuid()) || p.Reader && uid == p.Owner
}

// maxLinks bounds the symbolic links followed on one path, as the kernel does (ELOOP).
const maxLinks = 40

// Parents checks every directory from / down to path itself (path included, as a directory
// others must not be able to rename things in) and the symbolic links on the way. Missing
// components are no error: the caller creates them.
func Parents(path string) error {
	_, _, _, err := resolve(path, true, Policy{})
	return err
}

// Dir checks dir as the directory that holds the state, and everything above it. It returns the
// real path (symbolic links followed) and whether it exists; a missing dir is no error.
func Dir(dir string, p Policy) (real string, exists bool, err error) {
	real, st, exists, err := resolve(dir, false, p)
	if err != nil || !exists {
		return real, exists, err
	}
	return real, true, checkDir(real, &st, p)
}

// File checks the state file path (missing is no error) in a directory already checked by Dir.
func File(path string, p Policy) (exists bool, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, Stat(path, &st, p)
}

// Stat checks the Lstat or Fstat st of state file path.
func Stat(path string, st *unix.Stat_t, p Policy) error {
	euid := uint32(os.Geteuid())
	q := Quote(path)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		target, err := os.Readlink(path)
		if err != nil {
			target = "TARGET"
		} else if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		return unsafef("%s is a symbolic link, which could point anywhere; fix: replace it with the file it points to: mv %s %s", path, Quote(target), q)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return unsafef("%s is not a regular file; fix: move it away (mv %s %s.bad)", path, q, q)
	case p.Shared && st.Gid != uint32(p.Group):
		return unsafef("%s belongs to group %d, not the shared group %d; fix: chgrp %d %s", path, st.Gid, p.Group, p.Group, q)
	case p.Shared && st.Mode&0o002 != 0:
		return unsafef("%s can be written by any user (mode %#o); fix: chmod 660 %s", path, st.Mode&0o7777, q)
	case !p.Shared && !p.owns(st.Uid):
		if p.Reader {
			return unsafef("%s is owned by uid %d, not by uid %d who owns its directory, and could have written anything in it; fix, if you trust its content: chown %d %s", path, st.Uid, p.Owner, p.Owner, q)
		}
		return unsafef("%s is owned by uid %d, not %d, who could have written anything in it; fix, if you trust its content: chown %d %s", path, st.Uid, euid, euid, q)
	case !p.Shared && st.Mode&0o022 != 0:
		return unsafef("%s can be written by group or others (mode %#o); fix: chmod 600 %s", path, st.Mode&0o7777, q)
	}
	return nil
}

// Config checks path, a file or a directory of files whose content decides what runs as this
// user (once daemon's jobs): path and every directory above it may be changed by root and this
// user only. A missing path is no error (the caller says so). Unlike a parent, a sticky directory
// is no exception: anyone may add a file to one.
func Config(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, st, exists, err := resolve(abs, false, Policy{})
	if err != nil || !exists {
		return err
	}
	return checkConfig(real, &st)
}

// ConfigEntry checks a regular file of a directory that Config checked (its Lstat). A link or
// anything else is left to the caller, which refuses it with its own reason (a link's mode says
// nothing: chmod would change its target).
func ConfigEntry(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return checkConfig(path, &st)
}

// checkConfig applies the rule of a file or directory whose content decides what runs: owned by
// root or this user, and writable by nobody else, as cron requires of a crontab. A directory on a
// read-only mount passes whatever its mode (a Kubernetes ConfigMap volume is a 0777 directory
// mounted read-only); a file does not: the same file may be writable through another mount (a
// read-only bind mount of a directory others write), so its own mode must say no.
func checkConfig(path string, st *unix.Stat_t) error {
	euid := uint32(os.Geteuid())
	q := Quote(path)
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case st.Uid != 0 && st.Uid != euid:
		return unsafef("%s is owned by uid %d, who could make this user run anything; fix: chown %d %s", path, st.Uid, euid, q)
	case st.Mode&0o022 != 0 && !(dir && readOnly(path)):
		return unsafef("%s can be written by group or others (mode %#o), who could make this user run anything; fix: chmod go-w %s", path, st.Mode&0o7777, q)
	}
	return nil
}

// OwnDir checks dir (when it exists) as a directory of this user's that nobody else can write:
// not a link, owned by this user, no group or other write. The directories above it are not
// checked (a log directory under a root-owned, group-writable /var/log is fine).
func OwnDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("%s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unsafef("%s is a symbolic link, which could point anywhere; fix: give the real directory", dir)
	}
	return checkDir(dir, &st, Policy{})
}

// checkDir applies the rule of the directory that holds the state.
func checkDir(dir string, st *unix.Stat_t, p Policy) error {
	euid := uint32(os.Geteuid())
	q := Quote(dir)
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return unsafef("%s is not a directory; fix: move it away (mv %s %s.bad)", dir, q, q)
	case p.Shared && st.Uid != euid && st.Uid != 0:
		return unsafef("shared directory %s is owned by uid %d; fix: chown 0 %s", dir, st.Uid, q)
	case p.Shared && (st.Gid != uint32(p.Group) || st.Mode&0o002 != 0 || st.Mode&unix.S_ISGID == 0):
		return unsafef("shared directory %s must belong to group %d, carry the setgid bit and not be writable by others (group %d, mode %#o); fix: chgrp %d %s && chmod 2770 %s",
			dir, p.Group, st.Gid, st.Mode&0o7777, p.Group, q, q)
	case !p.Shared && !p.owns(st.Uid):
		return unsafef("%s", OtherOwner(dir, st.Uid))
	case !p.Shared && st.Mode&unix.S_ISVTX != 0 && st.Mode&0o002 != 0:
		// /tmp, /dev/shm: a directory everyone shares. Its mode is not to be changed (a chmod 700
		// as root breaks every other user of it): the state goes in a directory of its own.
		return unsafef("%s is a directory every user can add to (mode %#o), where anyone could have made once's files first; fix: keep once's state in a directory of its own (mkdir -m 700 %s), not in %s itself; do not chmod %s",
			dir, st.Mode&0o7777, Quote(filepath.Join(dir, "once")), q, q)
	case !p.Shared && st.Mode&0o022 != 0:
		return unsafef("%s can be written by group or others (mode %#o); fix: chmod 700 %s", dir, st.Mode&0o7777, q)
	}
	return nil
}

// OtherOwner is the refusal of a state directory dir owned by uid owner, who is not this user:
// most often another user's state (root's /var/lib/once named in www-data's crontab), which the
// other user's runs need as it is. So a chown comes second, for a directory that is this user's:
// chowning another user's state to this one breaks that user's runs, whose refusal then offers
// the chown back.
func OtherOwner(dir string, owner uint32) string {
	euid := os.Geteuid()
	return fmt.Sprintf("%s is owned by uid %d, not %d: that user could swap in their own files; fix: give this user a state directory of its own (ONCE_HOME, or the path in the DSN; users share a ledger through a shared store, a ?group= SQLite file or a server, not through one user's directory), or chown %d %s if the directory is this user's",
		dir, owner, euid, euid, Quote(dir))
}

// checkParent applies the rule of a directory above the state: owned by root or this user, and
// writable by others only when sticky or when its group is this process's own.
func checkParent(dir string, st *unix.Stat_t, p Policy) error {
	q := Quote(dir)
	if st.Uid != 0 && !p.owns(st.Uid) {
		return unsafef("%s is owned by uid %d, who can replace anything below it; fix: keep once's state in a directory that only %s can change (ONCE_HOME, or the path in the DSN)", dir, st.Uid, you())
	}
	if st.Mode&unix.S_ISVTX != 0 || st.Mode&0o022 != 0 && readOnly(dir) {
		return nil
	}
	if st.Mode&0o002 != 0 {
		return unsafef("%s can be written by any user (mode %#o), who can replace anything below it; fix: chmod o-w %s", dir, st.Mode&0o7777, q)
	}
	if st.Mode&0o020 != 0 && st.Gid != uint32(os.Getegid()) {
		return unsafef("%s can be written by group %d (mode %#o), whose members can replace anything below it; fix: chmod g-w %s", dir, st.Gid, st.Mode&0o7777, q)
	}
	return nil
}

// ownersOwn checks next, in directory cur, when only a Reader's Owner makes it trusted: cur must
// be a directory that only its owner can add to. In a directory others may write (a sticky /tmp,
// one writable by a group, or writable by anyone on a read-only mount, which may be a read-only
// view of a file system others write), anyone could have made next, and would be "the owner".
func ownersOwn(cur, next string, st *unix.Stat_t, p Policy) error {
	if !p.Reader || st.Uid != p.Owner || st.Uid == 0 || st.Uid == uint32(os.Geteuid()) {
		return nil
	}
	var d unix.Stat_t
	if err := unix.Stat(cur, &d); err != nil {
		return fmt.Errorf("%s: %w", cur, err)
	}
	if d.Mode&0o022 != 0 {
		return unsafef("%s belongs to uid %d but is in %s, which others can write (mode %#o): anyone could have made it; fix: keep the ledger in a directory that only root or its owner can change (ONCE_HOME, or the path in the DSN)", next, st.Uid, cur, d.Mode&0o7777)
	}
	return nil
}

// resolve walks path from / one component at a time, checking each directory it passes through
// with checkParent and following each symbolic link after checking its owner. When last is
// true the final component is checked as a parent too (and followed when a link). It returns
// the real path of the final component and its Lstat, or exists false when a component is
// missing.
func resolve(path string, last bool, p Policy) (real string, st unix.Stat_t, exists bool, err error) {
	if !filepath.IsAbs(path) {
		return "", st, false, fmt.Errorf("trust: %s is not an absolute path", path)
	}
	cur := "/"
	if err := unix.Lstat(cur, &st); err != nil {
		return "", st, false, fmt.Errorf("/: %w", err)
	}
	if err := checkParent(cur, &st, p); err != nil {
		return "", st, false, err
	}
	todo := split(path)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == ".." {
			cur = filepath.Dir(cur) // cur has no links left in it: the lexical parent is the real one
			continue
		}
		next := filepath.Join(cur, c)
		if err := unix.Lstat(next, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return filepath.Join(append([]string{next}, todo...)...), st, false, nil
			}
			return "", st, false, fmt.Errorf("%s: %w", next, err)
		}
		final := len(todo) == 0
		if err := ownersOwn(cur, next, &st, p); err != nil {
			return "", st, false, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if st.Uid != 0 && !p.owns(st.Uid) {
				return "", st, false, unsafef("%s is a symbolic link owned by uid %d, who can point it elsewhere; fix: use the real path, or a link owned by %s", next, st.Uid, you())
			}
			if links++; links > maxLinks {
				return "", st, false, fmt.Errorf("%s: too many levels of symbolic links", path)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", st, false, fmt.Errorf("%s: %w", next, err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(split(target), todo...)
			continue
		}
		if final && !last {
			return next, st, true, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", st, false, unsafef("%s is not a directory", next)
		}
		if err := checkParent(next, &st, p); err != nil {
			return "", st, false, err
		}
		cur = next
	}
	// Every component checked as a parent (or path is "/"); st is the last directory's.
	if err := unix.Lstat(cur, &st); err != nil {
		return "", st, false, fmt.Errorf("%s: %w", cur, err)
	}
	return cur, st, true, nil
}

// you names who may own what is trusted: "root", or "uid N or root".
func you() string {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Sprintf("uid %d or root", euid)
	}
	return "root"
}

// split returns the non-empty components of p other than ".".
func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// Quote quotes s for a POSIX shell when it needs quoting, so that a printed fix can be pasted.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/-=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Member reports whether this process belongs to group gid (root belongs to every group).
func Member(gid int) bool {
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return true
	}
	gs, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range gs {
		if g == gid {
			return true
		}
	}
	return false
}
