package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// manager is the service manager's end: a unixgram socket the test binds, as systemd does.
type manager struct {
	t    *testing.T
	conn *net.UnixConn
	addr string
}

func listen(t *testing.T, addr string) *manager {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &manager{t: t, conn: conn, addr: addr}
}

// pathSocket binds a socket file in a fresh directory and points NOTIFY_SOCKET at it.
func pathSocket(t *testing.T) *manager {
	m := listen(t, filepath.Join(t.TempDir(), "notify"))
	t.Setenv(EnvSocket, m.addr)
	return m
}

func (m *manager) receive() string {
	m.t.Helper()
	buf := make([]byte, 4096)
	if err := m.conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		m.t.Fatal(err)
	}
	n, err := m.conn.Read(buf)
	if err != nil {
		m.t.Fatalf("manager received nothing: %v", err)
	}
	return string(buf[:n])
}

// fresh forgets what an earlier test's Unsetenv kept, so that each test reads its own environment.
func fresh(t *testing.T) {
	t.Helper()
	reset := func() {
		mu.Lock()
		saved = nil
		mu.Unlock()
	}
	reset()
	t.Cleanup(reset)
}

func mustSend(t *testing.T, state string) {
	t.Helper()
	sent, err := Notify(state)
	if err != nil || !sent {
		t.Fatalf("Notify(%q) = %v, %v; want sent", state, sent, err)
	}
}

// The datagram is the state, byte for byte, on a socket file and on an abstract socket.
func TestNotifySendsTheState(t *testing.T) {
	fresh(t)
	for _, c := range []struct{ name, addr string }{
		{"path", ""}, // in t.TempDir()
		{"abstract", fmt.Sprintf("@once-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m *manager
			if c.addr == "" {
				m = pathSocket(t)
			} else {
				m = listen(t, c.addr)
				t.Setenv(EnvSocket, c.addr)
			}
			for _, state := range []string{Ready, Stopping, Watchdog, Ready + "\n" + Status("12 jobs, next backup 02:00")} {
				mustSend(t, state)
				if got := m.receive(); got != state {
					t.Errorf("manager got %q, want %q", got, state)
				}
			}
		})
	}
}

func TestNotifyWithoutSocketIsANoOp(t *testing.T) {
	fresh(t)
	t.Setenv(EnvSocket, "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("NOTIFY_SOCKET empty: Notify = %v, %v; want false, nil", sent, err)
	}
	os.Unsetenv(EnvSocket)
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("NOTIFY_SOCKET unset: Notify = %v, %v; want false, nil", sent, err)
	}
}

// Each failure is one error naming what is wrong, and nothing counts as sent.
func TestNotifyErrors(t *testing.T) {
	fresh(t)
	dir := t.TempDir()
	notSocket := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(dir, "closed")
	l := listen(t, closed)
	l.conn.Close() // the file stays, nobody reads it: a manager that went away
	cases := []struct{ socket, state, want string }{
		{filepath.Join(dir, "missing"), Ready, "no such file or directory"},
		{notSocket, Ready, "connection refused"},
		{closed, Ready, "connection refused"},
		{"@once-sdnotify-nobody-" + strconv.Itoa(os.Getpid()), Ready, "connection refused"},
		{"relative/notify", Ready, "want an absolute path or an abstract socket"},
		{"vsock:2:1234", Ready, "want an absolute path or an abstract socket"},
		{"@", Ready, "want an absolute path or an abstract socket"},
		{filepath.Join(dir, "missing"), "", "empty state"},
	}
	for _, c := range cases {
		t.Setenv(EnvSocket, c.socket)
		sent, err := Notify(c.state)
		if sent || err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "sdnotify: ") {
			t.Errorf("NOTIFY_SOCKET=%q, Notify(%q) = %v, %v; want an error with %q", c.socket, c.state, sent, err, c.want)
		}
	}
}

// A manager that does not read (hung, its queue full) costs a Notify at most the write timeout.
func TestNotifyDoesNotBlockOnAFullQueue(t *testing.T) {
	fresh(t)
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = 50 * time.Millisecond
	pathSocket(t) // never read
	for i := 0; i < 100000; i++ {
		start := time.Now()
		_, err := Notify(Watchdog)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Notify took %v", took)
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after %d messages: %v; want a deadline error", i, err)
			}
			return
		}
	}
	t.Fatal("100000 messages queued to a manager that reads none: the queue never filled")
}

// Unsetenv hides the variables from commands started later, and Notify and WatchdogInterval keep
// working from what it kept.
func TestUnsetenv(t *testing.T) {
	fresh(t)
	m := pathSocket(t)
	t.Setenv(EnvWatchdogUsec, "20000000")
	t.Setenv(EnvWatchdogPID, strconv.Itoa(os.Getpid()))
	Unsetenv()
	for _, k := range []string{EnvSocket, EnvWatchdogUsec, EnvWatchdogPID} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("after Unsetenv %s=%q", k, v)
		}
	}
	out, err := exec.Command("sh", "-c", `echo "${NOTIFY_SOCKET-unset} ${WATCHDOG_USEC-unset} ${WATCHDOG_PID-unset}"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "unset unset unset" {
		t.Errorf("a command started after Unsetenv sees %q", got)
	}
	mustSend(t, Ready)
	if got := m.receive(); got != Ready {
		t.Errorf("manager got %q", got)
	}
	if d, ok := WatchdogInterval(); !ok || d != 20*time.Second {
		t.Errorf("WatchdogInterval() = %v, %v after Unsetenv; want 20s, true", d, ok)
	}
	// A later value is not taken: the first call's are the service manager's.
	t.Setenv(EnvSocket, "/nonexistent/socket")
	Unsetenv()
	mustSend(t, Stopping)
	if got := m.receive(); got != Stopping {
		t.Errorf("manager got %q", got)
	}
	if _, ok := os.LookupEnv(EnvSocket); ok {
		t.Error("a second Unsetenv left NOTIFY_SOCKET set")
	}
}

func TestWatchdogInterval(t *testing.T) {
	fresh(t)
	me := strconv.Itoa(os.Getpid())
	cases := []struct {
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"", "", 0, false},
		{"30000000", "", 30 * time.Second, true},
		{"30000000", me, 30 * time.Second, true},
		{"500", me, 500 * time.Microsecond, true},
		{"30000000", strconv.Itoa(os.Getpid() + 1), 0, false}, // meant for another process
		{"30000000", "x", 0, false},
		{"0", "", 0, false},
		{"-5", "", 0, false},
		{"1.5", "", 0, false},
		{"99999999999999999999", "", 0, false},
	}
	for _, c := range cases {
		t.Setenv(EnvWatchdogUsec, c.usec)
		t.Setenv(EnvWatchdogPID, c.pid)
		if d, ok := WatchdogInterval(); d != c.want || ok != c.ok {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, %v; want %v, %v", c.usec, c.pid, d, ok, c.want, c.ok)
		}
	}
}

func TestStatusIsOneLine(t *testing.T) {
	if got, want := Status("jobs.toml:3: bad\nREADY=1\r\x00x"), "STATUS=jobs.toml:3: bad READY=1  x"; got != want {
		t.Errorf("Status = %q, want %q", got, want)
	}
}

// RELOADING=1 carries CLOCK_MONOTONIC in µs, the clock systemd compares it with.
func TestReloading(t *testing.T) {
	before, ok := monotonicUsec()
	if !ok {
		t.Fatal("no CLOCK_MONOTONIC")
	}
	msg := Reloading()
	lines := strings.Split(msg, "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("Reloading() = %q", msg)
	}
	us, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := monotonicUsec()
	if us < before || us > after {
		t.Errorf("MONOTONIC_USEC=%d, not between %d and %d", us, before, after)
	}
	// CLOCK_MONOTONIC, not the wall clock or CLOCK_BOOTTIME: /proc/uptime is seconds of
	// CLOCK_BOOTTIME, which is at least as far along (it also counts suspend).
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Skip(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	if float64(us)/1e6 > up+1 {
		t.Errorf("MONOTONIC_USEC=%d is %.0f s past the uptime %.0f s", us, float64(us)/1e6-up, up)
	}
}
