package store

import (
	"errors"
	"strings"
	"testing"
)

// One rule for a claim on every store: what ClaimRequest.Check refuses, and that it says so in one
// line wrapping ErrInvalid (and ErrInvalidKey for a key).
func TestClaimRequestCheck(t *testing.T) {
	pending := Claimant{RunID: "r1"}
	for _, c := range []struct {
		name string
		req  ClaimRequest
		key  bool   // the error is about a key
		want string // "" when valid
	}{
		{"ok", ClaimRequest{Scope: "s", Keys: []string{"a", "b c", "订单"}}, false, ""},
		{"ok pending", ClaimRequest{Scope: "s", Keys: []string{"a"}, Pending: true, Claimant: pending}, false, ""},
		{"ok fingerprints", ClaimRequest{Scope: "s", Keys: []string{"a"}, Fingerprints: []string{"fp"}}, false, ""},
		{"empty scope", ClaimRequest{Scope: "", Keys: []string{"a"}}, false, "key scope"},
		{"long scope", ClaimRequest{Scope: strings.Repeat("s", MaxScopeLen+1), Keys: []string{"a"}}, false, "key scope"},
		{"empty key", ClaimRequest{Scope: "s", Keys: []string{"a", ""}}, true, "item 1: invalid key: empty key"},
		{"long key", ClaimRequest{Scope: "s", Keys: []string{strings.Repeat("k", MaxKeyLen+1)}}, true, "1025 bytes"},
		{"NUL", ClaimRequest{Scope: "s", Keys: []string{"a\x00b"}}, true, "control character"},
		{"newline", ClaimRequest{Scope: "s", Keys: []string{"a\nb"}}, true, "control character"},
		{"not UTF-8", ClaimRequest{Scope: "s", Keys: []string{"\xff"}}, true, "not valid UTF-8"},
		{"fingerprints count", ClaimRequest{Scope: "s", Keys: []string{"a", "b"}, Fingerprints: []string{"x"}}, false, "1 fingerprints for 2 keys"},
		{"long fingerprint", ClaimRequest{Scope: "s", Keys: []string{"a"}, Fingerprints: []string{strings.Repeat("f", MaxFingerprintLen+1)}}, false, "fingerprint"},
		{"NUL fingerprint", ClaimRequest{Scope: "s", Keys: []string{"a"}, Fingerprints: []string{"f\x00"}}, false, "fingerprint"},
		{"pending without run id", ClaimRequest{Scope: "s", Keys: []string{"a"}, Pending: true}, false, "needs a claimant"},
		{"token without task", ClaimRequest{Scope: "s", Keys: []string{"a"}, Pending: true, Claimant: Claimant{RunID: "r", Token: 3}}, false, "needs a claimant"},
		{"long run id", ClaimRequest{Scope: "s", Keys: []string{"a"}, Pending: true, Claimant: Claimant{RunID: strings.Repeat("r", MaxRunIDLen+1)}}, false, "too long"},
		{"done ignores claimant", ClaimRequest{Scope: "s", Keys: []string{"a"}, Claimant: Claimant{Token: 3}}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.req.Check()
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("got %v, want one line containing %q", err, c.want)
			}
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrInvalidKey) != c.key {
				t.Errorf("%v: wraps ErrInvalid %v, ErrInvalidKey %v (want %v)", err, errors.Is(err, ErrInvalid), errors.Is(err, ErrInvalidKey), c.key)
			}
		})
	}
}
