package sqlite

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/once-run/once/store"
)

// DefaultBusyTimeout is how long a write waits for another process's transaction before the
// store reports ErrUnavailable.
const DefaultBusyTimeout = 10 * time.Second

// Options tune a SQLite store. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every table name so several deployments can share one file.
	// It matches [a-z0-9_]{0,32}; "" means no prefix.
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
	if len(o.Prefix) > 32 {
		return fmt.Errorf("%w: sqlite prefix %q is longer than 32 characters", store.ErrBadDSN, o.Prefix)
	}
	for _, c := range o.Prefix {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("%w: sqlite prefix %q may only contain a-z, 0-9 and _", store.ErrBadDSN, o.Prefix)
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
// percent-decoded. Query parameters: prefix=NAME ([a-z0-9_]{1,32}) and busy_timeout=DURATION
// (a Go duration such as 5s, between 1ms and 1h) and group=NAME (a ledger shared by a group, see
// Options.Group). Anything else, a repeated parameter, a
// fragment, a host or an empty path is an error wrapping store.ErrBadDSN.
func ParseDSN(dsn string) (path string, opts Options, err error) {
	bad := func(format string, args ...any) (string, Options, error) {
		return "", Options{}, fmt.Errorf("%w: sqlite DSN %q: %s", store.ErrBadDSN, dsn, fmt.Sprintf(format, args...))
	}
	i := strings.IndexByte(dsn, ':')
	if i < 0 || !strings.EqualFold(dsn[:i], "sqlite") {
		return bad("scheme must be sqlite (e.g. sqlite:///var/lib/once/once.db)")
	}
	rest := dsn[i+1:]
	if strings.ContainsAny(rest, "#\x00") {
		return bad("'#' and NUL are not allowed; percent-encode them")
	}
	raw, query, _ := strings.Cut(rest, "?")
	if strings.HasPrefix(raw, "//") {
		host, p, ok := strings.Cut(raw[2:], "/")
		if host != "" && !strings.EqualFold(host, "localhost") {
			return bad("host %q is not supported: SQLite stores are local files; use sqlite:///absolute/path.db", host)
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
	if query != "" {
		q, qerr := url.ParseQuery(query)
		if qerr != nil {
			return bad("bad query: %v", qerr)
		}
		for k, vs := range q {
			if len(vs) != 1 {
				return bad("parameter %q given %d times", k, len(vs))
			}
			v := vs[0]
			switch k {
			case "prefix":
				if v == "" {
					return bad("prefix is empty")
				}
				opts.Prefix = v
			case "busy_timeout":
				d, derr := time.ParseDuration(v)
				if derr != nil || d < time.Millisecond {
					return bad("busy_timeout %q must be a duration such as 5s (at least 1ms)", v)
				}
				opts.BusyTimeout = d
			case "group":
				if v == "" {
					return bad("group is empty")
				}
				opts.Group = v
			default:
				return bad("unknown parameter %q (known: prefix, busy_timeout, group)", k)
			}
		}
	}
	if err := opts.validate(); err != nil {
		return "", Options{}, err
	}
	return filepath.Clean(p), opts, nil
}
