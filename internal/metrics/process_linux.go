package metrics

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The process's metrics, under the names the Prometheus client's process collector gives them,
// read from /proc as it does.
var (
	descCPU        = counterDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.")
	descOpenFDs    = gaugeDesc("process_open_fds", "Number of open file descriptors.")
	descMaxFDs     = gaugeDesc("process_max_fds", "Maximum number of open file descriptors.")
	descVirtual    = gaugeDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.")
	descVirtualMax = gaugeDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.")
	descResident   = gaugeDesc("process_resident_memory_bytes", "Resident memory size in bytes.")
	descStartTime  = gaugeDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
)

// userHZ is the unit of /proc's times: USER_HZ, 100 on every Linux the Prometheus client knows.
const userHZ = 100

// collectProcess adds the process's metrics; a file of /proc it cannot read leaves its series out.
func collectProcess(w *sink) {
	if st, err := os.ReadFile("/proc/self/stat"); err == nil {
		// Fields after the command's name, which is in parentheses and may hold spaces.
		if i := bytes.LastIndexByte(st, ')'); i >= 0 {
			f := strings.Fields(string(st[i+1:]))
			// f[0] is field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23, rss 24.
			num := func(field int) float64 {
				if field-3 >= len(f) {
					return 0
				}
				v, _ := strconv.ParseFloat(f[field-3], 64)
				return v
			}
			if len(f) >= 22 {
				w.counter(descCPU, (num(14)+num(15))/userHZ)
				w.gauge(descVirtual, num(23))
				w.gauge(descResident, num(24)*float64(os.Getpagesize()))
				if boot := bootTime(); boot > 0 {
					w.gauge(descStartTime, boot+num(22)/userHZ)
				}
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		w.gauge(descOpenFDs, float64(len(fds)))
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		w.gauge(descMaxFDs, float64(rl.Cur))
	}
	if unix.Getrlimit(unix.RLIMIT_AS, &rl) == nil {
		w.gauge(descVirtualMax, float64(rl.Cur))
	}
}

// bootTime is the system's boot time (Unix seconds) from /proc/stat's btime; 0 if unknown.
func bootTime() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
