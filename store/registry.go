package store

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Opener opens a store for a DSN whose scheme it was registered for. It returns errors wrapping
// ErrBadDSN for malformed DSNs and ErrUnavailable when the store cannot be reached.
type Opener func(ctx context.Context, dsn string) (Store, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a backend available for a DSN scheme ("sqlite", "postgres", …). It panics when the
// scheme is registered twice, like database/sql.Register.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if open == nil {
		panic("store: Register opener is nil")
	}
	if _, dup := openers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Scheme returns the scheme of a DSN ("sqlite" for "sqlite:./x.db"), lower-cased.
func Scheme(dsn string) (string, error) {
	i := strings.Index(dsn, ":")
	if i <= 0 {
		return "", fmt.Errorf("%w: %q has no scheme; use e.g. sqlite:///path/once.db or postgres://host/db", ErrBadDSN, Redact(dsn))
	}
	s := strings.ToLower(dsn[:i])
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return "", fmt.Errorf("%w: %q has no valid scheme", ErrBadDSN, Redact(dsn))
		}
	}
	return s, nil
}

// Open opens the store a DSN names, through the backend registered for its scheme.
func Open(ctx context.Context, dsn string) (Store, error) {
	scheme, err := Scheme(dsn)
	if err != nil {
		return nil, err
	}
	mu.RLock()
	open := openers[scheme]
	mu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q (known: %s)", ErrBadDSN, scheme, Redact(dsn), strings.Join(Schemes(), ", "))
	}
	return open(ctx, dsn)
}

// Redact returns dsn with any password replaced by "xxxxx", for logs, errors and status output.
// It handles URL user info and password-like query parameters; text it cannot parse is returned
// with everything between "://" and the last "@" hidden.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		if i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@"); i >= 0 && j > i {
			return dsn[:i+3] + "xxxxx" + dsn[j:]
		}
		return dsn
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			switch strings.ToLower(k) {
			case "password", "pass", "pwd", "token", "secret":
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return dsn
	}
	return u.String()
}
