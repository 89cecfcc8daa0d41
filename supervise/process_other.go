//go:build unix && !linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Start starts cfg.Args in a new process group. Outside Linux there is no parent-death signal and no shim:
// cfg.Shim is ignored, and the command survives once's SIGKILL. Errors are as on Linux.
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
	c := &exec.Cmd{Path: path, Args: cfg.Args, Env: env, Dir: cfg.Dir, Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr,
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
		p.mu.Lock()
		p.exited = true
		if p.timer != nil {
			p.timer.Stop()
		}
		p.mu.Unlock()
		var ws syscall.WaitStatus
		if c.ProcessState != nil {
			ws, _ = c.ProcessState.Sys().(syscall.WaitStatus)
		}
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
			p.err = fmt.Errorf("supervise: wait: %w", werr)
		}
		p.exit = exitFromStatus(ws)
		close(p.done)
	}()
	return p, nil
}

// ShimMain is Linux-only; elsewhere it reports that and returns 70.
func ShimMain(args []string) int {
	fmt.Fprintf(os.Stderr, "once: %s is only supported on Linux\n", ShimArg)
	return 70
}
