//go:build unix

// Package flock is once's local layer: an exclusive flock(2) on a file in a private lock directory.
//
// The lock is held through a file descriptor opened with O_CLOEXEC, so a supervised command (and anything it
// daemonizes) never inherits it, and the kernel releases it when the process dies, SIGKILL included. Lock
// files are never deleted: deleting a lock file while another process waits on it lets two processes hold
// "the" lock on two different inodes.
package flock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once/internal/trust"
)

// ErrBusy means another process holds the lock (and the wait, if any, elapsed).
var ErrBusy = errors.New("flock: lock is held by another process")

// ErrUnsafe means the lock directory or a lock file could be tampered with by someone else: a symlink, not a
// directory/regular file, owned by another user, or group/world-writable; or a directory above it (ONCE_HOME
// and its parents) that another user could rename or replace (see package internal/trust). The wrapping
// message says how to fix it.
var ErrUnsafe = errors.New("flock: unsafe lock directory")

// ErrUnusable means the lock directory or a lock file cannot be made or opened because of the file
// system (read-only, no permission, no space or inodes left, an I/O error): nothing ran. The
// wrapping message says what to fix.
var ErrUnusable = errors.New("flock: the lock directory cannot be used")

// unusable wraps err, met doing what on path, in ErrUnusable with a hint for the usual causes.
func unusable(what, path string, err error) error {
	hint := ""
	switch {
	case errors.Is(err, unix.EROFS):
		hint = "; the file system is read-only: remount it read-write, or point ONCE_HOME at a writable directory"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		hint = "; no permission: ONCE_HOME must be a directory of this user's that it can write"
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		hint = "; the file system is full (space, inodes or quota): free some"
	}
	return fmt.Errorf("%w: %s %s: %w%s", ErrUnusable, what, path, err, hint)
}

// maxPrefix bounds the readable part of a lock file name.
const maxPrefix = 64

// FileName maps any string (a task name is 1–200 chars of A-Z a-z 0-9 . _ : @ / -) to one safe file name:
// a readable prefix of at most 64 bytes from [A-Za-z0-9._-] (other bytes become '_', a leading '.' becomes
// '_'), then "-", the hex of the first 16 bytes of sha256(task), and ".lock". Distinct tasks get distinct
// names (short of a 128-bit hash collision); the result never contains '/', is never "." or "..", and is
// shorter than 255 bytes.
func FileName(task string) string {
	var b strings.Builder
	for i := 0; i < len(task) && b.Len() < maxPrefix; i++ {
		c := task[i]
		switch {
		case c == '.' && b.Len() == 0:
			b.WriteByte('_')
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(task))
	return b.String() + "-" + hex.EncodeToString(sum[:16]) + ".lock"
}

// Lock is a held lock. Release it when done; the kernel releases it anyway when the process exits.
type Lock struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release unlocks and closes the lock file (which stays on disk). It is idempotent and safe for concurrent use.
func (l *Lock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	// Closing the only descriptor of the open file description drops the flock.
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("flock: release %s: %w", l.path, err)
	}
	return nil
}

// Acquire takes an exclusive flock(2) on dir/FileName(task).
//
// dir is created with mode 0700 (missing parents too) if it does not exist. An existing dir must be a real
// directory (not a symlink), owned by the effective uid and not group/other-writable, and the directories
// above it must be owned by root or the effective uid and not writable by others (unless sticky), else the
// error wraps ErrUnsafe and says how to fix it. The lock file is opened O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC with mode 0600
// and must be a regular file owned by the effective uid.
//
// wait 0 fails at once with ErrBusy if the lock is held. wait > 0 retries until the lock is free, wait has
// elapsed (ErrBusy) or ctx is done (ctx.Err() wrapped together with ErrBusy).
func Acquire(ctx context.Context, dir, task string, wait time.Duration) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName(task))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: lock file %s is a symlink; fix: rm %s", ErrUnsafe, path, path)
		}
		return nil, unusable("open lock file", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := checkFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	if err := lockWait(ctx, fd, path, wait); err != nil {
		f.Close()
		if errors.Is(err, ErrBusy) {
			return nil, fmt.Errorf("%w: %s", err, path)
		}
		return nil, fmt.Errorf("flock: lock %s: %w", path, err)
	}
	return &Lock{path: path, f: f}, nil
}

// lockWait polls flock(LOCK_EX|LOCK_NB): unlike a blocking flock in a goroutine, an abandoned
// attempt can never take the lock later behind the caller's back. Between tries it waits for a
// close of the lock file (inotify): a holder releases the lock by closing its descriptor, or the
// kernel closes it when the holder dies, so the waiter tries again within a few milliseconds. A
// backoff up to 100 ms covers hosts without inotify (or out of inotify instances).
func lockWait(ctx context.Context, fd int, path string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	backoff := 5 * time.Millisecond
	var w *closeWatch
	watched := false
	brisk := time.Duration(0) // after a close: the lock goes a moment after the close is reported
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return err
		}
		left := time.Until(deadline)
		if wait <= 0 || left <= 0 {
			return ErrBusy
		}
		if !watched {
			watched = true
			if w = watchClose(path); w != nil {
				defer w.close()
				continue // a release before the watch was set is seen by this try
			}
		}
		d := backoff
		if brisk > 0 {
			d = brisk
		}
		until := time.Now().Add(min(d, left))
		closed := false
		if w != nil {
			closed = w.wait(ctx, until)
		} else {
			t := time.NewTimer(time.Until(until))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", ErrBusy, ctx.Err())
		}
		switch {
		case closed:
			brisk = 500 * time.Microsecond
		case brisk > 0 && brisk < backoff:
			brisk *= 2
		default:
			brisk = 0
			backoff = min(backoff*2, 100*time.Millisecond)
		}
	}
}

// ensureDir creates dir (and missing parents) with mode 0700, then checks it and the directories
// above it. The other tasks' lock files are not looked at: Acquire checks the one it opens, and
// listing them all would make every run cost O(tasks on the host) (doctor's Check lists them).
func ensureDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("flock: empty lock directory")
	}
	if err := parents(dir); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		// MkdirAll only applies the mode to directories it creates; existing parents are left alone.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return unusable("create lock directory", dir, err)
		}
	}
	_, err := checkDir(dir)
	return err
}

// Check reports a problem with lock directory dir, or nil if it is fine or does not exist yet (Acquire will
// create it). dir must be a real directory (not a symlink) owned by the effective uid and not group/other-
// writable, under directories that only root and the effective uid can change; the lock files in it must
// be regular files owned by the effective uid. Problems wrap ErrUnsafe and carry a one-line fix.
func Check(dir string) error {
	if err := parents(dir); err != nil {
		return err
	}
	exists, err := checkDir(dir)
	if err != nil || !exists {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("flock: read lock directory: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var fst unix.Stat_t
		if err := unix.Lstat(p, &fst); err != nil {
			continue // removed meanwhile
		}
		if err := checkStat(&fst, p); err != nil {
			return err
		}
	}
	return nil
}

// checkDir checks the lock directory itself (not what is above it, nor its files); false when
// it does not exist.
func checkDir(dir string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		// Not ours to look into (another user's ONCE_HOME, a directory of mode 0700 above it), or
		// an I/O error: the directory cannot be used, like one that cannot be created (69), not
		// an internal error.
		return false, unusable("look up lock directory", dir, err)
	}
	euid := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return true, fmt.Errorf("%w: %s is a symlink; fix: use a real directory (rm %s)", ErrUnsafe, dir, dir)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return true, fmt.Errorf("%w: %s is not a directory; fix: rm %s", ErrUnsafe, dir, dir)
	case st.Uid != euid:
		return true, fmt.Errorf("%w: %s", ErrUnsafe, trust.OtherOwner(dir, st.Uid))
	case st.Mode&0o022 != 0:
		return true, fmt.Errorf("%w: %s is group/world-writable (mode %#o); fix: chmod 700 %s", ErrUnsafe, dir, st.Mode&0o7777, dir)
	}
	return true, nil
}

// parents checks the directories above dir: whoever can rename an entry of one of them can swap the lock
// directory while a lock is held in it, and two processes then hold "the" lock on two inodes.
func parents(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("flock: lock directory %s: %w", dir, err)
	}
	if err := trust.Parents(filepath.Dir(abs)); err != nil {
		if errors.Is(err, trust.ErrUnsafe) {
			return fmt.Errorf("%w: %w", ErrUnsafe, err)
		}
		return unusable("look up lock directory", dir, err)
	}
	return nil
}

func checkFile(f *os.File, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("flock: stat %s: %w", path, err)
	}
	return checkStat(&st, path)
}

func checkStat(st *unix.Stat_t, path string) error {
	euid := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%w: lock file %s is a symlink; fix: rm %s", ErrUnsafe, path, path)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: lock file %s is not a regular file; fix: rm %s", ErrUnsafe, path, path)
	case st.Uid != euid:
		return fmt.Errorf("%w: lock file %s is owned by uid %d, not %d; fix: rm %s", ErrUnsafe, path, st.Uid, euid, path)
	}
	return nil
}
