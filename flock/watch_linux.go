//go:build linux

package flock

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// closeWatch reports closes of a lock file (inotify IN_CLOSE_*).
type closeWatch struct{ f *os.File }

// watchClose watches path for closes, or returns nil when inotify is not available.
func watchClose(path string) *closeWatch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE|unix.IN_DONT_FOLLOW); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify "+path)
	if err := f.SetReadDeadline(time.Time{}); err != nil { // not pollable here: no deadlines
		f.Close()
		return nil
	}
	return &closeWatch{f: f}
}

// wait waits until the file is closed by someone (true), until, or ctx is done.
func (w *closeWatch) wait(ctx context.Context, until time.Time) bool {
	w.f.SetReadDeadline(until)
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [4096]byte // drains every close reported so far
	n, err := w.f.Read(buf[:])
	return err == nil && n > 0
}

// close closes the watch in the background: closing an inotify descriptor waits for the kernel's
// grace period (about 10 ms), which the lock's new holder need not wait for.
func (w *closeWatch) close() { go w.f.Close() }
