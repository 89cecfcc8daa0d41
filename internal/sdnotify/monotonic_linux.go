package sdnotify

import (
	"syscall"
	"unsafe"
)

const clockMonotonic = 1 // CLOCK_MONOTONIC, <linux/time.h>

// monotonicUsec is CLOCK_MONOTONIC in µs, the clock systemd reads MONOTONIC_USEC= against.
func monotonicUsec() (int64, bool) {
	var ts syscall.Timespec
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		return 0, false
	}
	return ts.Nano() / 1e3, true
}
