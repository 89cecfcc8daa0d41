package sqlite

import (
	"context"
	"database/sql"

	"github.com/once-run/once/store"
)

var _ store.ScopeLister = (*Store)(nil)

// Scopes lists the scopes that hold keys, in byte order, after cursor (the last scope of the page
// before; store.ScopeLister): one recursive statement that steps from scope to scope through the
// primary key (scope, key), O(limit · log n) whatever the number of keys.
func (s *Store) Scopes(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	var out []string
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.scopesQuery(), cursor, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
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

// scopesQuery is Scopes' statement: ?1 the cursor, ?2 the limit.
func (s *Store) scopesQuery() string {
	return `WITH RECURSIVE sc(scope, n) AS (
		SELECT (SELECT scope FROM ` + s.t.keys + ` WHERE scope > ?1 ORDER BY scope LIMIT 1), 1
		UNION ALL
		SELECT (SELECT k.scope FROM ` + s.t.keys + ` k WHERE k.scope > sc.scope ORDER BY k.scope LIMIT 1), n + 1
		FROM sc WHERE sc.scope IS NOT NULL AND n < ?2
	) SELECT scope FROM sc WHERE scope IS NOT NULL`
}

// ScopeKeys lists the keys of scope in byte order after cursor (the last key of the page before;
// store.ScopeLister): a range of the primary key, each key judged as Lookup does.
func (s *Store) ScopeKeys(ctx context.Context, scope, cursor string, limit int) ([]store.Key, string, error) {
	if err := checkScope(scope); err != nil {
		return nil, "", err
	}
	if err := store.CheckScopesPage(limit); err != nil {
		return nil, "", err
	}
	now, err := s.now(ctx)
	if err != nil {
		return nil, "", err
	}
	var out []store.Key
	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.scopeKeysQuery(), now, scope, cursor, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
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

// scopeKeysQuery is ScopeKeys' statement: ?1 now, ?2 the scope, ?3 the cursor, ?4 the limit.
func (s *Store) scopeKeysQuery() string {
	return `SELECT k.key, k.state, ` + s.goneExpr() + `, k.fingerprint, k.run_id, k.claimed_at, k.done_at, NULL
		FROM ` + s.t.keys + ` k WHERE k.scope = ?2 AND k.key > ?3 ORDER BY k.key LIMIT ?4`
}

// scanKey reads a row of key, state, gone, fingerprint, run_id, claimed_at, done_at, result.
func scanKey(rows *sql.Rows, scope string) (store.Key, error) {
	k := store.Key{Scope: scope}
	var gone bool
	var claimedAt int64
	var doneAt sql.NullInt64
	if err := rows.Scan(&k.Key, &k.State, &gone, &k.Fingerprint, &k.RunID, &claimedAt, &doneAt, &k.Result); err != nil {
		return k, err
	}
	if gone {
		k.State = store.KeyUnknown
	}
	k.ClaimedAt = micros(claimedAt)
	if doneAt.Valid {
		k.DoneAt = micros(doneAt.Int64)
	}
	return k, nil
}
