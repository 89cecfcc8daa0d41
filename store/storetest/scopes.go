package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The scope walk cases (store.ScopeLister): which scopes hold keys, the keys of one scope with
// their states, and the counts once serve shows. Run leaves them out when the store does not
// implement ScopeLister.

// scopeNames are scope names whose byte order differs from the order of their escaped forms on
// the KV stores ('/', '%', '{', '}', a space), one outside ASCII and one of the longest allowed.
var scopeNames = []string{
	"a", "A", "0", "z", "a-b", "a/b", "a%b", "a{b}", "a:b", "a b", "ab", "作业", strings.Repeat("s", store.MaxScopeLen),
}

// walkScopes lists every scope through pages of size, checking each page against the contract.
func walkScopes(t *testing.T, sl store.ScopeLister, size int) []string {
	t.Helper()
	var all []string
	for cursor, calls := "", 0; ; calls++ {
		if calls > 10000 {
			t.Fatalf("Scopes(size %d): no end after %d pages", size, calls)
		}
		page, next, err := sl.Scopes(ctxT(t), cursor, size)
		if err != nil {
			t.Fatalf("Scopes(%q, %d): %v", cursor, size, err)
		}
		if len(page) > size {
			t.Fatalf("Scopes(%q, %d) returned %d scopes", cursor, size, len(page))
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// walkKeys lists every key of scope through pages of size, each key once (the contract lets a
// walk repeat a key; the repeats must agree).
func walkKeys(t *testing.T, sl store.ScopeLister, scope string, size int) map[string]store.Key {
	t.Helper()
	all := map[string]store.Key{}
	for cursor, calls := "", 0; ; calls++ {
		if calls > 10000 {
			t.Fatalf("ScopeKeys(%q, size %d): no end after %d pages", scope, size, calls)
		}
		page, next, err := sl.ScopeKeys(ctxT(t), scope, cursor, size)
		if err != nil {
			t.Fatalf("ScopeKeys(%q, %q, %d): %v", scope, cursor, size, err)
		}
		for _, k := range page {
			if k.Scope != scope || k.Result != nil {
				t.Fatalf("ScopeKeys(%q) returned %+v: want its scope and no result", scope, k)
			}
			if old, dup := all[k.Key]; dup && old.State != k.State {
				t.Fatalf("ScopeKeys(%q): key %q returned twice, as %s and %s", scope, k.Key, old.State, k.State)
			}
			all[k.Key] = k
		}
		if next == "" {
			return all
		}
		cursor = next
	}
}

func testScopesWalk(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	k, sl := s.(store.Keys), s.(store.ScopeLister)
	if got := walkScopes(t, sl, 10); len(got) != 0 {
		t.Fatalf("Scopes of a store without keys: %q", got)
	}
	for i, sc := range scopeNames {
		keys := []string{"k"}
		if i%3 == 0 {
			keys = append(keys, "k2", "k/3")
		}
		claim(t, k, store.ClaimRequest{Scope: sc, Keys: keys})
	}
	want := slices.Clone(scopeNames)
	sort.Strings(want)
	var first []string
	for _, size := range []int{1, 2, 5, 1000} {
		got := walkScopes(t, sl, size)
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("Scopes in pages of %d: %q; in pages of 1: %q (a walk's order is the same in every walk)", size, got, first)
		}
		sorted := slices.Clone(got)
		sort.Strings(sorted)
		if !slices.Equal(sorted, want) {
			t.Fatalf("Scopes in pages of %d: %q, want each of %q once", size, got, want)
		}
	}
	for _, limit := range []int{0, -1} {
		if _, _, err := sl.Scopes(ctxT(t), "", limit); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Scopes(limit %d): %v, want ErrInvalid", limit, err)
		}
		if _, _, err := sl.ScopeKeys(ctxT(t), "a", "", limit); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("ScopeKeys(limit %d): %v, want ErrInvalid", limit, err)
		}
	}
	if _, _, err := sl.ScopeKeys(ctxT(t), "", "", 10); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("ScopeKeys(scope \"\"): %v, want ErrInvalid", err)
	}
	if got := walkKeys(t, sl, "never-claimed", 10); len(got) != 0 {
		t.Fatalf("ScopeKeys of a scope without keys: %v", got)
	}
}

func testScopesKeys(t *testing.T, h Harness) {
	s := client(t, h.DSN(t))
	k, sl := s.(store.Keys), s.(store.ScopeLister)
	const scope = "effects"
	var done, live, dying []string
	for i := range 10 {
		done = append(done, fmt.Sprintf("done/%d", i))
		live = append(live, fmt.Sprintf("live %d", i))
	}
	for i := range 5 {
		dying = append(dying, fmt.Sprintf("{dying}%%%d", i))
	}
	ttl := time.Second
	claim(t, k, store.ClaimRequest{Scope: scope, Keys: done})
	claim(t, k, store.ClaimRequest{Scope: scope, Keys: live, Pending: true, Claimant: store.Claimant{RunID: "live", Expires: time.Hour}})
	claim(t, k, store.ClaimRequest{Scope: scope, Keys: dying, Pending: true, Claimant: store.Claimant{RunID: "dies", Expires: ttl}})
	waitState(t, k, scope, dying[0], store.KeyUnknown, ttl)
	for _, size := range []int{1, 3, 7, 1000} {
		got := walkKeys(t, sl, scope, size)
		if len(got) != 25 {
			t.Fatalf("ScopeKeys in pages of %d: %d keys, want 25", size, len(got))
		}
		for keys, state := range map[*[]string]store.KeyState{&done: store.KeyDone, &live: store.KeyPending, &dying: store.KeyUnknown} {
			for _, key := range *keys {
				x, ok := got[key]
				if !ok || x.State != state {
					t.Fatalf("ScopeKeys in pages of %d: key %q is %+v, want %s", size, key, x, state)
				}
				if x.ClaimedAt.IsZero() || (state == store.KeyDone) == x.DoneAt.IsZero() {
					t.Fatalf("ScopeKeys: key %q: claimed %v, done %v", key, x.ClaimedAt, x.DoneAt)
				}
				if state != store.KeyDone && x.RunID == "" {
					t.Fatalf("ScopeKeys: pending key %q without its claimant's run id", key)
				}
			}
		}
	}
	c, err := store.CountScope(ctxT(t), sl, scope, 1000)
	if err != nil {
		t.Fatal(err)
	}
	named := slices.Sorted(slices.Values(c.UnknownKeys))
	c.UnknownKeys = nil
	if want := (store.ScopeCount{Scope: scope, Pending: 10, Unknown: 5, Done: 10}); !reflect.DeepEqual(c, want) || !slices.Equal(named, dying) {
		t.Fatalf("CountScope = %+v naming %q, want %+v naming %q", c, named, want, dying)
	}
	c, err = store.CountScope(ctxT(t), sl, scope, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Pending + c.Unknown + c.Done; c.Capped && n < 4 || !c.Capped && n != 25 {
		t.Fatalf("CountScope(max 4) = %+v: capped counts at least 4 keys, whole ones all 25", c)
	}
}
