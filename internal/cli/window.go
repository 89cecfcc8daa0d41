package cli

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once"
)

// maxWindow is the longest window parseWindow accepts (--catch-up, and the ages of prune and
// --retain).
const maxWindow = 10 * 366 * 24 * time.Hour

// parseWindow parses a --catch-up window: a Go duration (90m, 36h), optionally preceded by a
// whole number of weeks and/or days ("2w", "3d", "1d12h", "1w2d"). It must be positive and at
// most maxWindow; else a usage error (64).
func parseWindow(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, usage("--catch-up %q: give a window such as 6h, 3d, 1d12h or 2w", s)
	}
	rest := s
	var d time.Duration
	for _, u := range []struct {
		suffix byte
		unit   time.Duration
	}{{'w', 7 * 24 * time.Hour}, {'d', 24 * time.Hour}} {
		i := strings.IndexByte(rest, u.suffix)
		if i < 0 {
			continue
		}
		n, err := strconv.ParseUint(rest[:i], 10, 16)
		if err != nil || i == 0 || rest[0] == '+' || n > 5000 {
			return bad()
		}
		d += time.Duration(n) * u.unit
		rest = rest[i+1:]
	}
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return bad()
		}
		x, err := time.ParseDuration(rest)
		if err != nil {
			return bad()
		}
		d += x
	}
	if d <= 0 {
		return bad()
	}
	if d > maxWindow {
		return 0, usage("--catch-up %q is longer than 10 years", s)
	}
	return d, nil
}

// catchUpRefused says a catch-up window the guard refused for its size in the flags' words.
func catchUpRefused(err error) error {
	var we *once.WindowError
	switch {
	case !errors.As(err, &we):
		return err
	case we.Spans:
		return usage("--catch-up %s spans more than %d slots of %s: shorten the window, or use once backfill",
			we.Window, once.MaxCatchUpWindowSlots, we.Spec)
	}
	return usage("catch-up would run %d missed slots of task %s (%s to %s), more than --catch-up-max %d: raise --catch-up-max, or run them with once backfill",
		we.Due, we.Task, we.First, we.Last, we.Max)
}

// checkTask validates --task: once.ValidateTask, but an empty one is asked for by its flag.
func checkTask(name string) error {
	if name == "" {
		return usage("task name is empty: give --task NAME (letters, digits and . _ : @ / -)")
	}
	return once.ValidateTask(name)
}

// parsePolicy validates --on-unknown.
func parsePolicy(s string) (once.Policy, error) {
	p, err := once.ParsePolicy(s)
	if err != nil {
		return "", usage("--on-unknown %q: use review, rerun or skip", s)
	}
	return p, nil
}
