package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lookPath resolves name like a shell/os/exec would, with PATH taken from env (last PATH= wins) or the
// process. Empty or relative PATH entries are skipped: os/exec refuses them too (ErrDot), and running
// ./name because "." is in PATH is a classic way to be fooled. The result is absolute.
func lookPath(name string, env []string, dir string) (string, error) {
	if name == "" {
		return "", &cmdError{ErrNotFound, "command not found: the command's name is empty (an unset variable?)"}
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			base := dir
			if base == "" {
				wd, err := os.Getwd()
				if err != nil {
					return "", fmt.Errorf("supervise: resolve %s: %w", name, err)
				}
				base = wd
			} else if !filepath.IsAbs(base) {
				abs, err := filepath.Abs(base)
				if err != nil {
					return "", fmt.Errorf("supervise: resolve %s: %w", name, err)
				}
				base = abs
			}
			p = filepath.Join(base, p)
		}
		if err := executable(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", &cmdError{ErrNotFound, "command not found: " + name}
			}
			return "", &cmdError{ErrNotExecutable, fmt.Sprintf("command not executable: %s: %v", name, err)}
		}
		return p, nil
	}
	path, ok := "", false
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			path, ok = v, true
		}
	}
	if !ok {
		path = os.Getenv("PATH")
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", &cmdError{ErrNotExecutable, fmt.Sprintf("command not executable: %s: %v", name, denied)}
	}
	return "", &cmdError{ErrNotFound, "command not found: " + name}
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("is a directory")
	}
	if err := syscall.Access(p, 1 /* X_OK */); err != nil {
		return err
	}
	return nil
}

// cmdError reads as a shell would say it ("command not found: X") and matches its sentinel with errors.Is.
type cmdError struct {
	sentinel error
	msg      string
}

func (e *cmdError) Error() string { return e.msg }
func (e *cmdError) Unwrap() error { return e.sentinel }

// Check finds cfg.Args[0] and checks that it can be executed, as Prepare does, without starting
// anything: errors wrap ErrNotFound or ErrNotExecutable.
func Check(cfg Config) error {
	if len(cfg.Args) == 0 {
		return &cmdError{ErrNotFound, "command not found: (none given)"}
	}
	path, err := lookPath(cfg.Args[0], cfg.Env, cfg.Dir)
	if err != nil {
		return err
	}
	return checkExec(cfg.Args[0], path, cfg.Dir)
}
