// Package keys records business idempotency keys in the user's own database (PostgreSQL through pgx
// or database/sql, MySQL/MariaDB, SQLite), inside the caller's transaction.
//
// A job that writes an order for flow F first claims the key "flow:F" in the same transaction as the
// INSERT of the order. If the transaction commits, both the order and the claim exist; if it rolls
// back or the process dies, neither does. A re-run, a concurrent run or a person re-running by hand
// claims the key again and learns it is not new, so it skips the write. This is the side dedup table
// of the incident in docs/background.md done right: the table the seed added was written in its own
// transaction after the orders, so a crash between the two left orders without claims.
//
// Claims are bulk: one statement per batch of keys, not one per key (see Keys.Claim). Keys live in
// scopes, may carry a parameter fingerprint (the same key with another payload is ErrFingerprint), and
// are never forgotten unless the caller calls Forget. Checkpoints (SaveCheckpoint, LoadCheckpoint)
// store a job's progress marker in the same transaction as its writes.
//
// Validate and Lines are the key syntax shared with the `once keys` command.
package keys

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key in bytes. It fits a MySQL InnoDB unique index on (scope, key) with
// binary columns (3072-byte limit) and is far above what a flow id, an order id or a hash needs.
const MaxKeyLen = 1024

// ErrInvalidKey is wrapped by every error about a key's syntax (Validate, Lines, Claim).
var ErrInvalidKey = errors.New("invalid key")

// Validate reports whether key is acceptable: 1 to MaxKeyLen bytes of valid UTF-8 with no control
// characters (C0 including newline, tab and NUL; DEL; C1). Keys are compared byte for byte; spaces
// are allowed and kept. The error is one line, wraps ErrInvalidKey and quotes a prefix of the key.
func Validate(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key; give a non-empty identifier such as an order id", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key %s is %d bytes, longer than the %d-byte limit; hash long keys (e.g. sha256 hex)",
			ErrInvalidKey, quote(key), len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("%w: key %s is not valid UTF-8 at byte %d; encode binary ids as hex or base64",
				ErrInvalidKey, quote(key), i)
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: key %s contains control character %U at byte %d; remove newlines, tabs and NULs",
				ErrInvalidKey, quote(key), r, i)
		}
		i += size
	}
	return nil
}

// quote prints at most 40 bytes of key, Go-quoted so control bytes are visible.
func quote(key string) string {
	if len(key) > 40 {
		return fmt.Sprintf("%q…", key[:40])
	}
	return fmt.Sprintf("%q", key)
}

// LineError is an error about one input line of Lines; Line counts from 1.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause (ErrInvalidKey, a read error or the callback's error).
func (e *LineError) Unwrap() error { return e.Err }

// Lines reads one key per line from r and calls fn for each, in order, with its 1-based line number.
// A line ends with "\n"; a "\r" before it is dropped (CRLF input); the last line may lack "\n".
// Empty lines are skipped. Memory is bounded: a line longer than MaxKeyLen is rejected as soon as that
// is known, without reading the rest of it. An invalid key (see Validate), a read error or an error
// from fn stops the reading and is returned as a *LineError naming the line.
func Lines(r io.Reader, fn func(lineNo int, key string) error) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxKeyLen+2 {
			return &LineError{n, fmt.Errorf("%w: line is longer than the %d-byte key limit (starts %s)",
				ErrInvalidKey, MaxKeyLen, quote(string(line)))}
		}
		if err != nil && err != io.EOF {
			return &LineError{n, fmt.Errorf("read keys: %w", err)}
		}
		key := line
		if len(key) > 0 && key[len(key)-1] == '\n' {
			key = key[:len(key)-1]
			if len(key) > 0 && key[len(key)-1] == '\r' {
				key = key[:len(key)-1]
			}
		}
		if len(key) > 0 {
			k := string(key)
			if verr := Validate(k); verr != nil {
				return &LineError{n, verr}
			}
			if ferr := fn(n, k); ferr != nil {
				return &LineError{n, ferr}
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}
