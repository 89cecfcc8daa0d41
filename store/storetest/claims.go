package storetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// testKeysRefused: every store refuses the same claims with the shared rule's words
// (store.ClaimRequest.Check, store.Claimant.Check), as store.ErrInvalid, and writes nothing for them.
func testKeysRefused(t *testing.T, h Harness) {
	k := keysClient(t, h.DSN(t))
	ctx := ctxT(t)
	for _, req := range []store.ClaimRequest{
		{Scope: "s", Keys: []string{"ok", ""}},
		{Scope: "s", Keys: []string{"ok", strings.Repeat("k", store.MaxKeyLen+1)}},
		{Scope: "s", Keys: []string{"ok", "a\x00b"}},
		{Scope: "s", Keys: []string{"ok", "a\nb"}},
		{Scope: "s", Keys: []string{"ok", "\xff"}},
		{Scope: "s", Keys: []string{"ok"}, Fingerprints: []string{"a", "b"}},
		{Scope: "s", Keys: []string{"ok"}, Fingerprints: []string{strings.Repeat("f", store.MaxFingerprintLen+1)}},
		{Scope: "s", Keys: []string{"ok"}, Pending: true},
		{Scope: "", Keys: []string{"ok"}},
		{Scope: strings.Repeat("s", store.MaxScopeLen+1), Keys: []string{"ok"}},
	} {
		want := req.Check()
		if want == nil {
			t.Fatalf("the case %q %.40q is not refused by store.ClaimRequest.Check", req.Scope, req.Keys)
		}
		if _, err := k.Claim(ctx, req); err == nil || !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), want.Error()) {
			t.Errorf("Claim(%.20q, %.40q): %v; want an error wrapping store.ErrInvalid with the shared rule's words %q", req.Scope, req.Keys, err, want)
		}
	}
	if _, err := k.Reclaim(ctx, "s", []string{"ok"}, &store.Claimant{Token: 1}, false); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Reclaim to a claimant without a run id: %v, want store.ErrInvalid", err)
	}
	if got := lookup(t, k, "s", "ok"); len(got) != 0 {
		t.Errorf("a refused claim wrote %v", got)
	}
}
