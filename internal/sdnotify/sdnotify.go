// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) for `once daemon` under a
// Type=notify (or Type=notify-reload) unit: readiness, reloads, stopping, a status line, and the
// watchdog.
//
// The protocol is one datagram of newline-separated VAR=VALUE assignments sent to the unix
// socket named by $NOTIFY_SOCKET: a path, or an abstract socket when it starts with '@'. Without
// $NOTIFY_SOCKET (not started by systemd, or by a unit of another type) Notify does nothing and
// says so (sent is false, no error), so the daemon calls it unconditionally.
//
// The daemon's commands must not inherit $NOTIFY_SOCKET: a job that speaks the protocol itself
// (systemd-notify, a program built on libsystemd or go-systemd) would otherwise tell systemd that
// the daemon is ready or stopping (systemd drops it under the default NotifyAccess=main, but not
// under NotifyAccess=all), and $WATCHDOG_USEC would tell it that it is watched. Unsetenv removes
// the variables from the process's environment, which is what package job gives a command, and
// keeps their values for Notify and WatchdogInterval: call it once, early, before any command
// starts. sd_notify's own unset_environment flag is not the model: it unsets after one message,
// and the daemon notifies for as long as it runs.
//
// Why not github.com/coreos/go-systemd/v22/daemon: the protocol is one small file, and a module
// dependency is not — once's go.mod lists only what the library uses (docs/architecture.md), and
// every dependency is reviewed and updated for as long as it stays. Nothing here runs at package
// init, so importing it costs `once run`'s start nothing (docs/benchmarks.md).
//
// Not supported: passing file descriptors (FDSTORE=1), sd_notify_barrier, and NOTIFY_SOCKET
// addresses other than a path or '@' (systemd ≥ 254's vsock: for virtual machines); those are
// refused with an error, not guessed.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The assignments the daemon sends. Several may go in one message, joined by "\n"
// (Ready + "\n" + Status("…")).
const (
	// Ready: start-up is finished (Type=notify: systemctl start returns now), or a reload is
	// (after Reloading).
	Ready = "READY=1"
	// Stopping: the daemon got its stop signal and drains; systemd shows "deactivating".
	Stopping = "STOPPING=1"
	// Watchdog: the keep-alive ping, at least every WatchdogInterval()/2 when WatchdogSec= is set.
	Watchdog = "WATCHDOG=1"
)

// The environment variables systemd gives the service's main process; Unsetenv removes them (a
// caller that builds a command's environment itself leaves them out).
const (
	EnvSocket       = "NOTIFY_SOCKET"
	EnvWatchdogUsec = "WATCHDOG_USEC"
	EnvWatchdogPID  = "WATCHDOG_PID"
)

var envVars = []string{EnvSocket, EnvWatchdogUsec, EnvWatchdogPID}

// Status is a STATUS= assignment: one line that `systemctl status` shows. Line breaks (and NUL)
// in text become spaces, so that text (an error message, say) cannot end the line and add
// assignments of its own.
func Status(text string) string {
	return "STATUS=" + strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, text)
}

// Reloading is the message that starts a reload: RELOADING=1 and MONOTONIC_USEC= with
// CLOCK_MONOTONIC now, in µs. systemd ≥ 253 needs the timestamp for Type=notify-reload (without
// it the reload is not matched to the signal that asked for it); older systemd ignores the
// field. Send Ready when the reload is done, whatever its outcome (a bad jobs file keeps the old
// jobs and the daemon is as ready as before).
func Reloading() string {
	if us, ok := monotonicUsec(); ok {
		return "RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(us, 10)
	}
	return "RELOADING=1"
}

// writeTimeout bounds one Notify: a service manager that does not read its socket (hung, or the
// receive queue full) must not stop the scheduler.
var writeTimeout = time.Second

var (
	mu    sync.Mutex
	saved map[string]string // the variables as Unsetenv found them; nil before
)

func getenv(name string) string {
	mu.Lock()
	defer mu.Unlock()
	if saved != nil {
		return saved[name]
	}
	return os.Getenv(name)
}

// Unsetenv removes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the process's environment,
// so that commands started after it do not inherit them, and keeps the values it found for Notify
// and WatchdogInterval. The first call's values are kept; a later call only unsets again.
func Unsetenv() {
	mu.Lock()
	defer mu.Unlock()
	if saved == nil {
		saved = map[string]string{}
		for _, k := range envVars {
			if v, ok := os.LookupEnv(k); ok {
				saved[k] = v
			}
		}
	}
	for _, k := range envVars {
		_ = os.Unsetenv(k) // fails only for a name with '=' or NUL in it
	}
}

// Notify sends state (one or more VAR=VALUE lines, e.g. Ready) to the service manager at
// $NOTIFY_SOCKET. It returns sent false and no error when $NOTIFY_SOCKET is unset or empty (not
// under systemd's notify protocol); an error when the socket cannot be reached or the message not
// written within a second. It never unsets the variable (see Unsetenv).
func Notify(state string) (sent bool, err error) {
	addr := getenv(EnvSocket)
	if addr == "" {
		return false, nil
	}
	if state == "" {
		return false, errors.New("sdnotify: empty state: nothing to send")
	}
	if len(addr) < 2 || (addr[0] != '/' && addr[0] != '@') {
		return false, fmt.Errorf("sdnotify: %s=%q: want an absolute path or an abstract socket (@name)", EnvSocket, addr)
	}
	// A name starting with '@' is an abstract socket: the net package puts the NUL byte there.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	n, err := conn.Write([]byte(state))
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	if n != len(state) {
		return false, fmt.Errorf("sdnotify: %s: wrote %d of %d bytes", addr, n, len(state))
	}
	return true, nil
}

// WatchdogInterval is the unit's WatchdogSec= as systemd passes it (WATCHDOG_USEC), and true, when
// the watchdog is on for this process: WATCHDOG_PID, when set, must be this process's pid (as
// sd_watchdog_enabled(3) checks). False when it is off, or the variables are not numbers. Send
// Watchdog at least every half of it.
func WatchdogInterval() (time.Duration, bool) {
	usec, err := strconv.ParseUint(getenv(EnvWatchdogUsec), 10, 63)
	if err != nil || usec == 0 || usec > uint64(time.Duration(1<<63-1)/time.Microsecond) {
		return 0, false
	}
	if p := getenv(EnvWatchdogPID); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil || pid != os.Getpid() {
			return 0, false
		}
	}
	return time.Duration(usec) * time.Microsecond, true
}
