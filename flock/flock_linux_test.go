package flock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/once-run/once/flock"
)

// A lock directory the file system will not let us use (here: read-only) is ErrUnusable, with
// the cause and what to do, not an unexplained error (the CLI said "internal error", exit 70).
func TestUnusableDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a read-only file system needs root")
	}
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "mode=700"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	_, err := flock.Acquire(context.Background(), filepath.Join(dir, "locks"), "t", 0)
	if !errors.Is(err, flock.ErrUnusable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("lock in a read-only directory: %v, want ErrUnusable saying read-only", err)
	}
}
