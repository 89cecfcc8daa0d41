package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/once-run/once/internal/shell"
	"github.com/once-run/once/store"
)

// Business keys (store.Keys, store.ScopeLister): the scopes with their keys counted by state, one
// scope's keys, and the effects whose outcome nobody knows (pending under a claimant that is gone:
// a person checks downstream and decides). Results are never shown: they may hold a downstream's
// answer.

const (
	// maxLookup bounds the keys one GET /api/v1/keys?key=… looks up.
	maxLookup = 100
	// scopesPage and maxScopesPage are the scopes one page shows by default and at most; each
	// scope's keys are counted up to countMax, so a page reads at most maxScopesPage·countMax keys.
	scopesPage, maxScopesPage = 20, 50
	countMax                  = 1000
	// keysRead and maxKeysRead are how many keys of a scope one page reads (and filters by state)
	// by default and at most.
	keysRead, maxKeysRead = 1000, 5000
)

// ScopesPage is a page of scopes with their counts.
type ScopesPage struct {
	Scopes []store.ScopeCount `json:"scopes"`
	// Next is the cursor= of the next page, "" on the last.
	Next string `json:"next"`
	// CountMax is how many keys of a scope are counted at most (ScopeCount.Capped beyond).
	CountMax int `json:"count_max"`
}

// KeysPage is what a page of one scope's keys read: the keys in the state asked for.
type KeysPage struct {
	Scope string      `json:"scope"`
	State string      `json:"state,omitempty"` // "" for every state
	Keys  []store.Key `json:"keys"`
	Read  int         `json:"read"` // keys read to find them
	// Next is the cursor= that reads on, "" when the scope's keys were all read.
	Next string `json:"next"`
}

func (s *Server) keysStore() (store.Keys, error) {
	ks, ok := s.c.Store.(store.Keys)
	if !ok {
		return nil, errNoKeys
	}
	return ks, nil
}

var errNoKeys = notFound("this store keeps no business keys")

// notFound is an error of a thing that is not there: 404.
type notFound string

func (e notFound) Error() string      { return string(e) }
func (notFound) Is(target error) bool { return target == store.ErrNotFound }

func (s *Server) scopeLister() (store.ScopeLister, error) {
	if _, err := s.keysStore(); err != nil {
		return nil, err
	}
	sl, ok := s.c.Store.(store.ScopeLister)
	if !ok {
		return nil, notFound("this store cannot list its scopes: look keys up with scope= and key=")
	}
	return sl, nil
}

// scopes reads a page of scopes and counts each one's keys (at most countMax).
func (s *Server) scopes(ctx context.Context, cursor string, limit int) (ScopesPage, error) {
	sl, err := s.scopeLister()
	if err != nil {
		return ScopesPage{}, err
	}
	names, next, err := sl.Scopes(ctx, cursor, limit)
	if err != nil {
		return ScopesPage{}, err
	}
	p := ScopesPage{Scopes: make([]store.ScopeCount, 0, len(names)), Next: next, CountMax: countMax}
	for _, n := range names {
		c, err := store.CountScope(ctx, sl, n, countMax)
		if err != nil {
			return ScopesPage{}, err
		}
		p.Scopes = append(p.Scopes, c)
	}
	return p, nil
}

// scopeKeys reads up to read keys of scope from cursor on and keeps those in state ("" for all).
func (s *Server) scopeKeys(ctx context.Context, scope, state, cursor string, read int) (KeysPage, error) {
	sl, err := s.scopeLister()
	if err != nil {
		return KeysPage{}, err
	}
	p := KeysPage{Scope: scope, State: state, Keys: []store.Key{}}
	for {
		keys, next, err := sl.ScopeKeys(ctx, scope, cursor, min(read-p.Read, store.MaxScopesPage))
		if err != nil {
			return KeysPage{}, err
		}
		p.Read += len(keys)
		for _, k := range keys {
			if state == "" || string(k.State) == state {
				p.Keys = append(p.Keys, k)
			}
		}
		p.Next, cursor = next, next
		if next == "" || p.Read >= read {
			return p, nil
		}
	}
}

// keysQuery is the parameters of a read of keys: a scope, and either keys to look up or a state,
// a cursor and how many keys to read.
type keysQuery struct {
	scope, state, cursor string
	keys                 []string
	read                 int
}

func keysParams(r *http.Request) (keysQuery, error) {
	qv := r.URL.Query()
	k := keysQuery{scope: qv.Get("scope"), state: qv.Get("state"), cursor: qv.Get("cursor"), keys: qv["key"], read: keysRead}
	if store.CheckScope(k.scope) != nil {
		return k, bad("scope=%q: give the keys' scope, 1 to %d bytes", clip(k.scope), store.MaxScopeLen)
	}
	if len(k.keys) > maxLookup {
		return k, bad("give at most %d key= parameters", maxLookup)
	}
	for _, key := range k.keys {
		if err := store.ValidateKey(key); err != nil {
			return k, bad("key %q: %v", clip(key), err)
		}
	}
	switch store.KeyState(k.state) {
	case "", store.KeyPending, store.KeyDone, store.KeyUnknown:
	default:
		return k, bad("state=%q: give pending, done or unknown, or leave it out for every state", clip(k.state))
	}
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxKeysRead {
			return k, bad("limit=%q: give how many keys to read, a whole number from 1 to %d", clip(v), maxKeysRead)
		}
		k.read = n
	}
	return k, nil
}

func scopesParams(r *http.Request) (cursor string, limit int, err error) {
	limit = scopesPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxScopesPage {
			return "", 0, bad("limit=%q: give a whole number from 1 to %d", clip(v), maxScopesPage)
		}
		limit = n
	}
	return r.URL.Query().Get("cursor"), limit, nil
}

// apiScopes lists the scopes with their keys counted by state.
func (s *Server) apiScopes(w http.ResponseWriter, r *http.Request) {
	cursor, limit, err := scopesParams(r)
	if err == nil {
		var p ScopesPage
		if p, err = s.scopes(r.Context(), cursor, limit); err == nil {
			writeJSONTo(w, http.StatusOK, p)
			return
		}
	}
	s.apiFail(w, r, err)
}

// apiKeys looks up keys of one scope (key=…, as once keys status), or reads the scope's keys a
// page at a time, those in state= only: each key's state — pending, done, or unknown when its
// claimant is gone — its claimant's run and when it was claimed and done. A key never claimed is
// absent.
func (s *Server) apiKeys(w http.ResponseWriter, r *http.Request) {
	k, err := keysParams(r)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	if len(k.keys) == 0 {
		p, err := s.scopeKeys(r.Context(), k.scope, k.state, k.cursor, k.read)
		if err != nil {
			s.apiFail(w, r, err)
			return
		}
		writeJSONTo(w, http.StatusOK, p)
		return
	}
	ks, err := s.keysStore()
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	found, err := ks.Lookup(r.Context(), k.scope, k.keys)
	if err != nil {
		s.apiFail(w, r, err)
		return
	}
	if found == nil {
		found = []store.Key{}
	}
	writeJSONTo(w, http.StatusOK, map[string]any{"scope": k.scope, "keys": found})
}

// pageKeys shows the scopes with their counts or, with scope=, one scope's keys (state=unknown:
// the effects waiting for a person).
func (s *Server) pageKeys(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("scope") == "" {
		cursor, limit, err := scopesParams(r)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		p, err := s.scopes(r.Context(), cursor, limit)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		s.render(w, r, http.StatusOK, "keys", p)
		return
	}
	k, err := keysParams(r)
	if err == nil && len(k.keys) > 0 {
		err = bad("the keys page reads a scope's keys: leave key= out (GET /api/v1/keys looks keys up)")
	}
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	p, err := s.scopeKeys(r.Context(), k.scope, k.state, k.cursor, k.read)
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "scope", p)
}

func renderScopes(w *page, v view) {
	p := v.Data.(ScopesPage)
	w.p(`<h1>%s</h1><p class="muted">%s</p>`, v.T("keys"), v.T("keys_intro"))
	if len(p.Scopes) == 0 {
		w.p(`<p>%s</p>`, v.T("no_scopes"))
		return
	}
	w.p(`<table class="scopes"><thead><tr><th>%s</th><th>%s</th><th>%s</th><th>%s</th></tr></thead><tbody>`,
		v.T("scope"), v.T("h_unknown"), v.T("h_pending"), v.T("done"))
	for _, c := range p.Scopes {
		more := safe("")
		if c.Capped {
			more = "+"
		}
		w.p(`<tr data-scope="%s"><td><a href="/keys?scope=%s">%s</a></td><td>`, c.Scope, q(c.Scope), c.Scope)
		if c.Unknown > 0 {
			w.p(`<a href="/keys?scope=%s&amp;state=unknown">%s</a>`, q(c.Scope), statusBadge("unknown", strconv.Itoa(c.Unknown)+string(more)))
		} else {
			w.p("0%s", more)
		}
		w.p(`</td><td>%d%s</td><td>%d%s</td></tr>`, c.Pending, more, c.Done, more)
	}
	w.p("</tbody></table>")
	w.p(`<p class="muted">%s</p>`, strings.ReplaceAll(v.T("count_max"), "{n}", strconv.Itoa(p.CountMax)))
	if p.Next != "" {
		w.p(`<p><a href="/keys?cursor=%s">%s →</a></p>`, q(p.Next), v.T("more"))
	}
}

func renderScope(w *page, v view) {
	p := v.Data.(KeysPage)
	w.p(`<h1>%s · %s</h1><p class="filters">`, v.T("scope"), p.Scope)
	for _, st := range []string{"", "unknown", "pending", "done"} {
		label := v.T("all")
		if st != "" {
			label = v.T("key_" + st)
		}
		cur := safe("")
		if st == p.State {
			cur = ` aria-current="page"`
		}
		w.p(`<a href="/keys?scope=%s&amp;state=%s"%s>%s</a> `, q(p.Scope), q(st), cur, label)
	}
	w.p(`</p><p class="muted">%s</p>`, strings.NewReplacer("{read}", strconv.Itoa(p.Read), "{shown}", strconv.Itoa(len(p.Keys))).Replace(v.T("keys_read")))
	if p.State == "unknown" || hasUnknown(p.Keys) {
		w.p(`<p class="hint">%s <code>once keys claim --scope %s --reclaim-unknown KEY</code></p>`, v.T("unknown_hint"), shell.Quote(p.Scope))
	}
	if len(p.Keys) > 0 {
		w.p(`<table class="keys"><thead><tr><th>%s</th><th>%s</th><th>%s</th><th>%s</th><th>%s</th></tr></thead><tbody>`,
			v.T("key"), v.T("state"), v.T("run_id"), v.T("claimed"), v.T("done"))
		for _, k := range p.Keys {
			w.p(`<tr data-key="%s"><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>`,
				k.Key, k.Key, statusBadge(string(k.State), v.T("key_"+string(k.State))), orDash(k.RunID), when(k.ClaimedAt), when(k.DoneAt))
		}
		w.p("</tbody></table>")
	}
	if p.Next != "" {
		w.p(`<p><a href="/keys?scope=%s&amp;state=%s&amp;cursor=%s">%s →</a></p>`, q(p.Scope), q(p.State), q(p.Next), v.T("read_on"))
	}
}

func hasUnknown(keys []store.Key) bool {
	for _, k := range keys {
		if k.State == store.KeyUnknown {
			return true
		}
	}
	return false
}
