package sqlstore

import (
	"context"
	"database/sql"

	"github.com/once-run/once/store"
)

// Walking scopes and their keys (store.ScopeLister) through the keys table's primary key
// (scope, ikey): both pages are index ranges, so their cost does not grow with the number of keys.

var _ store.ScopeLister = (*Store)(nil)

// ScopesQuery is a page of scopes after a cursor (arguments: the cursor, the limit), in the
// column's order. PostgreSQL steps from scope to scope through the index with a recursive
// statement (it has no loose index scan); MySQL and MariaDB read DISTINCT over the index prefix
// with a loose index scan ("Using index for group-by").
func (s *Store) ScopesQuery() string {
	if s.Flavor == Postgres {
		return s.Q(`WITH RECURSIVE sc(scope, n) AS (
			SELECT (SELECT min(scope) FROM {p}keys WHERE scope > ?), 1
			UNION ALL
			SELECT (SELECT min(k.scope) FROM {p}keys k WHERE k.scope > sc.scope), n + 1
			FROM sc WHERE sc.scope IS NOT NULL AND n < ?
		) SELECT scope FROM sc WHERE scope IS NOT NULL`)
	}
	return s.Q(`SELECT DISTINCT scope FROM {p}keys WHERE scope > ? ORDER BY scope LIMIT ?`)
}

// ScopeKeysQuery is a page of one scope's keys after a cursor (arguments: the scope, the cursor,
// the limit), each with whether its claimant is gone, as Lookup reads them but without results.
func (s *Store) ScopeKeysQuery() string {
	return s.Q(`SELECT k.ikey, k.state, ` + goneExpr + `, k.fingerprint, k.run_id, k.claimed_at, k.done_at, NULL
		FROM {p}keys k WHERE k.scope = ? AND k.ikey > ? ORDER BY k.ikey LIMIT ?`)
}

// Scopes lists the scopes that hold keys after cursor, the last scope of the page before
// (store.ScopeLister).
func (s *Store) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	var out []string
	err := s.Do(ctx, func(ctx context.Context) error {
		rows, err := s.DB.QueryContext(ctx, s.ScopesQuery(), cursor, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			var sc string
			if err := rows.Scan(&sc); err != nil {
				return err
			}
			out = append(out, sc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	return out, store.NextCursor(out, limit, func(sc string) string { return sc }), nil
}

// ScopeKeys lists the keys of scope after cursor, the last key of the page before
// (store.ScopeLister).
func (s *Store) ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]store.Key, string, error) {
	if err := s.checkScope(scope); err != nil {
		return nil, "", err
	}
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	var out []store.Key
	err := s.Do(ctx, func(ctx context.Context) error {
		rows, err := s.DB.QueryContext(ctx, s.ScopeKeysQuery(), scope, cursor, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			k, err := scanKey(rows, scope)
			if err != nil {
				return err
			}
			out = append(out, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	return out, store.NextCursor(out, limit, func(k store.Key) string { return k.Key }), nil
}

// scanKey reads a row of ikey, state, gone, fingerprint, run_id, claimed_at, done_at, result.
func scanKey(rows *sql.Rows, scope string) (store.Key, error) {
	k := store.Key{Scope: scope}
	var gone bool
	var doneAt sql.NullTime
	if err := rows.Scan(&k.Key, &k.State, &gone, &k.Fingerprint, &k.RunID, &k.ClaimedAt, &doneAt, &k.Result); err != nil {
		return k, err
	}
	if gone {
		k.State = store.KeyUnknown
	}
	k.ClaimedAt = k.ClaimedAt.UTC()
	if doneAt.Valid {
		k.DoneAt = doneAt.Time.UTC()
	}
	return k, nil
}
