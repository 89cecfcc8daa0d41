package flock_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-run/once/flock"
	"github.com/once-run/once/internal/testfs"
)

// A lock directory the file system will not let us use (here: read-only) is ErrUnusable, with
// the cause and what to do, not an unexplained error (the CLI said "internal error", exit 70).
func TestUnusableDirectory(t *testing.T) {
	dir, remount := testfs.Tmpfs(t, "700")
	remount(true)
	_, err := flock.Acquire(context.Background(), filepath.Join(dir, "locks"), "t", 0)
	if !errors.Is(err, flock.ErrUnusable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("lock in a read-only directory: %v, want ErrUnusable saying read-only", err)
	}
}
