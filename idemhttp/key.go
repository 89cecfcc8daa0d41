// Package idemhttp carries idempotency keys over HTTP (draft-ietf-httpapi-idempotency-key-header):
// a client side that sets the Idempotency-Key header (SetKey, Transport), and a net/http middleware
// for the receiving service that executes a keyed request once, on any store that implements
// store.Keys, and replays the stored response to retries.
//
// The middleware's answers: the first request with a key executes and its response (status, a
// subset of headers, body) is stored; a retry gets the stored response again; a duplicate while the
// first is still executing gets 409; the same key with another payload (SHA-256 of method, path,
// query and body) gets 422; a missing key where required, or a malformed one, gets 400. Errors are RFC 9457
// problem+json. See docs/idempotency-http.md.
package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// ErrBadKey is wrapped by errors about a malformed Idempotency-Key value.
var ErrBadKey = errors.New("idemhttp: bad Idempotency-Key")

// FormatKey returns key as an RFC 8941 sf-string ("…", with \ and " escaped), the form the draft
// specifies. Keys must be printable ASCII (0x20–0x7E), at most 255 bytes, and not empty.
func FormatKey(key string) (string, error) {
	if key == "" || len(key) > 255 {
		return "", fmt.Errorf("%w: key must be 1 to 255 bytes, got %d", ErrBadKey, len(key))
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: byte %#x at %d is not printable ASCII; hash or hex-encode the key", ErrBadKey, c, i)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// ParseKey parses a header value: an RFC 8941 sf-string ("…" with \" and \\ escapes), or,
// leniently, a bare value (as many clients send) taken as is after trimming spaces. The key must
// be 1 to 255 bytes of printable ASCII.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: empty value", ErrBadKey)
	}
	var key string
	if v[0] != '"' {
		key = v
	} else {
		var b strings.Builder
		i := 1
		for ; ; i++ {
			if i >= len(v) {
				return "", fmt.Errorf("%w: unterminated string; send a quoted sf-string such as \"a1b2\"", ErrBadKey)
			}
			c := v[i]
			if c == '"' {
				break
			}
			if c == '\\' {
				i++
				if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", fmt.Errorf("%w: bad escape at byte %d (only \\\" and \\\\ are allowed)", ErrBadKey, i)
				}
				c = v[i]
			}
			b.WriteByte(c)
		}
		if i != len(v)-1 {
			return "", fmt.Errorf("%w: text after the closing quote (parameters are not supported)", ErrBadKey)
		}
		key = b.String()
	}
	if key == "" || len(key) > 255 {
		return "", fmt.Errorf("%w: key must be 1 to 255 bytes, got %d", ErrBadKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", fmt.Errorf("%w: byte %#x at %d is not printable ASCII", ErrBadKey, key[i], i)
		}
	}
	return key, nil
}

// SetKey sets req's Idempotency-Key header to key, as an sf-string.
func SetKey(req *http.Request, key string) error {
	v, err := FormatKey(key)
	if err != nil {
		return err
	}
	req.Header.Set(Header, v)
	return nil
}

// KeyFromEnv returns the key once hands a command: ONCE_EFFECT_KEY (inside once effect), else
// ONCE_IDEMPOTENCY_KEY (inside once run: TASK/SLOT), else "".
func KeyFromEnv() string {
	if k := os.Getenv("ONCE_EFFECT_KEY"); k != "" {
		return k
	}
	return os.Getenv("ONCE_IDEMPOTENCY_KEY")
}

// Transport is an http.RoundTripper that sets Idempotency-Key on POST and PATCH requests that do
// not carry one. Every such request through it gets the same key per Key's answer, so use one key
// per downstream operation (once effect gives each its own ONCE_EFFECT_KEY).
type Transport struct {
	Base http.RoundTripper          // nil: http.DefaultTransport
	Key  func(*http.Request) string // nil: KeyFromEnv; "" leaves the request without a key
}

// RoundTrip sets the header on a clone of req (the original is not modified) and sends it. A key
// that cannot be sent as an sf-string is an error; nothing is sent.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if (req.Method != http.MethodPost && req.Method != http.MethodPatch) || req.Header.Get(Header) != "" {
		return base.RoundTrip(req)
	}
	key := KeyFromEnv()
	if t.Key != nil {
		key = t.Key(req)
	}
	if key == "" {
		return base.RoundTrip(req)
	}
	r2 := req.Clone(req.Context())
	if err := SetKey(r2, key); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return base.RoundTrip(r2)
}
