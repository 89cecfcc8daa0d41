package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Opener opens a store for a DSN whose scheme it was registered for. It returns errors wrapping
// ErrBadDSN for malformed DSNs and ErrUnavailable when the store cannot be reached.
type Opener func(ctx context.Context, dsn string) (Store, error)

// RegisterOption describes a scheme to Register.
type RegisterOption int

// TakesPassword: the scheme's DSNs carry a password in their user info (scheme://user:password@host),
// so WithPassword may put one there. Without it, WithPassword refuses the scheme.
const TakesPassword RegisterOption = 1

var (
	mu        sync.RWMutex
	openers   = map[string]Opener{}
	readers   = map[string]Opener{}
	passwords = map[string]bool{}
)

// Register makes a backend available for a DSN scheme ("sqlite", "postgres", …). It panics when the
// scheme is registered twice, like database/sql.Register.
func Register(scheme string, open Opener, opts ...RegisterOption) {
	mu.Lock()
	defer mu.Unlock()
	if open == nil {
		panic("store: Register opener is nil")
	}
	if _, dup := openers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
	for _, o := range opts {
		if o == TakesPassword {
			passwords[scheme] = true
		}
	}
}

// RegisterReader registers how a backend opens a store for OpenReader: one that it may be unable
// to write (the embedded SQLite file on a read-only file system, or another user's), whose writes
// then fail with ErrUnavailable. A scheme without one is opened by OpenReader as by Open. It panics
// when the scheme is registered twice.
func RegisterReader(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if open == nil {
		panic("store: RegisterReader opener is nil")
	}
	if _, dup := readers[scheme]; dup {
		panic("store: RegisterReader called twice for scheme " + scheme)
	}
	readers[scheme] = open
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
//
// A DSN that starts or ends with whitespace or an invisible character (a BOM, a zero-width space),
// or has one just before its '?', is refused: the space
// would be part of the last value (a SQLite file "once.db " is another ledger, where every slot
// already done runs again; "postgres://h/db " another database). It comes from a crontab line or
// a unit's Environment= with a trailing space, or a template, and is never meant.
func Scheme(dsn string) (string, error) {
	if err := edgeSpace(dsn); err != nil {
		return "", err
	}
	if !strings.Contains(dsn, "://") && looksLikeConninfo(dsn) {
		return "", fmt.Errorf("%w: %q is a key=value connection string; give a URL instead, e.g. postgres://USER@HOST:5432/DB", ErrBadDSN, Redact(dsn))
	}
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

// Open opens the store a DSN names, through the backend registered for its scheme. On an error
// the store is nil (never a backend's nil pointer in the interface, which is not == nil).
func Open(ctx context.Context, dsn string) (Store, error) {
	return openWith(ctx, dsn, false)
}

// OpenReader opens the store a DSN names for a command that only reads it (status, history,
// doctor): a backend that can read a store this process cannot write (RegisterReader) opens it
// so; the others as Open does. Writes through what it returns may fail with ErrUnavailable.
func OpenReader(ctx context.Context, dsn string) (Store, error) {
	return openWith(ctx, dsn, true)
}

func openWith(ctx context.Context, dsn string, reader bool) (Store, error) {
	scheme, err := Scheme(dsn)
	if err != nil {
		return nil, err
	}
	mu.RLock()
	open := openers[scheme]
	if r := readers[scheme]; reader && r != nil {
		open = r
	}
	mu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w: unknown scheme %q in %q (known: %s)", ErrBadDSN, scheme, Redact(dsn), strings.Join(Schemes(), ", "))
	}
	s, err := open(ctx, dsn)
	if err != nil {
		// A backend's opener returns its Open's *Store: on an error a nil pointer, which in the
		// interface is not nil (a caller's `if s != nil { s.Close() }` called Close on it).
		return nil, err
	}
	return s, nil
}

// edgeSpace refuses whitespace or an invisible character (a BOM, a zero-width space: Unicode Cf,
// invisibleEdge) at either end of dsn or just before its query (Scheme).
func edgeSpace(dsn string) error {
	base, _, hasQuery := strings.Cut(dsn, "?")
	switch {
	case strings.TrimLeftFunc(dsn, invisibleEdge) != dsn:
		return fmt.Errorf("%w: %q starts with whitespace or an invisible character: remove it (a stray space in the crontab line or unit, a byte-order mark from an editor?)", ErrBadDSN, Redact(dsn))
	case strings.TrimRightFunc(dsn, invisibleEdge) != dsn:
		return fmt.Errorf("%w: %q ends with whitespace or an invisible character, which would be part of it (a SQLite file \"once.db \" is another ledger): remove it (a stray space in the crontab line or unit?; if a ledger was kept under the name with the space, rename it first; a space that belongs to a value is written %%20)", ErrBadDSN, Redact(dsn))
	case hasQuery && strings.TrimRightFunc(base, invisibleEdge) != base:
		return fmt.Errorf("%w: %q has whitespace or an invisible character before '?', which would be part of the path or database name: remove it", ErrBadDSN, Redact(dsn))
	}
	return nil
}
