package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The limits of business keys on every store (store.Keys): the SQL stores' columns, so that MySQL's
// INSERT IGNORE can only ever skip duplicates, never truncate.
const (
	// MaxKeyLen is the longest key in bytes. It fits a MySQL InnoDB unique index on (scope, key) with
	// binary columns (3072-byte limit) and is far above what a flow id, an order id or a hash needs.
	MaxKeyLen = 1024
	// MaxFingerprintLen is the longest payload fingerprint (ClaimRequest.Fingerprints) in bytes.
	MaxFingerprintLen = 255
	// MaxRunIDLen and MaxClaimTaskLen bound a Claimant's RunID and Task.
	MaxRunIDLen     = 255
	MaxClaimTaskLen = 200
)

// ErrInvalidKey is wrapped by every error about a key's syntax (ValidateKey, ClaimRequest.Check, and
// package keys, whose ErrInvalidKey it is). Such errors also wrap ErrInvalid.
var ErrInvalidKey = errors.New("invalid key")

type invalidKey struct{ msg string }

func (e *invalidKey) Error() string   { return e.msg }
func (e *invalidKey) Unwrap() []error { return []error{ErrInvalidKey, ErrInvalid} }

// ValidateKey is the syntax of a key on every store: 1 to MaxKeyLen bytes of valid UTF-8 with no
// control characters (C0 including newline, tab and NUL; DEL; C1). Keys are compared byte for byte;
// spaces are allowed and kept. The error is one line and quotes a prefix of the key.
func ValidateKey(key string) error {
	if key == "" {
		return &invalidKey{ErrInvalidKey.Error() + ": empty key; give a non-empty identifier such as an order id"}
	}
	if len(key) > MaxKeyLen {
		return &invalidKey{fmt.Sprintf("%v: key %s is %d bytes, longer than the %d-byte limit; hash long keys (e.g. sha256 hex)",
			ErrInvalidKey, QuoteKey(key), len(key), MaxKeyLen)}
	}
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size <= 1 {
			return &invalidKey{fmt.Sprintf("%v: key %s is not valid UTF-8 at byte %d; encode binary ids as hex or base64",
				ErrInvalidKey, QuoteKey(key), i)}
		}
		if unicode.IsControl(r) {
			return &invalidKey{fmt.Sprintf("%v: key %s contains control character %U at byte %d; remove newlines, tabs and NULs",
				ErrInvalidKey, QuoteKey(key), r, i)}
		}
		i += size
	}
	return nil
}

// CheckKeyEdges refuses a key (or scope) that starts or ends with whitespace or an invisible
// formatting character (a space, a no-break space, U+3000, a byte order mark, a zero-width space):
// keys are compared byte for byte, so "order-1 " is another key than "order-1", and claiming it
// after "order-1" was claimed succeeds — an operation done twice, from a careless CSV
// ("order-1, order-2") or a file saved with a BOM. ValidateKey allows such keys (a ledger may hold
// them, and a CHAR(n) column pads its ids the same way every time); the CLI refuses them unless
// asked (once keys --allow-edge-space). The error wraps ErrInvalidKey and is one line.
func CheckKeyEdges(key string) error {
	first, _ := utf8.DecodeRuneInString(key)
	last, _ := utf8.DecodeLastRuneInString(key)
	var r rune
	var where string
	switch {
	case key == "":
		return nil
	case invisibleEdge(first):
		r, where = first, "starts"
	case invisibleEdge(last):
		r, where = last, "ends"
	default:
		return nil
	}
	what := fmt.Sprintf("%U", r)
	if r == ' ' {
		what = "a space"
	}
	trimmed := strings.TrimFunc(key, invisibleEdge)
	return &invalidKey{fmt.Sprintf("%v: key %s %s with %s: keys are compared byte for byte, so it is another key than %s; strip it",
		ErrInvalidKey, QuoteKey(key), where, what, QuoteKey(trimmed))}
}

// invisibleEdge reports whether r at a key's start or end would not be seen: whitespace or a
// formatting character (Unicode Cf: BOM, zero-width space and joiners, bidi marks, soft hyphen).
func invisibleEdge(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) }

// QuoteKey prints at most 40 bytes of key, Go-quoted so control bytes are visible.
func QuoteKey(key string) string {
	if len(key) > 40 {
		return fmt.Sprintf("%q…", key[:40])
	}
	return fmt.Sprintf("%q", key)
}

// Check is the one rule for a claim that every store.Keys applies before it touches the store: the
// scope (CheckScope), every key (ValidateKey, naming its item), one fingerprint per key when there
// are any, each at most MaxFingerprintLen bytes of UTF-8 without NUL, and a pending claim's
// Claimant (Claimant.Check). Errors wrap ErrInvalid; backends prefix them with their name.
func (r ClaimRequest) Check() error {
	if err := CheckScope(r.Scope); err != nil {
		return err
	}
	if r.Fingerprints != nil && len(r.Fingerprints) != len(r.Keys) {
		return &invalidValue{fmt.Sprintf("claim has %d fingerprints for %d keys", len(r.Fingerprints), len(r.Keys))}
	}
	for i, k := range r.Keys {
		if err := ValidateKey(k); err != nil {
			return &invalidKey{fmt.Sprintf("item %d: %v", i, err)}
		}
		if r.Fingerprints != nil {
			if fp := r.Fingerprints[i]; len(fp) > MaxFingerprintLen || !utf8.ValidString(fp) || strings.IndexByte(fp, 0) >= 0 {
				return &invalidValue{fmt.Sprintf("fingerprint of key %s: at most %d bytes of valid UTF-8 without NUL", QuoteKey(k), MaxFingerprintLen)}
			}
		}
	}
	if r.Pending {
		return r.Claimant.Check()
	}
	return nil
}

// Check is the one rule for the claimant of pending keys (a pending Claim, a Reclaim to a new
// claimant): a run id, a task exactly when there is a token, both valid UTF-8 within MaxRunIDLen and
// MaxClaimTaskLen bytes. Errors wrap ErrInvalid.
func (c Claimant) Check() error {
	switch {
	case c.RunID == "" || (c.Token > 0) != (c.Task != ""):
		return &invalidValue{"a pending claim needs a claimant with a run id, and a task exactly when it has a token"}
	case len(c.RunID) > MaxRunIDLen || len(c.Task) > MaxClaimTaskLen:
		return &invalidValue{fmt.Sprintf("claimant run id (%d bytes) or task (%d bytes) too long: at most %d and %d",
			len(c.RunID), len(c.Task), MaxRunIDLen, MaxClaimTaskLen)}
	case !utf8.ValidString(c.RunID) || !utf8.ValidString(c.Task):
		return &invalidValue{fmt.Sprintf("claimant run id %q and task %q must be valid UTF-8", c.RunID, c.Task)}
	}
	// Not held to a lease run id's printable rule: the daemon's pause records carry a person's
	// reason, lines and all. Whoever prints one escapes it (once keys status).
	return nil
}
