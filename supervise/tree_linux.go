package supervise

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run's processes are the descendants of its shim. The shim is a child subreaper, so a process whose
// parent exits (a double fork, a setsid daemon) is re-parented to the shim rather than to init, and
// stays a descendant for as long as the shim lives. Descendants are found by following
// /proc/PID/task/TID/children from the shim down: the cost grows with the size of the run's tree, not
// with the number of processes on the host. Kernels built without CONFIG_PROC_CHILDREN fall back to
// one scan of /proc per walk.

// proc is one member of a tree: its pid, the parent it was found under, and its process group then.
type proc struct{ pid, ppid, pgrp int }

// childrenFile tells whether /proc/PID/task/TID/children exists on this kernel (checked on first use).
var childrenFile = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/children")
	return err == nil
})

// descendants lists the live (not zombie) descendants of root, root excluded, parents before children.
func descendants(root int) []proc {
	if !childrenFile() {
		return scanDescendants(root)
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, pid := range children(parent) {
			queue = append(queue, pid) // a zombie has no children, but the walk is cheap either way
			if _, pgrp, state, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
				out = append(out, proc{pid, parent, pgrp})
			}
		}
	}
	return out
}

// children lists pid's children from every one of its threads' children files.
func children(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	tids, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, tid := range tids {
		b, err := readProc(dir + "/" + tid + "/children")
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// childPids lists pid's children, live or not.
func childPids(pid int) []int {
	if childrenFile() {
		return children(pid)
	}
	var out []int
	scanProcs(func(p, ppid, _ int, _ byte) {
		if ppid == pid {
			out = append(out, p)
		}
	})
	return out
}

// scanDescendants is descendants by one scan of /proc, for kernels without children files.
func scanDescendants(root int) []proc {
	kids := map[int][]int{}
	live := map[int]bool{}
	group := map[int]int{}
	scanProcs(func(pid, ppid, pgrp int, state byte) {
		kids[ppid] = append(kids[ppid], pid)
		live[pid] = state != 'Z' && state != 'X'
		group[pid] = pgrp
	})
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, pid := range kids[parent] {
			queue = append(queue, pid)
			if live[pid] {
				out = append(out, proc{pid, parent, group[pid]})
			}
		}
	}
	return out
}

// signal sends sig to p, a descendant of root found by a walk, unless its pid now names a process outside
// the tree. Through a pidfd the process signalled is the one whose parent was checked, so a pid reused
// after the walk is never hit. A process whose parent died since the walk was re-parented to root (the
// subreaper) or, if root died too, to this process: it is still one of ours.
func (p proc) signal(sig syscall.Signal, root int) {
	ours := func() bool {
		ppid, _, _, ok := procStat(p.pid)
		return ok && (ppid == p.ppid || ppid == root || ppid == os.Getpid())
	}
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) && ours() { // kernels before 5.3
			_ = syscall.Kill(p.pid, sig)
		}
		return // ESRCH: gone already
	}
	defer unix.Close(fd)
	if ours() {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// signalRun sends sig to every process of the run of root, the shim, which leads the run's process
// group: to the group first, then to every live descendant of root outside it (a setsid daemon, a
// child of its own group). A walk alone misses a process forked while it runs, after its parent's
// children were read: a shell that gets SIGINT while it waits for its foreground command waits
// for that command to end, and the command never got it (`sh -c '…; sleep 300'` then lives until
// the grace's kill). The kernel delivers a group's signal to a child forked meanwhile, as a
// terminal's ^C does. The walk skips the group's members: a second signal would read as a second
// ^C to a program that force-quits on it (only a process that leaves the group between the two
// sends gets both). The group is named by number, with no pidfd: that is safe because the caller
// (Process.Signal) holds the shim unreaped, and a zombie's pid, so its group's id, is not reused.
func signalRun(root int, sig syscall.Signal) {
	if root <= 1 {
		return // never set: kill(0) would signal once's own group (a daemon's), kill(-1) everyone
	}
	_ = syscall.Kill(-root, sig)
	var outside []proc
	for _, p := range descendants(root) {
		if p.pgrp != root {
			outside = append(outside, p)
		}
	}
	if afterWalk != nil {
		afterWalk(outside)
	}
	for _, p := range outside {
		p.signal(sig, root)
	}
}

// afterWalk, when set (by a test, before the signal), runs in signalRun between its walk and the
// signals it sends, with the processes the walk will signal: a test forks there what a walk would
// have missed, or checks that no member of the group is signalled twice.
var afterWalk func(outside []proc)

// killTree SIGKILLs every descendant of root, walking again until a walk finds none alive, and returns
// how many were still alive when it gave up at deadline (a fork bomb can outrun it). Each round kills
// every process that existed when it walked; a process forked since is found by the next walk, because
// its parent either lives (and is found) or died and re-parented it to the subreaper above. reap, when
// not nil, collects zombies between rounds (root's own role when root is this process).
func killTree(root int, deadline time.Time, reap func()) int {
	pause := 100 * time.Microsecond
	for {
		left := descendants(root)
		if len(left) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			return len(left)
		}
		for _, p := range left {
			p.signal(syscall.SIGKILL, root)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
		if reap != nil {
			reap()
		}
	}
}

// anyAlive reports whether any of ps is still alive (not a zombie).
func anyAlive(ps []proc) bool {
	for _, p := range ps {
		if _, _, state, ok := procStat(p.pid); ok && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}
