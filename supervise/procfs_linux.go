package supervise

import (
	"bytes"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// readProc reads a small file of /proc with plain system calls: os.ReadFile's file also tries the
// runtime's poller (five more calls per file), and a tree walk reads one file per thread and child.
func readProc(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

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
	b, err := readProc("/proc/" + strconv.Itoa(pid) + "/stat")
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
