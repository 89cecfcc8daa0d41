package store

import (
	"context"
	"fmt"
)

// ScopeLister is implemented by stores that can walk the scopes of their business keys and the
// keys of one scope, a page at a time, each page at a cost that does not grow with the number of
// keys: what the scopes page of once serve reads, and where a person finds the effects whose
// outcome is unknown.
//
// Contract:
//   - Scopes(ctx, cursor, limit) returns at most limit scopes that hold at least one key, and the
//     cursor of the next page ("" when there is none). cursor "" starts at the beginning; any other
//     cursor is one a call returned. A walk from "" until the next cursor is "" returns every scope
//     that held keys for the whole walk exactly once, in an order that is the store's own (byte
//     order of the scope or of its encoded form) and the same in every walk.
//   - ScopeKeys(ctx, scope, cursor, limit) returns at most limit keys of scope and the next cursor
//     in the same way. A walk returns every key present for the whole walk at least once (a key may
//     repeat on Redis, whose hash scan may return a key twice while the hash grows), each with its
//     state as Lookup reports it (a pending key whose claimant is gone is KeyUnknown), without its
//     Result. The walk's order is the store's own.
//   - limit ≤ 0 is refused with ErrInvalid (CheckScopesPage); a scope is checked as by CheckScope.
//     A page may hold fewer than limit items when more follow (only the cursor says the walk ended).
type ScopeLister interface {
	Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error)
	ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]Key, string, error)
}

// MaxScopesPage bounds the page a ScopeLister is asked for by once's own readers.
const MaxScopesPage = 1000

// CheckScopesPage is the one rule for the limit of a ScopeLister page, applied by every backend
// before it reads: at least 1. Its error wraps ErrInvalid.
func CheckScopesPage(limit int) error {
	if limit <= 0 {
		return &invalidValue{fmt.Sprintf("scopes page: limit %d: give a limit of at least 1", limit)}
	}
	return nil
}

// ScopeCount is a scope's keys counted by state.
type ScopeCount struct {
	Scope   string `json:"scope"`
	Pending int    `json:"pending"` // pending under a claimant that may still be working
	Unknown int    `json:"unknown"` // pending, and the claimant is gone: a person decides
	Done    int    `json:"done"`
	// Capped: the scope holds more keys than were counted; the counts are of the first ones read.
	Capped bool `json:"capped,omitempty"`
	// UnknownKeys are the first unknown keys read (at most UnknownSample), in the walk's order.
	UnknownKeys []string `json:"unknown_keys,omitempty"`
}

// UnknownSample is how many unknown keys CountScope names (ScopeCount.UnknownKeys).
const UnknownSample = 5

// CountScope counts the keys of scope by state through sl, reading at most max keys (max ≥ 1),
// so its cost is bounded whatever the scope's size; Capped says more keys follow. A key a walk
// returns twice is counted once. It names the first unknown keys it reads (UnknownKeys).
func CountScope(ctx context.Context, sl ScopeLister, scope string, max int) (ScopeCount, error) {
	c := ScopeCount{Scope: scope}
	seen := make(map[string]struct{})
	for cursor := ""; ; {
		keys, next, err := sl.ScopeKeys(ctx, scope, cursor, min(max-len(seen), MaxScopesPage))
		if err != nil {
			return c, err
		}
		for _, k := range keys {
			if _, dup := seen[k.Key]; dup {
				continue
			}
			seen[k.Key] = struct{}{}
			switch k.State {
			case KeyPending:
				c.Pending++
			case KeyUnknown:
				c.Unknown++
				if len(c.UnknownKeys) < UnknownSample {
					c.UnknownKeys = append(c.UnknownKeys, k.Key)
				}
			case KeyDone:
				c.Done++
			}
		}
		if next == "" {
			return c, nil
		}
		if len(seen) >= max {
			c.Capped = true
			return c, nil
		}
		cursor = next
	}
}

// NextCursor is the cursor after a page of a walk by item (ScopeLister's SQL backends): the last
// item's, of, after a full page; "" after a short one, which ends the walk.
func NextCursor[T any](page []T, limit int, of func(T) string) string {
	if len(page) == 0 || len(page) < limit {
		return ""
	}
	return of(page[len(page)-1])
}
