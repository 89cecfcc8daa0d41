package sqlite

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/once-run/once/store"
)

// Params are the query parameters a sqlite DSN accepts (docs/stores/sqlite.md).
var Params = []string{"prefix", "busy_timeout", "group"}

var spec = store.QuerySpec{Store: "sqlite", Doc: "docs/stores/sqlite.md", Known: Params}

// DefaultBusyTimeout is how long a write waits for another process's transaction before the
// store reports ErrUnavailable.
const DefaultBusyTimeout = 10 * time.Second

// Options tune a SQLite store. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every table name so several deployments can share one file.
	// "" means no prefix; any other follows store.CheckPrefix, the rule every store shares.
	Prefix string
	// BusyTimeout is how long a statement waits for a lock held by another connection or
	// process before failing with ErrUnavailable. 0 means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Group, a group name or number, opts in to a ledger shared by the group's members: its
	// directory must be owned by root (or this user), belong to the group, be setgid and not
	// writable by others, and its files belong to the group (mode 0660). Every member can then
	// rewrite any record. "" means the files are private to this user.
	Group string
}

func (o Options) validate() error {
	if o.Prefix != "" {
		if err := store.CheckPrefix(o.Prefix); err != nil {
			return err
		}
	}
	if len(o.Group) > 64 || strings.ContainsAny(o.Group, "/:") || strings.ContainsFunc(o.Group, unicode.IsControl) {
		return fmt.Errorf("%w: sqlite group %q is not a group name or number", store.ErrBadDSN, o.Group)
	}
	if o.BusyTimeout < 0 || o.BusyTimeout > time.Hour {
		return fmt.Errorf("%w: sqlite busy_timeout %s must be between 1ms and 1h", store.ErrBadDSN, o.BusyTimeout)
	}
	return nil
}

// ParseDSN splits a sqlite DSN into a file path and options.
//
// Accepted forms: sqlite:///abs/path.db, sqlite://localhost/abs/path.db, sqlite:/abs/path.db,
// sqlite:relative/path.db and sqlite:./path.db (relative to the working directory). The path is
// percent-decoded. Query parameters (parsed by store.ParseQuery): prefix=NAME (store.CheckPrefix),
// busy_timeout=DURATION (a Go duration such as 5s, between 1ms and 1h) and group=NAME (a ledger
// shared by a group, see Options.Group). Anything else, a
// fragment, a host or an empty path is an error wrapping store.ErrBadDSN.
func ParseDSN(dsn string) (path string, opts Options, err error) {
	bad := func(format string, args ...any) (string, Options, error) {
		return "", Options{}, fmt.Errorf("%w: sqlite DSN %q: %s", store.ErrBadDSN, store.Redact(dsn), fmt.Sprintf(format, args...))
	}
	i := strings.IndexByte(dsn, ':')
	if i < 0 || !strings.EqualFold(dsn[:i], "sqlite") {
		return bad("scheme must be sqlite (e.g. sqlite:///var/lib/once/once.db)")
	}
	rest := dsn[i+1:]
	if strings.ContainsAny(rest, "#\x00") {
		return bad("'#' and NUL are not allowed; percent-encode them")
	}
	raw, query, hasQuery := strings.Cut(rest, "?")
	if strings.ContainsRune(raw, '$') {
		// ONCE_STORE=sqlite:$HOME/once.db in a crontab: cron takes the value as written, and a
		// relative path made ~/$HOME/once.db, a ledger other than the shell's ~/once.db.
		if kept := unexpandedLedger(raw); kept != "" {
			keep := FileDSN(kept)
			if hasQuery { // the same tables (prefix=) and sharing (group=) as the older once
				keep += "?" + query
			}
			// An older once took the '$' as written and kept its ledger there: the path meant
			// holds none of the slots it ran, which would run again.
			return bad("'$' is not expanded (a crontab's or a unit's variables are taken as written), and a ledger is at %s, the path as written, where an older once kept it with the slots it ran: to go on with them, write %s (docs/operations.md#upgrading-once: moving it to the path meant)",
				kept, keep)
		}
		return bad("'$' is not expanded: a crontab's or a unit's variables are taken as written; write the path out, e.g. sqlite:///home/me/once.db (a '$' in a file name: %%24)")
	}
	if strings.HasPrefix(raw, "//") {
		host, p, ok := strings.Cut(raw[2:], "/")
		if host != "" && !strings.EqualFold(host, "localhost") {
			return bad("a host is not supported: SQLite stores are local files; use sqlite:///absolute/path.db")
		}
		if !ok {
			return bad("no file path; use sqlite:///absolute/path.db or sqlite:./relative.db")
		}
		raw = "/" + p
	}
	p, uerr := url.PathUnescape(raw)
	if uerr != nil {
		return bad("bad percent-encoding in path: %v", uerr)
	}
	if p == "" || strings.ContainsRune(p, 0) {
		return bad("no file path; use sqlite:///absolute/path.db or sqlite:./relative.db")
	}
	if strings.HasSuffix(p, "/") {
		return bad("path names a directory; name the database file, e.g. %sonce.db", p)
	}
	if strings.HasPrefix(p, "~") {
		return bad("'~' is not expanded (it would be a directory named ~ here); give an absolute path, e.g. sqlite:///home/me/once.db")
	}
	q, err := store.ParseQuery(spec, query)
	if err != nil {
		return "", Options{}, err
	}
	opts.Prefix = q["prefix"]
	opts.Group = q["group"]
	if v, ok := q["busy_timeout"]; ok {
		d, derr := time.ParseDuration(v)
		if derr != nil || d < time.Millisecond {
			return "", Options{}, fmt.Errorf("%w: sqlite parameter \"busy_timeout\" is %q: give a duration between 1ms and 1h, e.g. 5s", store.ErrBadDSN, v)
		}
		opts.BusyTimeout = d
	}
	if err := opts.validate(); err != nil {
		return "", Options{}, err
	}
	return filepath.Clean(p), opts, nil
}

// FileDSN is the DSN of the SQLite file at the absolute path, percent-encoded where a DSN needs it
// ('%', '?', '#', spaces, and '$', which ParseDSN refuses raw as a variable nobody expanded), so that
// any file name gives the file it names.
func FileDSN(path string) string {
	return "sqlite://" + strings.ReplaceAll((&url.URL{Path: path}).EscapedPath(), "$", "%24")
}

// AbsoluteDSN is dsn with a relative path made absolute against the working directory, for a
// command that once runs and that may change directory before its nested once reaches the same
// ledger (ONCE_STORE). A DSN already absolute, or not a SQLite one it can read, is returned as it
// is.
func AbsoluteDSN(dsn string) string {
	p, _, err := ParseDSN(dsn)
	if err != nil || filepath.IsAbs(p) {
		return dsn
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return dsn
	}
	_, query, hasQuery := strings.Cut(dsn, "?")
	out := FileDSN(abs)
	if hasQuery {
		out += "?" + query
	}
	return out
}

// unexpandedLedger is the absolute path of the ledger an older once used for a DSN path raw with an
// unexpanded '$' (it took the '$' as written: sqlite:$HOME/once.db is ./$HOME/once.db, under cron
// the home's $HOME/once.db), when that file exists; else "".
func unexpandedLedger(raw string) string {
	if strings.HasPrefix(raw, "//") {
		host, p, ok := strings.Cut(raw[2:], "/")
		if !ok || (host != "" && !strings.EqualFold(host, "localhost")) {
			return "" // an older once refused it too
		}
		raw = "/" + p
	}
	p, err := url.PathUnescape(raw)
	if err != nil || p == "" || strings.HasPrefix(p, "~") {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	if !OwnLedger(abs) {
		return ""
	}
	return abs
}

// OwnLedger reports whether path is a SQLite file owned by this user: one an older once of this
// user's may have kept there. A file another user put at a path with a '$' in it (under /tmp, or a
// directory they own) is not named as this user's ledger, nor is a file that is no SQLite database.
func OwnLedger(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int64(st.Uid) != int64(os.Geteuid()) {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 16)
	_, err = io.ReadFull(f, head)
	return err == nil && string(head) == "SQLite format 3\x00"
}
