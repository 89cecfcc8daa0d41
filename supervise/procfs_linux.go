package supervise

import (
	"bytes"
	"os"
	"strconv"
	"sync/atomic"
)

// scans counts calls of scanProcs: the tree walk must not need it (a test checks).
var scans atomic.Int64

// scanProcs calls fn for every process in /proc with its pid, parent pid, process group and state. Its
// cost grows with the number of processes on the host; only kernels without children files use it.
func scanProcs(fn func(pid, ppid, pgrp int, state byte)) {
	scans.Add(1)
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		ppid, pgrp, state, ok := procStat(pid)
		if ok {
			fn(pid, ppid, pgrp, state)
		}
	}
}

// procStat parses /proc/PID/stat: "pid (comm) state ppid pgrp ...". comm may contain spaces and ')'.
func procStat(pid int) (ppid, pgrp int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	return parseStat(b)
}

func parseStat(b []byte) (ppid, pgrp int, state byte, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	return ppid, pgrp, f[0][0], true
}
