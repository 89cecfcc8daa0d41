package trust_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/once-run/once/internal/testfs"
	"github.com/once-run/once/internal/trust"
)

// Config: a jobs file others can change is refused; on a read-only file system nobody can, whatever
// the mode (a Kubernetes ConfigMap volume: a 0777 directory, mounted read-only, its files reached
// through links).
func TestConfigReadOnlyMount(t *testing.T) {
	mnt, remount := testfs.Tmpfs(t, "755")
	jobs := filepath.Join(mnt, "jobs")
	os.MkdirAll(filepath.Join(jobs, "..v1"), 0o755)
	os.Chmod(jobs, 0o2777)
	os.WriteFile(filepath.Join(jobs, "..v1", "jobs.toml"), []byte("x"), 0o644)
	os.Symlink("..v1", filepath.Join(jobs, "..data"))
	os.Symlink("..data/jobs.toml", filepath.Join(jobs, "jobs.toml"))
	file := filepath.Join(jobs, "jobs.toml")
	if err := trust.Config(file); !errors.Is(err, trust.ErrUnsafe) {
		t.Fatalf("a jobs file under a 02777 directory, writable: %v, want ErrUnsafe", err)
	}
	remount(true)
	if err := trust.Config(file); err != nil {
		t.Fatalf("the same, mounted read-only: %v", err)
	}
}
