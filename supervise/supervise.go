// Package supervise runs once's command in its own process group and makes sure it cannot outlive once.
//
// Process model (Linux): once starts a shim — once-shim (ShimName, DefaultShim) when installed, else its own
// binary re-executed with ShimArg — as the leader of a new
// process group, with a parent-death signal. The shim starts the command as its child in the same group and
// waits for it. Signals sent with Process.Signal go to the whole group; the shim ignores them for itself.
// When once dies (SIGKILL included) the kernel signals the shim, which kills the whole group. When the command
// exits, the shim kills what is left of the group (SIGTERM, SIGKILL after a second) and exits with the
// command's exact wait status. See docs/supervision.md.
//
// Go's Pdeathsig fires when the OS thread that forked the child exits, not the process (golang/go#27505), so
// children are started from a goroutine locked to its thread that stays alive until the child has exited.
package supervise

import (
	"errors"
	"io"
	"syscall"
)

// ErrNotFound means the command does not exist (or is not in PATH). Errors wrapping it read
// "command not found: X"; the CLI maps it to exit 127 like a shell.
var ErrNotFound = errors.New("supervise: command not found")

// ErrNotExecutable means the command exists but cannot be executed (permission, or a directory). Errors
// wrapping it read "command not executable: X: reason"; a shell reports this as exit 126.
var ErrNotExecutable = errors.New("supervise: command not executable")

// ShimArg is the hidden first argument that makes the once binary run ShimMain.
const ShimArg = "__once_shim"

// ShimName is the dedicated shim's file name: cmd/once-shim, a small binary that only runs ShimMain.
// Installed beside once (or in ../libexec/once/ from once's directory), it replaces the re-executed
// once binary as the shim, and a run starts ~6 ms faster on a 2-core VM (docs/benchmarks.md):
// it has none of once's packages to page in and initialise.
const ShimName = "once-shim"

// selfShim re-executes this process's own binary as the shim: what the binary's main must
// dispatch (os.Args[1] == ShimArg). /proc/self/exe still works when the file was replaced or
// deleted since the process started (an upgrade during a run).
var selfShim = []string{"/proc/self/exe", ShimArg}

// Config says what to run and how.
type Config struct {
	// Args is the command and its arguments. Args[0] is looked up in PATH (Env's PATH if set, else the
	// process's PATH) unless it contains a '/', in which case it is relative to Dir.
	Args []string
	// Env is the full environment for the command; nil means the current process's environment.
	Env []string
	// Dir is the command's working directory; empty means the current one.
	Dir string
	// Stdin is the command's standard input; nil inherits os.Stdin. An *os.File is passed through as is;
	// another reader is copied through a pipe.
	Stdin io.Reader
	// Stdout and Stderr are the command's output; nil inherits os.Stdout/os.Stderr.
	Stdout, Stderr io.Writer
	// Shim is the argv prefix that runs the shim, e.g. {"/proc/self/exe", ShimArg}. With nil, there is no
	// shim: the command itself leads the group with Pdeathsig=SIGKILL, and its own children may survive
	// once's death.
	Shim []string
}

// Exit is how the command ended.
type Exit struct {
	// Code is the command's exit code, or 128+N if it was killed by signal N.
	Code int
	// Signal is N if the command was killed by signal N, else 0.
	Signal syscall.Signal
}

func exitFromStatus(ws syscall.WaitStatus) Exit {
	switch {
	case ws.Exited():
		return Exit{Code: ws.ExitStatus()}
	case ws.Signaled():
		return Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	}
	return Exit{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL}
}
