package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/once-run/once/store"
)

// Flavors select the keys statements (store.Keys), the one place where PostgreSQL and MySQL/MariaDB
// need different SQL: PostgreSQL and MariaDB have INSERT … RETURNING (Store.Returning), MySQL does not.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
)

// keysChunk is the most keys one statement carries: one array (PostgreSQL) or one JSON document
// (MySQL) per Claim statement, and an IN list of placeholders for the other operations.
const keysChunk = 1000

// The keys table's columns (migration 002) are store's limits (store/claims.go), checked by
// ClaimRequest.Check before a write, so MySQL's INSERT IGNORE can only ever skip duplicates, never
// truncate.

// goneExpr is true for a pending key (alias k) whose claimant is gone by the database's clock
// (store.Claimant): its own expiry has passed, or it belongs to a run (token > 0) whose lease is no
// longer the task's live grant with that token (expired, released, or taken over), nor a live
// seat's, or whose attempt is recorded and no longer running (the run ended: a sequence's next slot
// runs under the same token; the attempts' run_id index). It binds no parameters.
const goneExpr = `(k.state = 'pending' AND ((k.expires_at IS NOT NULL AND k.expires_at <= {now}) OR
	(k.token > 0 AND (NOT EXISTS (SELECT 1 FROM {p}leases l WHERE l.task = k.task AND l.token = k.token AND l.expires_at > {now})
		AND NOT EXISTS (SELECT 1 FROM {p}lease_seats c WHERE c.task = k.task AND c.token = k.token AND c.expires_at > {now})
		OR EXISTS (SELECT 1 FROM {p}attempts a WHERE a.run_id = k.run_id AND a.task = k.task AND a.state <> 'running')))))`

func (s *Store) keysErr(format string, a ...any) error {
	return fmt.Errorf(s.Flavor+": "+format, a...)
}

func (s *Store) checkScope(scope string) error {
	if err := store.CheckScope(scope); err != nil {
		return s.keysErr("%w", err)
	}
	return nil
}

func (s *Store) checkClaimant(c store.Claimant) error {
	if err := c.Check(); err != nil {
		return s.keysErr("%w", err)
	}
	return nil
}

// expiresExpr is the SQL for "now plus the microseconds in the next parameter, or NULL for 0".
func (s *Store) expiresExpr() string {
	if s.Flavor == Postgres {
		return `CASE WHEN ?::bigint > 0 THEN now() + ?::bigint * interval '1 microsecond' END`
	}
	return `IF(? > 0, NOW(6) + INTERVAL ? MICROSECOND, NULL)`
}

// inList returns "(?, ?, …)" with n placeholders.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

// keyArgs returns prefix followed by the keys, as query arguments.
func keyArgs(prefix []any, keys []string) []any {
	out := append(make([]any, 0, len(prefix)+len(keys)), prefix...)
	for _, k := range keys {
		out = append(out, k)
	}
	return out
}

// forChunks calls fn with consecutive chunks of the deduplicated keys.
func forChunks(keys []string, fn func(chunk []string) error) error {
	u := store.Distinct(keys)
	for lo := 0; lo < len(u); lo += keysChunk {
		if err := fn(u[lo:min(lo+keysChunk, len(u))]); err != nil {
			return err
		}
	}
	return nil
}

// Claim claims req.Keys (store.Keys) in one transaction, one INSERT statement per chunk of up to 1,000
// keys, in sorted order so that concurrent claimers of overlapping sets take row locks in the same
// order. PostgreSQL: INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING RETURNING. MySQL/MariaDB:
// INSERT IGNORE … SELECT FROM JSON_TABLE tagged with a random claim id; MariaDB returns the rows it
// inserted (RETURNING), MySQL's are read back by that id only when the batch was partly new (see
// docs/keys.md for why that is exact). Fingerprints are checked
// in the same transaction; a mismatch rolls everything back.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) ([]bool, error) {
	if err := req.Check(); err != nil {
		return nil, s.keysErr("%w", err)
	}
	state, c := "done", store.Claimant{}
	if req.Pending {
		state, c = "pending", req.Claimant
	}
	uniq, first, err := req.Distinct()
	if err != nil {
		return nil, err
	}
	slices.Sort(uniq)
	fp := func(k string) string { return req.Fingerprint(first[k]) }
	var exp int64
	if req.Pending && c.Expires > 0 {
		exp = max(c.Expires.Microseconds(), 1)
	}
	var claimed map[string]bool
	var fpErr error // kept aside: the dialect's MapError does not know ErrFingerprint
	err = s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		claimed, fpErr = make(map[string]bool, len(uniq)), nil
		for lo := 0; lo < len(uniq); lo += keysChunk {
			chunk := uniq[lo:min(lo+keysChunk, len(uniq))]
			fps := make([]string, len(chunk))
			for i, k := range chunk {
				fps[i] = fp(k)
			}
			var err error
			if s.Flavor == Postgres {
				err = s.claimPG(ctx, tx, req.Scope, state, c, exp, chunk, fps, claimed)
			} else {
				err = s.claimMySQL(ctx, tx, req.Scope, state, c, exp, chunk, fps, claimed)
			}
			if err != nil {
				return err
			}
			if req.Fingerprints != nil {
				if fpErr = s.checkFingerprints(ctx, tx, req.Scope, chunk, claimed, fp); fpErr != nil {
					return fpErr
				}
			}
		}
		return nil
	})
	if errors.Is(fpErr, store.ErrFingerprint) {
		return nil, fpErr
	}
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(req.Keys))
	for i, k := range req.Keys {
		out[i] = claimed[k] && first[k] == i
	}
	return out, nil
}

func (s *Store) claimPG(ctx context.Context, tx *sql.Tx, scope, state string, c store.Claimant, exp int64, chunk, fps []string, claimed map[string]bool) error {
	rows, err := tx.QueryContext(ctx, s.Q(`INSERT INTO {p}keys (scope, ikey, state, fingerprint, task, run_id, token, expires_at, claimed_at, done_at)
		SELECT ?::text, u.k, ?::text, u.f, ?::text, ?::text, ?::bigint, `+s.expiresExpr()+`, now(), CASE WHEN ?::text = 'done' THEN now() END
		FROM unnest(?::text[], ?::text[]) AS u(k, f)
		ON CONFLICT (scope, ikey) DO NOTHING RETURNING ikey`),
		scope, state, c.Task, c.RunID, c.Token, exp, exp, state, chunk, fps)
	if err != nil {
		return err
	}
	return returned(rows, claimed)
}

// returned marks claimed the keys an INSERT … RETURNING ikey returned, and closes rows.
func returned(rows *sql.Rows, claimed map[string]bool) error {
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		claimed[k] = true
	}
	return rows.Err()
}

// jsonTable reads a JSON array of strings as rows with column k.
const jsonTable = `JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j`

func (s *Store) claimMySQL(ctx context.Context, tx *sql.Tx, scope, state string, c store.Claimant, exp int64, chunk, fps []string, claimed map[string]bool) error {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	pairs := make([][2]string, len(chunk))
	for i := range chunk {
		pairs[i] = [2]string{chunk[i], fps[i]}
	}
	doc, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	insert := s.Q(`INSERT IGNORE INTO {p}keys (scope, ikey, state, fingerprint, task, run_id, token, expires_at, claimed_at, done_at, claim_id)
		SELECT ?, j.k, ?, j.f, ?, ?, ?, ` + s.expiresExpr() + `, NOW(6), IF(? = 'done', NOW(6), NULL), ?
		FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$[0]',
			f VARCHAR(255) CHARACTER SET utf8mb4 PATH '$[1]')) AS j`)
	args := []any{scope, state, c.Task, c.RunID, c.Token, exp, exp, state, id[:], string(doc)}
	if s.Returning != nil && s.Returning(ctx, tx) {
		// MariaDB returns exactly the rows this statement inserted (an ignored duplicate is not
		// returned), as PostgreSQL does: one statement per batch. The rows still carry the claim
		// id, so MySQL-style readers of the same table stay exact.
		rows, err := tx.QueryContext(ctx, insert+` RETURNING ikey`, args...)
		if err != nil {
			return err
		}
		return returned(rows, claimed)
	}
	res, err := tx.ExecContext(ctx, insert, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	switch n {
	case 0:
		return nil
	case int64(len(chunk)):
		for _, k := range chunk {
			claimed[k] = true
		}
		return nil
	}
	// Partly new: the rows carrying this statement's claim id are exactly the ones it inserted.
	keysDoc, err := json.Marshal(chunk)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, s.Q(`SELECT t.ikey FROM `+jsonTable+`
		JOIN {p}keys t ON t.scope = ? AND t.ikey = j.k WHERE t.claim_id = ?`), string(keysDoc), scope, id[:])
	if err != nil {
		return err
	}
	defer rows.Close()
	var got int64
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		claimed[k] = true
		got++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if got != n {
		return s.keysErr("claim inserted %d keys but found %d with its claim id; is the keys table's primary key (scope, ikey)?", n, got)
	}
	return nil
}

// checkFingerprints fails with ErrFingerprint when a key of chunk claimed before has another
// fingerprint than the one given now (store.CheckFingerprint).
func (s *Store) checkFingerprints(ctx context.Context, tx *sql.Tx, scope string, chunk []string, claimed map[string]bool, fp func(string) string) error {
	var old []string
	for _, k := range chunk {
		if !claimed[k] {
			old = append(old, k)
		}
	}
	if len(old) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, s.Q(`SELECT ikey, fingerprint FROM {p}keys WHERE scope = ? AND ikey IN `+inList(len(old))),
		keyArgs([]any{scope}, old)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, f string
		if err := rows.Scan(&k, &f); err != nil {
			return err
		}
		if err := store.CheckFingerprint(scope, k, f, fp(k)); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Complete marks keys pending under runID done with result (store.Keys), all or none, in one
// transaction that locks the rows first. Keys already done under runID are accepted again (a
// retried completion); any other key is ErrConflict.
func (s *Store) Complete(ctx context.Context, scope string, keys []string, runID string, result []byte) error {
	if err := s.checkScope(scope); err != nil {
		return err
	}
	if runID == "" {
		return s.keysErr("complete needs a run id")
	}
	if err := store.CheckKeyResult(result); err != nil {
		return s.keysErr("%w", err)
	}
	return s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return forChunks(keys, func(chunk []string) error {
			in := inList(len(chunk))
			rows, err := tx.QueryContext(ctx, s.Q(`SELECT ikey FROM {p}keys WHERE scope = ? AND ikey IN `+in+`
				AND run_id = ? AND state IN ('pending', 'done') FOR UPDATE`), append(keyArgs([]any{scope}, chunk), runID)...)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if n != len(chunk) {
				return fmt.Errorf("%w: %d of %d keys in scope %q are not claimed by run %s (never claimed, forgotten, or reclaimed by another)",
					store.ErrConflict, len(chunk)-n, len(chunk), scope, runID)
			}
			_, err = tx.ExecContext(ctx, s.Q(`UPDATE {p}keys SET state = 'done', done_at = {now}, result = ?, expires_at = NULL
				WHERE scope = ? AND ikey IN `+in+` AND run_id = ? AND state = 'pending'`),
				append(keyArgs([]any{result, scope}, chunk), runID)...)
			return err
		})
	})
}

// Lookup returns the stored keys among keys (store.Keys), in input order without repeats; pending
// keys whose claimant is gone by the database's clock are reported KeyUnknown.
func (s *Store) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if err := s.checkScope(scope); err != nil {
		return nil, err
	}
	var found map[string]store.Key
	err := s.Do(ctx, func(ctx context.Context) error {
		found = make(map[string]store.Key, len(keys))
		return forChunks(keys, func(chunk []string) error {
			rows, err := s.DB.QueryContext(ctx, s.Q(`SELECT k.ikey, k.state, `+goneExpr+`, k.fingerprint, k.run_id, k.claimed_at, k.done_at, k.result
				FROM {p}keys k WHERE k.scope = ? AND k.ikey IN `+inList(len(chunk))), keyArgs([]any{scope}, chunk)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				k, err := scanKey(rows, scope)
				if err != nil {
					return err
				}
				found[k.Key] = k
			}
			return rows.Err()
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Key, 0, len(found))
	for _, k := range store.Distinct(keys) {
		if v, ok := found[k]; ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// Reclaim changes the keys whose claimant is gone (store.Keys), in one transaction that locks them
// first: pending under c when c is set, else done (asDone) or deleted. It returns the changed keys in
// input order.
func (s *Store) Reclaim(ctx context.Context, scope string, keys []string, c *store.Claimant, asDone bool) ([]string, error) {
	if err := s.checkScope(scope); err != nil {
		return nil, err
	}
	if c != nil {
		if asDone {
			return nil, s.keysErr("reclaim to a claimant needs asDone false")
		}
		if err := s.checkClaimant(*c); err != nil {
			return nil, err
		}
	}
	var changed map[string]bool
	err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		changed = map[string]bool{}
		return forChunks(keys, func(chunk []string) error {
			rows, err := tx.QueryContext(ctx, s.Q(`SELECT k.ikey FROM {p}keys k WHERE k.scope = ? AND k.ikey IN `+inList(len(chunk))+`
				AND `+goneExpr+` FOR UPDATE`), keyArgs([]any{scope}, chunk)...)
			if err != nil {
				return err
			}
			var gone []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					rows.Close()
					return err
				}
				gone = append(gone, k)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(gone) == 0 {
				return nil
			}
			var q string
			var args []any
			where := ` WHERE scope = ? AND ikey IN ` + inList(len(gone))
			switch {
			case c != nil:
				var exp int64
				if c.Expires > 0 {
					exp = max(c.Expires.Microseconds(), 1)
				}
				q = `UPDATE {p}keys SET task = ?, run_id = ?, token = ?, expires_at = ` + s.expiresExpr() + `, claimed_at = {now}` + where
				args = []any{c.Task, c.RunID, c.Token, exp, exp}
			case asDone:
				q = `UPDATE {p}keys SET state = 'done', done_at = {now}, expires_at = NULL` + where
			default:
				q = `DELETE FROM {p}keys` + where
			}
			if _, err := tx.ExecContext(ctx, s.Q(q), keyArgs(append(args, scope), gone)...); err != nil {
				return err
			}
			for _, k := range gone {
				changed[k] = true
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, k := range store.Distinct(keys) {
		if changed[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

// ReleaseKeys deletes keys still pending under runID (store.Keys), so they can be claimed again; keys
// in any other state or under another claimant are left alone.
func (s *Store) ReleaseKeys(ctx context.Context, scope string, keys []string, runID string) error {
	if err := s.checkScope(scope); err != nil {
		return err
	}
	if runID == "" {
		return errors.New(s.Flavor + ": release needs a run id")
	}
	return s.Do(ctx, func(ctx context.Context) error {
		return forChunks(keys, func(chunk []string) error {
			_, err := s.DB.ExecContext(ctx, s.Q(`DELETE FROM {p}keys WHERE scope = ? AND ikey IN `+inList(len(chunk))+`
				AND state = 'pending' AND run_id = ?`), append(keyArgs([]any{scope}, chunk), runID)...)
			return err
		})
	})
}
