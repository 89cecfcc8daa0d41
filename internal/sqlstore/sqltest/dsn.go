package sqltest

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// Refusal is a DSN tail ParseDSN must refuse, and what the refusal must name.
type Refusal struct{ Tail, Want string }

// commonRefusals are refused by both SQL stores: the prefix rules, a fragment and call_timeout's range.
var commonRefusals = []Refusal{
	{"?prefix=teamA;x", `"prefix"`},
	{"?prefix=teamb;x", `"prefix"`},
	{"?prefix=a%zz", `"prefix"`},
	{"?prefx=teamb", `did you mean "prefix"`},
	{"?prefix=", `"prefix" is empty`},
	{"?prefix=a&prefix=b", `given twice`},
	{"#x", "'#'"},
	{"?call_timeout=30", `"call_timeout" is "30": give a duration`},
	{"?call_timeout=500ms", `"call_timeout"`},
	{"?call_timeout=-1s", `"call_timeout"`},
	{"?call_timeout=25h", `"call_timeout"`},
	{"?call_timeout=soon", `"call_timeout"`},
}

// ParseDSNStrict checks that parse refuses base (a DSN with the password "pw") followed by each
// of the common refusals and the dialect's own with store.ErrBadDSN, in one line that names the
// parameter and shows no password ("pw" or "s3cr3t").
func ParseDSNStrict(t *testing.T, base string, parse func(dsn string) error, own ...Refusal) {
	for _, c := range append(append([]Refusal(nil), commonRefusals...), own...) {
		err := parse(base + c.Tail)
		if !errors.Is(err, store.ErrBadDSN) || !strings.Contains(err.Error(), c.Want) || strings.Contains(err.Error(), "pw@") ||
			strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseDSN(…%s) = %v; want ErrBadDSN naming %s", c.Tail, err, c.Want)
		}
	}
}

// FuzzRefusal checks a refusal of ParseDSN found by the fuzzer: it wraps store.ErrBadDSN and does
// not carry the DSN's password.
func FuzzRefusal(t *testing.T, dsn string, err error) {
	if !errors.Is(err, store.ErrBadDSN) {
		t.Fatalf("ParseDSN(%q): %v does not wrap ErrBadDSN", dsn, err)
	}
	if u, perr := url.Parse(dsn); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Contains(err.Error(), pw) {
			t.Fatalf("error %q leaks the password", err)
		}
	}
}
