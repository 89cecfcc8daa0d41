package cli

import (
	"os"
	"path/filepath"
)

// home is once's state directory: $ONCE_HOME, else $XDG_STATE_HOME/once, else ~/.local/state/once;
// /var/lib/once for root. It is the command's layout, not the guard's: a Go program using package
// once chooses its own Options.LockDir and store.
func home() (string, error) {
	if h := os.Getenv("ONCE_HOME"); h != "" {
		return filepath.Abs(h)
	}
	if os.Geteuid() == 0 {
		return "/var/lib/once", nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "once"), nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", usage("cannot find a home directory for once's state: set ONCE_HOME")
	}
	return filepath.Join(h, ".local", "state", "once"), nil
}

// lockDir is the directory of the kernel file locks under the state directory h.
func lockDir(h string) string { return filepath.Join(h, "locks") }
