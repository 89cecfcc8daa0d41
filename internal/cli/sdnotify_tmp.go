package cli

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// takeNotifySocket returns $NOTIFY_SOCKET and removes it from the environment, so that the jobs'
// commands do not inherit it.
func takeNotifySocket() string {
	s := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	return s
}

func sdNotify(sock, state string) {
	if sock == "" {
		return
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

func monotonicUsec() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano() / 1000
}
