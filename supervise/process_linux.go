package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shimDeathSig is the signal the kernel sends the shim when once dies; the shim treats it (and any other
// signal) as "check whether my parent is gone".
const shimDeathSig = syscall.SIGUSR2

// handshakeTimeout bounds how long Start waits for the shim to report that the command started.
const handshakeTimeout = 10 * time.Second

// Start starts cfg.Args in a new process group and returns at once. The command's stdio, environment and
// directory come from cfg. If Args[0] cannot be found, the error wraps ErrNotFound and reads
// "command not found: X"; if it cannot be executed, it wraps ErrNotExecutable.
func Start(cfg Config) (*Process, error) {
	if len(cfg.Args) == 0 {
		return nil, &cmdError{ErrNotFound, "command not found: (none given)"}
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	path, err := lookPath(cfg.Args[0], cfg.Env, cfg.Dir)
	if err != nil {
		return nil, err
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
	var statusR, statusW *os.File
	if len(cfg.Shim) > 0 {
		c.Path = cfg.Shim[0]
		if !strings.Contains(c.Path, "/") {
			if c.Path, err = exec.LookPath(c.Path); err != nil {
				return nil, fmt.Errorf("supervise: shim: %w", err)
			}
		}
		c.Args = append(append(append([]string{}, cfg.Shim...), shimMarker, strconv.Itoa(os.Getpid()), path), cfg.Args...)
		if statusR, statusW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("supervise: %w", err)
		}
		c.ExtraFiles = []*os.File{statusW} // fd 3 in the shim
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: shimDeathSig}
	} else {
		c.Path, c.Args = path, cfg.Args
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}

	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	var st *shimStatus
	if statusR != nil {
		st = &shimStatus{first: make(chan shimReport, 1), eof: make(chan struct{})}
	}
	go func() {
		// Pdeathsig fires when the forking *thread* exits (golang/go#27505). Keep this goroutine locked to its
		// thread until the child has exited; it never unlocks, so the thread ends with the goroutine, after.
		runtime.LockOSThread()
		if err := c.Start(); err != nil {
			started <- err
			return
		}
		p.pid = c.Process.Pid
		started <- nil
		p.wait(c, st)
	}()
	if err := <-started; err != nil {
		if statusR != nil {
			statusR.Close()
			statusW.Close()
		}
		return nil, fmt.Errorf("supervise: start %s: %w", cfg.Args[0], err)
	}
	if st == nil {
		return p, nil
	}
	statusW.Close()
	go st.read(statusR)
	timeout := time.NewTimer(handshakeTimeout)
	defer timeout.Stop()
	select {
	case r := <-st.first:
		switch r.kind {
		case "pid":
			return p, nil
		case "err":
			<-p.done
			return nil, r.err
		}
	case <-timeout.C:
		_ = p.Signal(syscall.SIGKILL)
	}
	<-p.done
	return nil, fmt.Errorf("supervise: shim %q did not start the command (exit %d); is it the once binary?", cfg.Shim[0], p.exit.Code)
}

// shimStatus collects the shim's status pipe: lines "pid N" or "err ERRNO NAME" first, then "exit WAITSTATUS".
type shimStatus struct {
	first chan shimReport // the first report; closed without one if the shim died before it
	eof   chan struct{}   // closed when the pipe is closed; exit is set before
	exit  *syscall.WaitStatus
}

type shimReport struct {
	kind string
	err  error
}

func (s *shimStatus) read(r io.ReadCloser) {
	defer close(s.eof)
	defer r.Close()
	sent := false
	defer func() {
		if !sent {
			close(s.first)
		}
	}()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "exit":
			if n, err := strconv.ParseUint(rest, 10, 32); err == nil {
				ws := syscall.WaitStatus(n)
				s.exit = &ws
			}
		case "pid", "err":
			if sent {
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
			s.first <- rep
			sent = true
		}
	}
}

// wait runs on the locked goroutine that started c.
func (p *Process) wait(c *exec.Cmd, st *shimStatus) {
	// Wait for the exit without reaping, so Signal can never hit a reused pgid: while the leader is a zombie
	// its pid stays ours.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	p.mu.Lock()
	p.exited = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	werr := c.Wait()
	var ws syscall.WaitStatus
	if c.ProcessState != nil {
		ws, _ = c.ProcessState.Sys().(syscall.WaitStatus)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		p.err = fmt.Errorf("supervise: wait: %w", werr)
	}
	p.exit = exitFromStatus(ws)
	if st != nil {
		// The shim reports the command's own status before cleaning up; it wins over the shim's, which
		// differs only if the shim was killed (e.g. by Stop's SIGKILL) after the command had exited.
		// Only the shim holds the pipe's write end (it is close-on-exec for the command), so EOF is near.
		<-st.eof
		if st.exit != nil {
			p.exit = exitFromStatus(*st.exit)
		}
	}
	close(p.done)
}
