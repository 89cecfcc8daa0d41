package supervise

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

// DefaultShim is the argv prefix of the shim a once binary uses: the dedicated shim (ShimName)
// when one is installed beside the running executable, or in ../libexec/once/ from its directory,
// and is trusted; else the executable re-executed with ShimArg. Found once per process.
//
// A dedicated shim is trusted when it is a regular file (not a symbolic link, one link only, no
// setuid or setgid bit), executable, owned by root or by the executable's owner and writable by
// nobody else, in directories that are owned by root or that owner and not writable by others
// unless sticky: whoever could replace it could replace once itself. A once-shim that does not
// start, or speaks another version of the shim protocol (one of a release whose protocol
// differs), is detected by Prepare, which re-executes the executable instead, for that run and
// every later one of the process.
func DefaultShim() []string {
	if dedicatedFailed.Load() {
		return selfShim
	}
	return defaultShim()
}

// dedicatedFailed: the dedicated shim failed to start once in this process (Prepare).
var dedicatedFailed atomic.Bool

// isDedicated reports whether shim is the dedicated shim DefaultShim found: a path alone (selfShim
// has two elements), so a caller that never asked for the dedicated shim does not look for one.
func isDedicated(shim []string) bool {
	return len(shim) == 1 && slices.Equal(shim, defaultShim())
}

var defaultShim = sync.OnceValue(func() []string {
	exe, err := os.Executable()
	if err != nil {
		return selfShim
	}
	if p := findShim(exe); p != "" {
		return []string{p}
	}
	return selfShim
})

// findShim returns the path of the dedicated shim trusted for the executable exe, or "".
func findShim(exe string) string {
	fi, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	dir := filepath.Dir(exe)
	for _, p := range []string{filepath.Join(dir, ShimName), filepath.Join(dir, "..", "libexec", "once", ShimName)} {
		if trustedShim(filepath.Clean(p), dir, owner) {
			return filepath.Clean(p)
		}
	}
	return ""
}

// trustedShim checks the file p and its directories up to top's parent (see DefaultShim).
func trustedShim(p, top string, owner uint32) bool {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || !ownedSafely(fi, owner) ||
		fi.Mode().Perm()&0o022 != 0 || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Sys().(*syscall.Stat_t).Nlink != 1 {
		return false
	}
	stop := filepath.Dir(top)
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		di, err := os.Lstat(d)
		if err != nil || !di.IsDir() || !ownedSafely(di, owner) {
			return false
		}
		if di.Mode().Perm()&0o002 != 0 && di.Mode()&os.ModeSticky == 0 || di.Mode().Perm()&0o020 != 0 {
			return false
		}
		if d == stop || d == top || d == "/" {
			return true
		}
	}
}

func ownedSafely(fi os.FileInfo, owner uint32) bool {
	uid := fi.Sys().(*syscall.Stat_t).Uid
	return uid == 0 || uid == owner
}
