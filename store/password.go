package store

import (
	"fmt"
	"strings"
)

// AcceptsPassword reports whether DSNs of scheme carry a password (registered with TakesPassword).
func AcceptsPassword(scheme string) bool {
	mu.RLock()
	defer mu.RUnlock()
	return passwords[strings.ToLower(scheme)]
}

// HasPassword reports whether dsn already carries a password: user info with a ':' in it
// (scheme://user:password@host, an empty password included) or a password= parameter. Unlike
// Redact, which hides too much rather than too little, it reads the authority exactly.
func HasPassword(dsn string) bool {
	if i := strings.Index(dsn, "://"); i > 0 {
		auth := dsn[i+3:]
		if end := strings.IndexAny(auth, "/?#"); end >= 0 {
			auth = auth[:end]
		}
		if at := strings.LastIndex(auth, "@"); at >= 0 && strings.Contains(auth[:at], ":") {
			return true
		}
	}
	if _, q, ok := strings.Cut(dsn, "?"); ok {
		for _, pair := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
			if k, _, _ := strings.Cut(pair, "="); strings.EqualFold(k, "password") {
				return true
			}
		}
	}
	return false
}

// WithPassword returns dsn with password put into its user info (scheme://user:password@host,
// percent-encoded), for a password kept out of the DSN (once's --store-password-file). The result
// holds the secret: use it to open the store and nowhere else. Errors wrap ErrBadDSN: the scheme
// takes no password (see TakesPassword), the DSN already has one (which one would be meant?), or it
// is not a scheme://host URL.
func WithPassword(dsn, password string) (string, error) {
	scheme, err := Scheme(dsn)
	if err != nil {
		return "", err
	}
	mu.RLock()
	_, known := openers[scheme]
	mu.RUnlock()
	if !known {
		return "", fmt.Errorf("%w: unknown scheme %q in %q (known: %s)", ErrBadDSN, scheme, Redact(dsn), strings.Join(Schemes(), ", "))
	}
	if !AcceptsPassword(scheme) {
		return "", fmt.Errorf("%w: %s DSNs take no password", ErrBadDSN, scheme)
	}
	if HasPassword(dsn) {
		return "", fmt.Errorf("%w: %s already has a password", ErrBadDSN, Redact(dsn))
	}
	i := strings.Index(dsn, "://")
	if i < 0 {
		return "", fmt.Errorf("%w: %s is not a %s://host URL", ErrBadDSN, Redact(dsn), scheme)
	}
	rest := dsn[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	user, host := "", rest
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		user, host = rest[:at], rest[at+1:]
	}
	return dsn[:i+3] + user + ":" + Escape(password) + "@" + host, nil
}
