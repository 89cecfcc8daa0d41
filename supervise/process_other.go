//go:build unix && !linux

package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Prepared is a command that is ready to start. Outside Linux there is no shim: Prepare only finds the
// command and checks its interpreter.
type Prepared struct {
	cfg  Config
	path string
	env  []string
}

// DefaultShim is the shim of once on Linux; elsewhere there is no shim and Config.Shim is unused.
func DefaultShim() []string { return selfShim }

// Prepare finds the command and checks its interpreter; see the Linux documentation.
func Prepare(cfg Config) (*Prepared, error) {
	path, err := find(cfg)
	if err != nil {
		return nil, err
	}
	return &Prepared{cfg: cfg, path: path}, nil
}

// SetEnv replaces the command's environment given to Prepare, before Start.
func (pr *Prepared) SetEnv(env []string) { pr.env = append([]string{}, env...) }

// Cancel ends a prepared command that will not be started.
func (pr *Prepared) Cancel() {}

// StartFenced is Start: there is no shim to keep a fence outside Linux.
func (pr *Prepared) StartFenced(time.Time) (*Process, error) { return pr.Start() }

// Start runs the prepared command.
func (pr *Prepared) Start() (*Process, error) {
	cfg := pr.cfg
	env := cfg.Env
	if pr.env != nil {
		env = pr.env
	}
	if env == nil {
		env = os.Environ()
	}
	c := &exec.Cmd{Path: pr.path, Args: cfg.Args, Env: env, Dir: cfg.Dir, Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}, WaitDelay: 2 * time.Second}
	if c.Stdin == nil {
		c.Stdin = os.Stdin
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("supervise: start %s: %w", cfg.Args[0], err)
	}
	p := &Process{pid: c.Process.Pid, done: make(chan struct{})}
	go func() {
		werr := c.Wait()
		p.leaderExited()
		p.exit, p.err = waited(c, werr)
		close(p.done)
	}()
	return p, nil
}

func (p *Process) signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("supervise: signal %v to group %d: %w", sig, p.pid, err)
	}
	return nil
}

func (p *Process) killAll() { _ = syscall.Kill(-p.pid, syscall.SIGKILL) }

// BecomeSubreaper is Linux-only; elsewhere it does nothing.
func BecomeSubreaper() error { return nil }

// ShimMain is Linux-only; elsewhere it reports that and returns 70.
func ShimMain(args []string) int {
	fmt.Fprintf(os.Stderr, "once: %s is only supported on Linux\n", ShimArg)
	return 70
}
