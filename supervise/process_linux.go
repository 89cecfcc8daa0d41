package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shimDeathSig is the signal the kernel sends the shim when once dies; the shim treats it (and any other
// signal) as "check whether my parent is gone".
const shimDeathSig = syscall.SIGUSR2

// handshakeTimeout bounds how long Prepare and Start wait for the shim's reports.
var handshakeTimeout = 10 * time.Second // a var for the tests

// killTimeout bounds the SIGKILL rounds of a kill (a fork bomb can outrun them).
const killTimeout = 5 * time.Second

// Prepared is a command that is ready to start: it was found, its interpreter exists, and its shim is
// running and waiting for Start. Nothing of the command has run yet. Exactly one of Start and Cancel
// must be called.
type Prepared struct {
	cfg     Config
	env     []string // SetEnv's: sent to the shim with the go-ahead; nil when not set
	path    string
	p       *Process
	st      *shimStatus
	control *os.File // write end of the shim's control pipe; nil without a shim
	c       *exec.Cmd
}

// Prepare checks everything about starting cfg.Args that can fail before it runs, and, with a shim,
// starts the shim, which then waits for Start. If Args[0] cannot be found, or a script's interpreter or
// a program's loader is missing, the error wraps ErrNotFound and reads "command not found: X" (or says
// which interpreter is missing); if it cannot be executed, it wraps ErrNotExecutable. Callers that
// record an attempt do so between Prepare and Start, so that a command that cannot start costs none.
func Prepare(cfg Config) (*Prepared, error) {
	path, err := find(cfg)
	if err != nil {
		return nil, err
	}
	pr := &Prepared{cfg: cfg, path: path}
	if len(cfg.Shim) == 0 {
		return pr, nil
	}
	dedicated := isDedicated(cfg.Shim)
	if dedicated && dedicatedFailed.Load() {
		pr.cfg.Shim, dedicated = selfShim, false
	}
	err = pr.startShim()
	if err != nil && dedicated {
		// The once-shim DefaultShim found did not start, or speaks another protocol version (one
		// of another release): this binary is a shim of the right version. Remembered, so that
		// a daemon does not try it again for every run.
		dedicatedFailed.Store(true)
		pr.cfg.Shim = selfShim
		err = pr.startShim()
	}
	if err != nil {
		return nil, err
	}
	return pr, nil
}

// errShimProtocol: the shim speaks another version of the protocol (it answered "proto").
var errShimProtocol = errors.New("supervise: the shim speaks another protocol version")

func (pr *Prepared) command() *exec.Cmd {
	cfg := pr.cfg
	env := cfg.Env
	if pr.env != nil {
		env = pr.env
	}
	if env == nil {
		env = os.Environ()
	}
	c := &exec.Cmd{Env: env, Dir: cfg.Dir, Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr}
	// exec.Cmd maps nil to /dev/null; we inherit instead.
	if c.Stdin == nil {
		c.Stdin = os.Stdin
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	// A straggler holding a copied pipe must not block Wait forever (only matters without a shim).
	c.WaitDelay = 2 * time.Second
	return c
}

// startShim starts the shim and waits until it reports that it is ready.
func (pr *Prepared) startShim() error {
	cfg := pr.cfg
	c := pr.command()
	c.Path = cfg.Shim[0]
	if !strings.Contains(c.Path, "/") {
		var err error
		if c.Path, err = exec.LookPath(c.Path); err != nil {
			return fmt.Errorf("supervise: shim: %w", err)
		}
	}
	c.Args = append(append(append([]string{}, cfg.Shim...), shimMarker, strconv.Itoa(os.Getpid()), pr.path), cfg.Args...)
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return fmt.Errorf("supervise: %w", err)
	}
	c.ExtraFiles = []*os.File{statusW, controlR} // fds 3 and 4 in the shim
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: shimDeathSig}

	p := &Process{shim: true, done: make(chan struct{})}
	st := newShimStatus()
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the forking *thread* exits (golang/go#27505). Keep this goroutine locked to its
		// thread until the child has exited; it never unlocks, so the thread ends with the goroutine, after.
		runtime.LockOSThread()
		err := startAdoptable(c)
		if err != nil {
			started <- err
			return
		}
		p.pid = c.Process.Pid
		started <- nil
		p.wait(c, st)
	}()
	err = <-started
	statusW.Close()
	controlR.Close()
	if err != nil {
		statusR.Close()
		controlW.Close()
		return fmt.Errorf("supervise: start the shim %s: %w", cfg.Shim[0], err)
	}
	go st.read(statusR)
	pr.p, pr.st, pr.control, pr.c = p, st, controlW, c
	timeout := time.NewTimer(handshakeTimeout)
	defer timeout.Stop()
	select {
	case r, ok := <-st.first:
		if ok && r.kind == "ready" {
			return nil
		}
		if ok && r.kind == "proto" {
			// It exits by itself; its group is killed in case it is not the shim it claims to be.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			controlW.Close()
			select {
			case <-p.done:
			case <-timeout.C:
			}
			return fmt.Errorf("%w: %s", errShimProtocol, cfg.Shim[0])
		}
	case <-timeout.C:
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	controlW.Close()
	<-p.done
	return fmt.Errorf("supervise: the shim %q did not get ready (exit %d); is it the once binary?", cfg.Shim[0], p.exit.Code)
}

// Start runs the prepared command and returns once it has started (or failed to exec).
func (pr *Prepared) Start() (*Process, error) { return pr.StartFenced(time.Time{}) }

// StartFenced is Start with the shim's fence set at until (Process.Fence) before the command
// starts: the go-ahead and the fence go to the shim in one write, so a once frozen right after it
// cannot leave the command unfenced. A zero until sets no fence.
func (pr *Prepared) StartFenced(until time.Time) (*Process, error) {
	size := 0
	for _, kv := range pr.env {
		if strings.IndexByte(kv, 0) >= 0 {
			pr.Cancel()
			return nil, fmt.Errorf("supervise: an environment variable holds a NUL byte: %.40q", kv)
		}
		size += len(kv) + 1
	}
	if size > maxEnv {
		pr.Cancel()
		return nil, fmt.Errorf("supervise: the command's environment is %d bytes, more than the %d the shim takes", size, maxEnv)
	}
	if pr.control == nil {
		return pr.startDirect()
	}
	p, st := pr.p, pr.st
	var msg []byte
	if pr.env != nil {
		block := strings.Join(pr.env, "\x00")
		msg = fmt.Appendf(msg, "e %d\n%s", len(block), block)
	}
	msg = append(msg, 'g')
	if !until.IsZero() {
		msg = append(msg, fenceLine(until)...)
	}
	// A large environment fills the pipe: the write waits for the shim to read, at most as long as
	// the handshake (a frozen shim must not hold once).
	_ = pr.control.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, werr := pr.control.Write(msg)
	_ = pr.control.SetWriteDeadline(time.Time{})
	if werr == nil {
		p.mu.Lock()
		p.control = pr.control // for Fence, until the run is over
		p.mu.Unlock()
	} else {
		pr.control.Close()
		p.kill()
	}
	timeout := time.NewTimer(handshakeTimeout)
	defer timeout.Stop()
	if werr == nil {
		select {
		case r, ok := <-st.started:
			switch {
			case ok && r.kind == "pid":
				return p, nil
			case ok && r.kind == "err":
				<-p.done
				return nil, r.err
			}
		case <-timeout.C:
			p.kill()
		}
	}
	<-p.done
	return nil, fmt.Errorf("supervise: the shim did not start the command (exit %d)", p.exit.Code)
}

// SetEnv replaces the command's environment given to Prepare, before Start: a shim started early,
// before the run's variables were known, gets them with the go-ahead. An entry holding a NUL byte
// makes Start fail.
func (pr *Prepared) SetEnv(env []string) { pr.env = slices.Clone(env) }

// Cancel ends a prepared command that will not be started: the shim exits without running anything.
func (pr *Prepared) Cancel() {
	if pr.control == nil {
		return
	}
	pr.control.Close()
	<-pr.p.done
}

// startDirect starts the command without a shim: it leads its own group, with Pdeathsig=SIGKILL.
func (pr *Prepared) startDirect() (*Process, error) {
	c := pr.command()
	c.Path, c.Args = pr.path, pr.cfg.Args
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // as in startShim
		if err := startAdoptable(c); err != nil {
			started <- err
			return
		}
		p.pid = c.Process.Pid
		started <- nil
		p.wait(c, nil)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("supervise: start %s: %w", pr.cfg.Args[0], err)
	}
	return p, nil
}

func (p *Process) signal(sig syscall.Signal) error {
	if p.shim {
		signalRun(p.pid, sig)
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("supervise: signal %v to group %d: %w", sig, p.pid, err)
	}
	return nil
}

// killAll freezes the leader, SIGKILLs its descendants until none is left, then kills its group. A
// frozen shim cannot exit, so the orphans it adopted stay its descendants until they are dead.
func (p *Process) killAll() {
	_ = syscall.Kill(p.pid, syscall.SIGSTOP)
	if left := killTree(p.pid, time.Now().Add(killTimeout), nil); left > 0 {
		p.mu.Lock()
		p.leftover = left
		p.mu.Unlock()
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// shimStatus collects the shim's status pipe: "ready" first, then "pid N" or "err ERRNO NAME", then
// "exit WAITSTATUS", then "left N" if processes of the run survived its cleanup, then "done".
type shimStatus struct {
	first   chan shimReport // "ready"; closed without it if the shim died before
	started chan shimReport // "pid" or "err"; closed without one if the shim died before
	over    chan struct{}   // closed at "done" after "exit": the run is over, the shim only exits now
	eof     chan struct{}   // closed when the pipe is closed; exit and left are set before
	exit    *syscall.WaitStatus
	left    int
	fenced  bool // the shim killed the run at its fence
}

func newShimStatus() *shimStatus {
	return &shimStatus{first: make(chan shimReport, 1), started: make(chan shimReport, 1), over: make(chan struct{}), eof: make(chan struct{})}
}

type shimReport struct {
	kind string
	err  error
}

func (s *shimStatus) read(r io.ReadCloser) {
	defer close(s.eof)
	defer r.Close()
	ready, started, done := false, false, false
	defer func() {
		if !ready {
			close(s.first)
		}
		if !started {
			close(s.started)
		}
	}()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "ready", "proto":
			if !ready {
				s.first <- shimReport{kind: kind}
				ready = true
			}
		case "exit":
			if n, err := strconv.ParseUint(rest, 10, 32); err == nil {
				ws := syscall.WaitStatus(n)
				s.exit = &ws
			}
		case "left":
			if n, err := strconv.Atoi(rest); err == nil && n > 0 {
				s.left = n
			}
		case "fenced":
			s.fenced = true
		case "done":
			// The early end (Process.wait) is for a clean run only: with stragglers left, the
			// shim's exit hands them to this process, which kills them before the run is over.
			if s.exit != nil && s.left == 0 && !done {
				close(s.over)
				done = true
			}
		case "pid", "err":
			if started || !ready {
				continue
			}
			rep := shimReport{kind: kind}
			if kind == "err" {
				num, name, _ := strings.Cut(rest, " ")
				errno, _ := strconv.Atoi(num)
				if syscall.Errno(errno) == syscall.ENOENT {
					rep.err = &cmdError{ErrNotFound, "command not found: " + name}
				} else {
					rep.err = &cmdError{ErrNotExecutable, "command not executable: " + name + ": " + syscall.Errno(errno).Error()}
				}
			}
			s.started <- rep
			started = true
		}
	}
}

// wait runs on the locked goroutine that started c.
func (p *Process) wait(c *exec.Cmd, st *shimStatus) {
	exited := make(chan struct{})
	go func() {
		// Wait for the exit without reaping, so no signal can hit a reused pid: while the leader is a
		// zombie its pid stays ours.
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(exited)
	}()
	var over <-chan struct{}
	if st != nil && direct(c) {
		over = st.over
	}
	select {
	case <-exited:
	case <-over:
		// The shim said "done": the command's status is in, no process of the run is left (the
		// shim, a subreaper, walked its tree), and what remains of the shim is its own exit. Report
		// the run over now; reap the shim after, in this goroutine, whose thread must outlive it
		// (Pdeathsig, startShim). Nothing can have been handed to this process while the shim lives.
		p.mu.Lock()
		p.fenced = st.fenced
		left := p.leftover
		p.mu.Unlock()
		p.closeControl()
		p.end(exitFromStatus(*st.exit), nil, left)
		<-exited
		p.leaderExited()
		_ = c.Wait()
		forget(p.pid)
		sweepAdopted() // belt and braces: the run was reported without stragglers
		return
	}
	p.leaderExited()
	werr := c.Wait()
	forget(p.pid)
	exit, err := waited(c, werr)
	left := p.leftover
	if st != nil {
		// The shim reports the command's own status before cleaning up; it wins over the shim's, which
		// differs only if the shim was killed (e.g. by Stop's kill) after the command had exited.
		// Only the shim holds the pipe's write end (it is close-on-exec for the command), so EOF is near.
		<-st.eof
		if st.exit != nil {
			exit = exitFromStatus(*st.exit)
		}
		left = max(left, st.left)
		p.mu.Lock()
		p.fenced = st.fenced
		p.mu.Unlock()
	}
	p.closeControl()
	// Whatever the shim could not kill, or left behind when it was killed by someone else, was
	// re-parented to this process if it is a subreaper: kill it now, before the run is reported over.
	p.end(exit, err, max(left, sweepAdopted()))
}

// direct reports whether c's standard streams are files it was given, so that nothing copies the
// run's output once it is over: otherwise the output is complete only when the shim, which holds
// the pipe too, has exited (c.Wait).
func direct(c *exec.Cmd) bool {
	for _, f := range []any{c.Stdin, c.Stdout, c.Stderr} {
		if _, ok := f.(*os.File); !ok {
			return false
		}
	}
	return true
}

// end sets the run's outcome and closes Done.
func (p *Process) end(exit Exit, err error, left int) {
	if left > 0 && err == nil {
		err = fmt.Errorf("supervise: %d processes of the run could not be killed within %s", left, killTimeout)
	}
	p.exit, p.err = exit, err
	close(p.done)
}
