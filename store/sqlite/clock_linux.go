package sqlite

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

var bootID = sync.OnceValues(func() (string, int64) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := string(bytes.TrimSpace(b))
	if err != nil || id == "" {
		return "", 0
	}
	return id, timensBootOffset()
})

// timensBootOffset is this process's time namespace offset of CLOCK_BOOTTIME in µs (0 outside
// one), so that processes in different time namespaces still read the same counter.
func timensBootOffset() int64 {
	f, err := os.Open("/proc/self/timens_offsets")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := bytes.Fields(sc.Bytes())
		if len(fs) == 3 && (string(fs[0]) == "boottime" || string(fs[0]) == "7") {
			sec, err1 := strconv.ParseInt(string(fs[1]), 10, 64)
			nsec, err2 := strconv.ParseInt(string(fs[2]), 10, 64)
			if err1 == nil && err2 == nil {
				return sec*1e6 + nsec/1e3
			}
		}
	}
	return 0
}

// bootClock returns this boot's id and CLOCK_BOOTTIME in µs (as the host reads it).
func bootClock() (string, int64, bool) {
	id, off := bootID()
	if id == "" {
		return "", 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, false
	}
	return id, ts.Nano()/1e3 - off, true
}
