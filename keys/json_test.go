package keys

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// oddKeys are valid keys whose JSON needs care: quotes, backslashes, escape look-alikes, the line
// separators JavaScript minds (U+2028, U+2029), HTML characters encoding/json escapes, non-BMP
// characters, U+FFFD, JSON numbers and literals, and a key of MaxKeyLen bytes of quotes.
var oddKeys = []string{
	`"`, `\`, `\"`, `"\`, `\\`, `\u0041`, `\n`, `a"b\c`, "\u2028", "x\u2029y", `<a href="&amp;">`,
	"😀", "𝄞 clef", "\uFFFD", "007", "7", "1e3", "-0", "null", "true", "[]", "é", "e\u0301", " ", "a ", "A", "a", strings.Repeat(`"`, MaxKeyLen),
	strings.Repeat(`\`, MaxKeyLen-4) + "😀",
}

// TestJSONArrayRoundTrip: the hand-written JSON of valid keys (and pairs with fingerprints) decodes,
// by encoding/json, to exactly the strings written.
func TestJSONArrayRoundTrip(t *testing.T) {
	for _, k := range oddKeys {
		if err := Validate(k); err != nil {
			t.Fatalf("test key %q: %v", k, err)
		}
	}
	checkJSONArray(t, oddKeys)
}

func checkJSONArray(t *testing.T, ks []string) {
	t.Helper()
	var got []string
	b := jsonArray(nil, ks, nil)
	if err := json.Unmarshal(b, &got); err != nil || !slices.Equal(got, ks) {
		t.Fatalf("jsonArray(%q) = %s: decodes to %q, %v", ks, b, got, err)
	}
	fps := slices.Clone(ks)
	slices.Reverse(fps)
	var pairs [][2]string
	b = jsonArray(nil, ks, fps)
	if err := json.Unmarshal(b, &pairs); err != nil || len(pairs) != len(ks) {
		t.Fatalf("jsonArray pairs %s: %v, %v", b, pairs, err)
	}
	for i, p := range pairs {
		if p[0] != ks[i] || p[1] != fps[i] {
			t.Fatalf("pair %d = %q, want %q, %q", i, p, ks[i], fps[i])
		}
	}
}

func FuzzJSONArray(f *testing.F) {
	for _, k := range oddKeys {
		f.Add(k, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var ks []string
		for _, k := range []string{a, b} {
			if Validate(k) == nil {
				ks = append(ks, k)
			}
		}
		checkJSONArray(t, ks)
	})
}

// OddKeys is oddKeys for the external tests (claims of them on every backend).
func OddKeys() []string { return slices.Clone(oddKeys) }
