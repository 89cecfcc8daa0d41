package cli

import (
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/once-run/once/internal/trust"
	"github.com/once-run/once/store/sqlite"
)

// home is once's state directory: $ONCE_HOME, else $XDG_STATE_HOME/once, else ~/.local/state/once;
// /var/lib/once for root. It is the command's layout, not the guard's: a Go program using package
// once chooses its own Options.LockDir and store.
//
// ONCE_HOME set but empty, or relative, is refused: either would silently be another ledger (the
// default one, or one that moves with the working directory), where a slot already done runs again.
func home() (string, error) {
	if h, set := os.LookupEnv("ONCE_HOME"); set {
		switch {
		case h == "":
			return "", usage("ONCE_HOME is set but empty: unset it for the default (%s), or give a directory", defaultHome())
		case unseen(h):
			return "", usage("ONCE_HOME=%q starts or ends with whitespace or an invisible character, or holds a control character, which would be part of the directory: another ledger, where a slot already done runs again (a stray space in the crontab line or unit?); remove it", h)
		case strings.Contains(h, "$") && filepath.IsAbs(h) && sqlite.OwnLedger(filepath.Join(h, "once.db")):
			// An older once took the '$' as written (an absolute path was accepted) and kept its
			// ledger there: the directory meant holds none of the slots it ran.
			return "", usage("ONCE_HOME=%s: '$' is not expanded in a crontab's or a unit's variables (it is taken as written), and an older once kept its ledger in that directory, with the slots it ran: move it to the path meant, with no once running (mv %s /the/path/meant), then write that path out (docs/operations.md#upgrading-once)",
				h, trust.Quote(filepath.Clean(h)))
		case strings.HasPrefix(h, "~") || strings.Contains(h, "$"):
			// A crontab's ONCE_HOME=$HOME/once or ~/once: cron expands neither.
			return "", usage("ONCE_HOME=%s: '~' and '$' are not expanded in a crontab's or a unit's variables (they are taken as written); write the absolute path out", h)
		case !filepath.IsAbs(h):
			return "", usage("ONCE_HOME=%s is relative: it would name another ledger in every working directory; give an absolute path", h)
		}
		return filepath.Clean(h), nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/once", nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); unseen(x) {
		return "", usage("XDG_STATE_HOME=%q starts or ends with whitespace or an invisible character, or holds a control character, which would be part of the directory: another ledger, where a slot already done runs again; remove it, or set ONCE_HOME", x)
	} else if strings.HasPrefix(x, "~") || strings.Contains(x, "$") {
		// Relative, it would be ignored (as XDG says): ~/.local/state/once, not the shell's ledger.
		return "", usage("XDG_STATE_HOME=%s: '~' and '$' are not expanded in a crontab's or a unit's variables (they are taken as written); write the absolute path out, or set ONCE_HOME", x)
	} else if x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "once"), nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", usage("cannot find a home directory for once's state: set ONCE_HOME")
	}
	return filepath.Join(h, ".local", "state", "once"), nil
}

// unseen reports whether a state directory's path has what a person reading a crontab or a unit
// does not see: whitespace or an invisible formatting character (a BOM, a zero-width space) at either
// end, or a control character anywhere. Taken as written it names another directory (the DSN's
// rule, store.Scheme).
func unseen(p string) bool {
	edge := func(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) }
	return strings.TrimFunc(p, edge) != p || strings.ContainsFunc(p, unicode.IsControl)
}

// lockDir is the directory of the kernel file locks under the state directory h.
func lockDir(h string) string { return filepath.Join(h, "locks") }

// defaultHome names the state directory used without ONCE_HOME, for messages.
func defaultHome() string {
	if os.Geteuid() == 0 {
		return "/var/lib/once"
	}
	return "$XDG_STATE_HOME/once or ~/.local/state/once"
}

// envNotEmpty refuses (64) each of names that is set but empty: an unset variable in a crontab or
// a unit file, which taken as absent would silently mean the default.
func envNotEmpty(names ...string) error {
	for _, n := range names {
		if v, set := os.LookupEnv(n); set && v == "" {
			return usage("%s is set but empty (an unset variable?): give it a value, or unset it for the default", n)
		}
	}
	return nil
}
