package store

import (
	"net/url"
	"strings"
)

// Mask is what Redact writes in place of a password.
const Mask = "xxxxx"

// IsSecretParam reports whether a DSN parameter holds a secret (password, sslpassword, any name
// with "password", "passwd", "secret" or "token" in it, pass, pwd). Case-insensitive.
func IsSecretParam(key string) bool {
	k := strings.ToLower(key)
	switch k {
	case "pass", "pwd":
		return true
	}
	for _, s := range []string{"password", "passwd", "secret", "token"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// Redact returns dsn with every password replaced by Mask, for logs, errors and status output.
// Messages are built from the redacted DSN; free text is never searched for a password.
//
// It works on the text, not on what a URL parser makes of it, so that a malformed DSN (an
// unescaped '/', '?', '#' or '@' in the password) is redacted too; when unsure it hides more:
//
//   - user info: everything from the first ':' after "scheme://" (or after the start, for a
//     DSN without one, like user:password@host/db) to the last '@' is masked;
//   - query: the values of secret parameters (IsSecretParam), separated by '&' or ';';
//   - a key=value connection string (host=db user=once password='…'): the values of secret
//     keys; one that cannot be tokenized is masked whole after its first key.
func Redact(dsn string) string {
	if !strings.Contains(dsn, "://") && looksLikeConninfo(dsn) {
		return redactConninfo(dsn)
	}
	out := dsn
	start := 0
	if i := strings.Index(out, "://"); i > 0 && validScheme(out[:i]) {
		start = i + 3
	}
	if at := strings.LastIndex(out, "@"); at >= start {
		if c := strings.IndexByte(out[start:at], ':'); c >= 0 {
			out = out[:start+c+1] + Mask + out[at:]
		}
	}
	q := strings.IndexByte(out, '?')
	if q < 0 {
		return out
	}
	var b strings.Builder
	b.WriteString(out[:q+1])
	rest := out[q+1:]
	for rest != "" {
		i := strings.IndexAny(rest, "&;")
		pair, sep := rest, ""
		if i >= 0 {
			pair, sep, rest = rest[:i], rest[i:i+1], rest[i+1:]
		} else {
			rest = ""
		}
		rawKey, _, hasEq := strings.Cut(pair, "=")
		key, err := url.PathUnescape(rawKey)
		if err != nil {
			key = rawKey
		}
		if hasEq && IsSecretParam(key) {
			pair = rawKey + "=" + Mask
		}
		b.WriteString(pair + sep)
	}
	return b.String()
}

func validScheme(s string) bool {
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// looksLikeConninfo: the text starts with "keyword =", as libpq's key=value connection strings do.
func looksLikeConninfo(s string) bool {
	s = strings.TrimLeft(s, " \t\n\r\f\v")
	i := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	})
	if i <= 0 {
		return false
	}
	return strings.HasPrefix(strings.TrimLeft(s[i:], " \t\n\r\f\v"), "=")
}

// redactConninfo masks the values of secret keys in a libpq key=value string (values bare or
// 'single-quoted', with backslash escapes).
func redactConninfo(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	var b strings.Builder
	i, first := 0, -1
	for {
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		if i == len(s) {
			return b.String()
		}
		k := i
		for i < len(s) && !isSpace(s[i]) && s[i] != '=' {
			i++
		}
		key := s[k:i]
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if key == "" || j == len(s) || s[j] != '=' {
			break
		}
		if first < 0 {
			first = i
		}
		j++
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		v := j
		if j < len(s) && s[j] == '\'' {
			j++
			for j < len(s) && s[j] != '\'' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				break // unterminated quote
			}
			j++
		} else {
			for j < len(s) && !isSpace(s[j]) {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j, len(s))
		}
		b.WriteString(s[k:v])
		// "host= password=x" gives host the value "password=x" (libpq skips the blanks after '='):
		// not a password to libpq, but plainly one to whoever wrote it.
		inner, _, nested := strings.Cut(s[v:j], "=")
		if IsSecretParam(key) || nested && IsSecretParam(inner) {
			b.WriteString(Mask)
		} else {
			b.WriteString(s[v:j])
		}
		i = j
	}
	// Not a well-formed key=value string: keep only the first key.
	if first < 0 {
		return Mask
	}
	return strings.TrimLeft(s[:first], " \t\n\r\f\v") + "=" + Mask
}
