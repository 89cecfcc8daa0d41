package store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The rules every backend's DSN shares, written once: the strict query parser (ParseQuery), the
// prefix rule (CheckPrefix) and the URL frame (ParseURL). A DSN that does not follow them is
// refused with ErrBadDSN, never repaired or read around: a silently dropped ?prefix= makes two
// deployments share one ledger, so one of them skips work it never did.

// QuerySpec is what one backend accepts in the query of its DSN.
type QuerySpec struct {
	Store string   // the backend's name in messages: "postgres", "redis", …
	Doc   string   // where the parameters are documented, e.g. "docs/stores/postgres.md"
	Known []string // the accepted parameter names (case-sensitive); "prefix", when listed, is checked by CheckPrefix
	// Refused says why some names a user may expect to work are refused (e.g. a setting the store
	// makes itself); other unknown names get a generic message.
	Refused map[string]string
}

// Params is a query parsed by ParseQuery: each accepted parameter once, percent-decoded.
type Params map[string]string

// MaxPrefix is the longest prefix CheckPrefix accepts.
const MaxPrefix = 32

// CheckPrefix is the one rule for ?prefix= on every store: 1–32 characters of a–z, 0–9 and _,
// starting with a letter. It is a valid unquoted identifier in every SQL store and a plain path
// or key component in every KV store, and lower case only, so two prefixes never name the same
// tables through case folding. Errors wrap ErrBadDSN and name the parameter.
func CheckPrefix(p string) error {
	if why := prefixProblem(p); why != "" {
		return fmt.Errorf("%w: parameter \"prefix\" is %q: %s", ErrBadDSN, p, why)
	}
	return nil
}

func prefixProblem(p string) string {
	ok := p != "" && len(p) <= MaxPrefix
	for i := 0; ok && i < len(p); i++ {
		c := p[i]
		ok = c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')
	}
	if !ok {
		return fmt.Sprintf("use 1-%d characters of a-z, 0-9 and _, starting with a letter", MaxPrefix)
	}
	return ""
}

// ParseQuery parses the query of a DSN (the text after '?', without it) strictly. Parameters are
// separated by '&' and written key=value with both halves percent-encoded. Refused, with an error
// wrapping ErrBadDSN that names the parameter and says how to fix it:
//
//   - ';' (not a separator here; Go's net/url drops such a parameter without a word), '+'
//     (a space to some client libraries and a plus sign to others) and a second raw '=';
//   - a bad percent-escape, a control character (NUL included) after decoding;
//   - an empty pair (a stray '&'), a key without '=', an empty value;
//   - a parameter given twice, a parameter not in spec.Known;
//   - a prefix that breaks CheckPrefix.
//
// Values of secret parameters (see IsSecretParam) never appear in an error.
func ParseQuery(spec QuerySpec, raw string) (Params, error) {
	p := Params{}
	if raw == "" {
		return p, nil
	}
	for _, pair := range strings.Split(raw, "&") {
		rawKey, rawVal, hasEq := strings.Cut(pair, "=")
		key, kerr := url.PathUnescape(rawKey)
		name := key
		if kerr != nil || badText(key) {
			name = rawKey
		}
		bad := func(format string, a ...any) (Params, error) {
			return nil, fmt.Errorf("%w: %s parameter %q %s", ErrBadDSN, spec.Store, name, fmt.Sprintf(format, a...))
		}
		// what: "contains …" about the value, shown as written unless it is a secret.
		badValue := func(what string) (Params, error) {
			if IsSecretParam(name) {
				return bad("%s", what)
			}
			return bad("is %q, which %s", rawVal, what)
		}
		switch {
		case pair == "":
			return nil, fmt.Errorf("%w: %s DSN has an empty parameter (a stray '&'): remove it", ErrBadDSN, spec.Store)
		case strings.Contains(rawKey, ";"):
			return bad("contains ';', not a parameter separator: use '&' between parameters (a literal ';' is %%3B)")
		case kerr != nil || badText(key) || key == "":
			return bad("is not a parameter name: write key=value, percent-encoded")
		case !hasEq:
			return bad("has no value: write %s=VALUE, or remove it", key)
		case strings.Contains(rawVal, ";"):
			return badValue("contains ';', not a parameter separator: use '&' between parameters (a literal ';' is %3B)")
		case strings.Contains(rawVal, "+"):
			return badValue("contains '+' (a space to some client libraries, a plus sign to others): write %2B for a plus sign, %20 for a space")
		case strings.Contains(rawVal, "="):
			return badValue("contains a second '=': write a literal '=' as %3D")
		}
		val, verr := url.PathUnescape(rawVal)
		switch {
		case verr != nil:
			return badValue("has a bad percent-escape: write '%' as %25, and every escape as % and two hex digits")
		case val == "":
			return bad("is empty: give a value, or remove the parameter")
		case badText(val):
			return badValue("contains a control character")
		case !slices.Contains(spec.Known, key):
			return bad("%s", unknown(spec, key))
		}
		if _, dup := p[key]; dup {
			return bad("is given twice: keep one")
		}
		if key == "prefix" {
			if why := prefixProblem(val); why != "" {
				return bad("is %q: %s", val, why)
			}
		}
		p[key] = val
	}
	return p, nil
}

// unknown says what to do about a parameter the backend does not take.
func unknown(spec QuerySpec, key string) string {
	if why, ok := spec.Refused[key]; ok {
		return "is not accepted: " + why
	}
	msg := "is not a parameter of " + spec.Store + " DSNs"
	if s := closest(key, spec.Known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(spec.Known) <= 6 {
		known := slices.Clone(spec.Known)
		sort.Strings(known)
		return msg + "; known: " + strings.Join(known, ", ")
	}
	return msg + "; the accepted ones are listed in " + spec.Doc
}

// closest is the known name nearest to key (case-insensitive edit distance ≤ 2), or "".
func closest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := EditDistance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b, for "did you mean" hints (a DSN
// parameter here, a jobs file's key in package jobfile); 64 when either is longer than 64 bytes,
// so that a hostile value costs no more than a short one.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// badText reports a control character (NUL, newline, DEL, …).
func badText(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// Take returns the value of key and removes it, for parameters the backend handles itself.
func (p Params) Take(key string) (string, bool) {
	v, ok := p[key]
	delete(p, key)
	return v, ok
}

// Encode writes the parameters back, sorted by key, every byte but A–Z a–z 0–9 - . _ ~
// percent-encoded: the one spelling every client library decodes the same way (a space is %20,
// never '+').
func (p Params) Encode() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(Escape(k))
		b.WriteByte('=')
		b.WriteString(Escape(p[k]))
	}
	return b.String()
}

// Escape percent-encodes every byte of s but the unreserved ones (A–Z a–z 0–9 - . _ ~), for any part
// of a URL: user info, path segment or query.
func Escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// SplitDSN does the checks every scheme://… DSN shares: the scheme is one of schemes (any case), no
// control character, no '#' (a DSN has no fragment; '#' in a password is written %23), no '@' after
// a '/' (see below), and the query goes through ParseQuery. It returns the text between "scheme://"
// and '?' (user info, hosts, path) for the backend to read, and the parameters. Errors wrap
// ErrBadDSN and contain the DSN only redacted.
//
// The user info ends at the last '@' and the hosts at the first '/' after it. An '@' after a '/' is
// either a raw '/' in the password or a raw '@' in the path (a ZooKeeper chroot, a database name):
// zk://h:2181/a@b is server b, user "h", password "2181/a" one way and server h, chroot /a@b the
// other. Such a DSN is refused, not guessed: '@' in a path is written %40, '/' in a user or
// password %2F. Every scheme:// backend takes the same rule through here.
func SplitDSN(spec QuerySpec, dsn string, schemes ...string) (string, Params, error) {
	if badText(dsn) {
		return "", nil, fmt.Errorf("%w: %s DSN contains a control character (a newline?): give it on one line", ErrBadDSN, spec.Store)
	}
	i := strings.Index(dsn, "://")
	if i < 0 || !slices.Contains(schemes, strings.ToLower(dsn[:i])) {
		return "", nil, fmt.Errorf("%w: %q is not a %s://… URL", ErrBadDSN, Redact(dsn), strings.Join(schemes, "://… or "))
	}
	if strings.Contains(dsn, "#") {
		return "", nil, fmt.Errorf("%w: %s DSN contains '#': a DSN has no fragment; write '#' in a password or parameter as %%23", ErrBadDSN, spec.Store)
	}
	rest, query, _ := strings.Cut(dsn[i+3:], "?")
	if slash := strings.IndexByte(rest, '/'); slash >= 0 && strings.Contains(rest[slash:], "@") {
		return "", nil, fmt.Errorf("%w: %s DSN has an '@' after a '/', which reads as a different server or user one way or the other: write '@' in a path as %%40, '/' in a user or password as %%2F", ErrBadDSN, spec.Store)
	}
	params, err := ParseQuery(spec, query)
	if err != nil {
		return "", nil, err
	}
	return rest, params, nil
}

// ParseURL parses a DSN of the form scheme://[user[:password]@]host[:port][/path][?query] strictly:
// SplitDSN, then the user info, host and path through net/url, correctly percent-encoded. The
// returned URL has an empty RawQuery and a lower-case scheme; the parameters are returned apart.
// Errors wrap ErrBadDSN and contain the DSN only redacted.
func ParseURL(spec QuerySpec, dsn string, schemes ...string) (*url.URL, Params, error) {
	rest, params, err := SplitDSN(spec, dsn, schemes...)
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(strings.ToLower(dsn[:strings.Index(dsn, "://")]) + "://" + rest)
	if err != nil {
		// url.Parse quotes its input, password included: say what is wrong without it.
		why := "it is not a valid URL"
		if ue, ok := err.(*url.Error); ok {
			switch esc, isEsc := ue.Err.(url.EscapeError); {
			case isEsc && strings.Contains(rest[:max(strings.LastIndex(rest, "@"), 0)], string(esc)):
				why = "bad percent-escape in the user or password (write '%' as %25)"
			case isEsc:
				why = fmt.Sprintf("bad percent-escape %q (write '%%' as %%25)", string(esc))
			case strings.Contains(ue.Err.Error(), "userinfo"):
				why = "the user or password contains a character that must be percent-encoded"
			case strings.Contains(ue.Err.Error(), "port"):
				why = "bad port, or an unescaped ':', '/' or '@' in the password (write them %3A, %2F, %40)"
			}
		}
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrBadDSN, Redact(dsn), why)
	}
	if p := u.Port(); p != "" {
		if !IsPort(p) {
			return nil, nil, fmt.Errorf("%w: %s: port %s is not a port: give 1-65535", ErrBadDSN, Redact(dsn), p)
		}
	}
	return u, params, nil
}

// HostPort checks one host[:port] of a multi-host DSN (etcd, ZooKeeper) and gives it port when it
// names none: a port of 1-65535, an IPv6 address in brackets.
func HostPort(h, port string) (string, error) {
	if h == "" {
		return "", errors.New("empty host (a stray ',')")
	}
	if strings.ContainsAny(h, " \t\n%?#@/\\") {
		return "", errors.New("not a host name or address")
	}
	host, p, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") {
			return "", errors.New("write an IPv6 address in brackets: [::1]:" + port)
		}
		if strings.Contains(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), "]") || strings.Count(h, ":") == 1 {
			return "", errors.New("not host:port")
		}
		host, p = strings.Trim(h, "[]"), port
	}
	if !IsPort(p) {
		return "", fmt.Errorf("port %q is not a port: give 1-65535", p)
	}
	if host == "" {
		return "", errors.New("empty host name")
	}
	if strings.ContainsAny(host, "[]") {
		// "0[0" once became "0[0:2181", which HostPort then refused: a bracket belongs around an IPv6 address only.
		return "", errors.New("not a host name or address")
	}
	return net.JoinHostPort(host, p), nil
}

// IsPort reports whether p (a URL's port, decimal) is a TCP port that can be dialled, 1-65535:
// url.Parse takes :99999 and :0, which every connection then fails to dial. DSNs, the jobs file's
// and once run's --notify and --ping URLs are held to it.
func IsPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
