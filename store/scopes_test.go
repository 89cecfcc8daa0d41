package store_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/once-run/once/store"
)

// pages is a ScopeLister over fixed pages of one scope's keys, the cursor being the page's number.
type pages [][]store.Key

func (p pages) Scopes(context.Context, string, int) ([]string, string, error) { return nil, "", nil }

func (p pages) ScopeKeys(_ context.Context, _, cursor string, limit int) ([]store.Key, string, error) {
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	i, _ := strconv.Atoi(cursor)
	next := ""
	if i+1 < len(p) {
		next = strconv.Itoa(i + 1)
	}
	return p[i], next, nil
}

func TestCountScope(t *testing.T) {
	k := func(key string, st store.KeyState) store.Key { return store.Key{Key: key, State: st} }
	p := pages{
		{k("a", store.KeyDone), k("b", store.KeyPending)},
		{k("b", store.KeyPending), k("c", store.KeyUnknown)}, // b again: a hash scan may repeat a key
		{k("d", store.KeyDone)},
	}
	c, err := store.CountScope(context.Background(), p, "s", 100)
	if want := (store.ScopeCount{Scope: "s", Pending: 1, Unknown: 1, Done: 2, UnknownKeys: []string{"c"}}); err != nil || !reflect.DeepEqual(c, want) {
		t.Fatalf("CountScope = %+v, %v; want %+v", c, err, want)
	}
	c, err = store.CountScope(context.Background(), p, "s", 3)
	if want := (store.ScopeCount{Scope: "s", Pending: 1, Unknown: 1, Done: 1, Capped: true, UnknownKeys: []string{"c"}}); err != nil || !reflect.DeepEqual(c, want) {
		t.Fatalf("CountScope(max 3) = %+v, %v; want %+v", c, err, want)
	}
	if err := store.CheckScopesPage(0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CheckScopesPage(0) = %v", err)
	}
	if got := store.NextCursor([]string{"a", "b"}, 2, func(s string) string { return s }); got != "b" {
		t.Fatalf("NextCursor of a full page = %q", got)
	}
	if got := store.NextCursor([]string{"a"}, 2, func(s string) string { return s }); got != "" {
		t.Fatalf("NextCursor of a short page = %q", got)
	}
}
