package testfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a fresh tmpfs for the test at a new directory under t.TempDir(), its root with
// mode (e.g. "700"), and unmounts it when the test ends. It skips the test when this process is
// not root or the kernel refuses the mount. remount switches it read-only (ro) or back; a refusal
// fails the test.
func Tmpfs(t testing.TB, mode string) (mnt string, remount func(ro bool)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	mnt = filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "mode="+mode+",size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt, func(ro bool) {
		t.Helper()
		flags := uintptr(unix.MS_REMOUNT)
		if ro {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", mnt, "", flags, ""); err != nil {
			t.Fatalf("remount %s (read-only %v): %v", mnt, ro, err)
		}
	}
}
