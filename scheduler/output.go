package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// OutputScope is the business-key scope that keeps each attempt's output tail, keyed by run id.
const OutputScope = "once.scheduler.output"

// keptLogs is how many rotated log files of a job are kept besides the current one.
const keptLogs = 3

// output takes a launch's command output: all of it to the job's log file (when Config.LogDir
// is set), the last TailSize bytes of each attempt to the store. It is an io.Writer for the
// command's stdout and stderr together.
type output struct {
	s    *Scheduler
	name string

	mu   sync.Mutex
	file *os.File // the job's log file, nil when none
	size int64
	fail bool   // the last write to file failed (and was logged): the next failure is not logged again
	tail []byte // ring: the last TailSize bytes of the attempt
	full bool
	pos  int
	run  *once.Run
}

func (s *Scheduler) output(jb Job) *output {
	o := &output{s: s, name: jb.Name}
	if s.c.TailSize > 0 {
		o.tail = make([]byte, s.c.TailSize)
	}
	if s.c.LogDir != "" {
		if err := o.open(); err != nil {
			s.log.Warn("cannot open the job's log file; its output is kept only as the tail in the store", "task", jb.Name, "err", err)
		}
	}
	return o
}

// LogFile is the file a job's full output goes to under dir: the job's name with '/' written
// %2F (a task name may hold '/'), and .log.
func LogFile(dir, name string) string {
	return filepath.Join(dir, strings.ReplaceAll(strings.ReplaceAll(name, "%", "%25"), "/", "%2F")+".log")
}

// logRoot is Config.LogDir, created 0700 and opened at New (again at each use until that
// succeeds): every log file is opened and rotated through this handle, so that the directory
// cannot be swapped for a link to elsewhere later (by whoever may rename entries of a directory
// above it, such as a group-writable /var/log). The directory itself must not be a link.
func (s *Scheduler) logRoot() (*os.Root, error) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logDir != nil {
		return s.logDir, nil
	}
	if err := os.MkdirAll(s.c.LogDir, 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(s.c.LogDir); err != nil {
		return nil, err
	} else if fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("log directory %s is a symbolic link: give the real directory", s.c.LogDir)
	}
	r, err := os.OpenRoot(s.c.LogDir)
	if err != nil {
		return nil, err
	}
	s.logDir = r
	return r, nil
}

// open opens the job's log file for appending: created 0600 in a directory created 0700, never
// through a symbolic link (openLog), and only a regular file of this user's (a FIFO put there would
// block the open, and the daemon's launches behind it, until someone read it: opened non-blocking
// and refused).
func (o *output) open() error {
	root, err := o.s.logRoot()
	if err != nil {
		return err
	}
	path := LogFile(o.s.c.LogDir, o.name)
	f, err := openLog(root, path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil {
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.Mode().IsRegular():
			err = fmt.Errorf("%s is not a regular file (%s): move it away", path, fi.Mode().Type())
		case st != nil && int(st.Uid) != os.Geteuid():
			err = fmt.Errorf("%s is owned by uid %d, not this user: move it away", path, st.Uid)
		}
	}
	if err != nil {
		f.Close()
		return err
	}
	o.file, o.size = f, fi.Size()
	return nil
}

// openLog opens the log file path (in root) for appending, creating it, with O_NOFOLLOW on its
// name: a symbolic link there is refused (ELOOP), wherever it points. os.Root alone refuses only a
// link out of the directory; in Go 1.26 its OpenFile follows one to another file inside it, whatever
// the flags, and a log directory may hold other files (another job's log, its rotated ones, or
// anything when --log-dir is a shared directory such as /var/log). So the file is opened by
// openat(2) on the root's own directory, with the kernel's O_NOFOLLOW; the name has no '/'
// (LogFile), so nothing but its last component is looked up.
func openLog(root *os.Root, path string) (*os.File, error) {
	dir, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := filepath.Base(path)
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: once writes no log through a link; remove it", path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// begin starts the output of attempt run: a header line in the log file, an empty tail.
func (o *output) begin(run *once.Run) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.run, o.pos, o.full = run, 0, false
	o.logLine(fmt.Sprintf("=== %s once: task %s slot %s attempt %d run %s token %d on %s\n", time.Now().UTC().Format(time.RFC3339Nano),
		run.Task, run.Slot, run.Attempt, run.RunID, run.Token, run.Holder))
}

// Write keeps p in the tail and the log file; it never fails, so that the command never sees a
// broken pipe because once could not keep its output.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file != nil {
		o.writeFile(p)
	}
	if n := len(o.tail); n > 0 {
		q := p
		if len(q) > n {
			q = q[len(q)-n:]
			o.full = true
		}
		for len(q) > 0 {
			c := copy(o.tail[o.pos:], q)
			q = q[c:]
			o.pos += c
			if o.pos == n {
				o.pos, o.full = 0, true
			}
		}
	}
	return len(p), nil
}

func (o *output) logLine(s string) {
	if o.file != nil {
		o.writeFile([]byte(s))
	}
}

// writeFile appends p to the log file, rotating it first when it has reached Config.LogSize.
func (o *output) writeFile(p []byte) {
	if o.size >= o.s.c.LogSize {
		o.rotate()
		if o.file == nil {
			return
		}
	}
	n, err := o.file.Write(p)
	o.size += int64(n)
	if err != nil && !o.fail {
		// A full file system (ENOSPC), a quota: the output is lost from the file until writes
		// succeed again, and the file does not grow to its rotation. Say so once, not per write.
		o.s.log.Warn("cannot write the job's log file; its output is kept only as the tail in the store until it can", "task", o.name, "file", o.file.Name(), "err", err)
	}
	o.fail = err != nil
}

// rotate renames NAME.log to NAME.log.1 (and .1 to .2 …, keeping keptLogs) and opens a new one.
func (o *output) rotate() {
	base := filepath.Base(LogFile(o.s.c.LogDir, o.name))
	o.file.Close()
	o.file = nil
	if root, err := o.s.logRoot(); err == nil {
		for i := keptLogs - 1; i >= 1; i-- {
			_ = root.Rename(fmt.Sprintf("%s.%d", base, i), fmt.Sprintf("%s.%d", base, i+1))
		}
		_ = root.Rename(base, base+".1")
	}
	if err := o.open(); err != nil {
		o.s.log.Warn("cannot reopen the job's log file after rotating it", "task", o.name, "err", err)
	}
}

// tailBytes is the attempt's tail, oldest byte first.
func (o *output) tailBytes() []byte {
	if !o.full {
		return append([]byte(nil), o.tail[:o.pos]...)
	}
	return append(append([]byte(nil), o.tail[o.pos:]...), o.tail[:o.pos]...)
}

// end keeps the tail of the attempt res made in the store, under its run id.
func (o *output) end(ctx context.Context, res once.Result) {
	o.mu.Lock()
	run := o.run
	o.run = nil
	tail := o.tailBytes()
	if len(tail) > store.MaxKeyResult {
		tail = tail[len(tail)-store.MaxKeyResult:] // what every store keeps: the last bytes, not none
	}
	if run != nil && res.Attempt != nil {
		state := string(res.Attempt.State)
		o.logLine(fmt.Sprintf("=== %s once: run %s ended %s\n", time.Now().UTC().Format(time.RFC3339Nano), run.RunID, state))
	}
	o.mu.Unlock()
	if run == nil || o.s.keys == nil || len(tail) == 0 {
		return // nothing to keep: an attempt that printed nothing costs the store nothing more
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	k := o.s.keys
	_, err := k.Claim(ctx, store.ClaimRequest{Scope: OutputScope, Keys: []string{run.RunID}, Pending: true,
		Claimant: store.Claimant{RunID: run.RunID}})
	if err == nil {
		err = k.Complete(ctx, OutputScope, []string{run.RunID}, run.RunID, tail)
	}
	if err != nil {
		o.s.log.Warn("cannot keep the attempt's output tail in the store", "task", run.Task, "run_id", run.RunID, "err", err)
	}
}

func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file != nil {
		o.file.Close()
		o.file = nil
	}
}

// Tail returns the output tail kept for the attempt runID, and whether there is one.
func Tail(ctx context.Context, s store.Store, runID string) ([]byte, bool, error) {
	k, err := keysOf(s)
	if err != nil {
		return nil, false, err
	}
	got, err := k.Lookup(ctx, OutputScope, []string{runID})
	if err != nil || len(got) == 0 || got[0].State != store.KeyDone {
		return nil, false, err
	}
	return got[0].Result, true, nil
}
