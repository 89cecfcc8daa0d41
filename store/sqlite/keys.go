package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/once-run/once/store"
)

var _ store.Keys = (*Store)(nil)

// keysChunk is the most keys one statement carries (bounding the statement's memory); keys go in
// as one JSON parameter, so SQLite's limit on bound variables does not apply.
const keysChunk = 4000

// goneExpr is true for a pending key (alias k) whose claimant is gone at ?1 (unix µs)
// (store.Claimant): its own expiry has passed, or it belongs to a run (token > 0) whose lease is no
// longer the task's live grant with that token, nor a live seat's, or whose attempt is recorded and
// no longer running (the run ended: a sequence's next slot runs under the same token; the attempts'
// unique run_id index). A released or expired lease counts as gone: a run's command is stopped
// before its lease can expire, and a run that ended without completing its keys did not say
// whether the work happened.
func (s *Store) goneExpr() string {
	return `(k.state = 'pending' AND ((k.expires_at > 0 AND k.expires_at <= ?1) OR
		(k.token > 0 AND (NOT EXISTS (SELECT 1 FROM ` + s.t.leases + ` l
			WHERE l.task = k.task AND l.token = k.token AND l.expires_at > ?1) AND NOT EXISTS (SELECT 1 FROM ` + s.t.seats + ` c
			WHERE c.task = k.task AND c.token = k.token AND c.expires_at > ?1)
			OR EXISTS (SELECT 1 FROM ` + s.t.attempts + ` a WHERE a.run_id = k.run_id AND a.task = k.task AND a.state <> 'running')))))`
}

func checkScope(scope string) error {
	if err := store.CheckScope(scope); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// jsonKeys encodes keys as a JSON array, bound as one parameter and read with json_each: one
// statement per batch, without SQLite's limit on bound variables. Keys are valid UTF-8, so the
// encoding round-trips byte for byte.
func jsonKeys(keys []string) string {
	b, _ := json.Marshal(keys) // a []string always encodes
	return string(b)
}

// Claim claims req.Keys in one BEGIN IMMEDIATE transaction: one INSERT … ON CONFLICT DO NOTHING
// RETURNING statement per chunk of up to 4,000 keys. Fingerprints, when given, are checked
// against keys claimed before in the same transaction; a mismatch rolls everything back.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) ([]bool, error) {
	if err := req.Check(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	state, c := "done", store.Claimant{}
	if req.Pending {
		state, c = "pending", req.Claimant
	}
	uniq, first, err := req.Distinct()
	if err != nil {
		return nil, err
	}
	fp := func(k string) string { return req.Fingerprint(first[k]) }
	claimed := make(map[string]bool, len(uniq))
	err = s.tx(ctx, func(tx *sql.Tx, now int64) error {
		var exp int64 // decided by the store's clock; claimed_at and done_at are shown: the wall clock
		if req.Pending && c.Expires > 0 {
			exp = now + ttlMicros(c.Expires)
		}
		wall := s.wall()
		for lo := 0; lo < len(uniq); lo += keysChunk {
			chunk := uniq[lo:min(lo+keysChunk, len(uniq))]
			pairs := make([][2]string, len(chunk))
			for i, k := range chunk {
				pairs[i] = [2]string{k, fp(k)}
			}
			js, err := json.Marshal(pairs)
			if err != nil {
				return err
			}
			var doneAt any
			if !req.Pending {
				doneAt = wall
			}
			rows, err := tx.QueryContext(ctx, `INSERT INTO `+s.t.keys+` (scope, key, state, fingerprint, task, run_id, token, expires_at, claimed_at, done_at)
				SELECT ?1, j.value ->> 0, ?2, j.value ->> 1, ?3, ?4, ?5, ?6, ?7, ?8 FROM json_each(?9) j WHERE true
				ON CONFLICT (scope, key) DO NOTHING RETURNING key`, req.Scope, state, c.Task, c.RunID, c.Token, exp, wall, doneAt, string(js))
			if err != nil {
				return err
			}
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					rows.Close()
					return err
				}
				claimed[k] = true
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if req.Fingerprints != nil && len(claimed) < lo+len(chunk) {
				if err := s.checkFingerprints(ctx, tx, req.Scope, chunk, claimed, fp); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(req.Keys))
	for i, k := range req.Keys {
		out[i] = claimed[k] && first[k] == i
	}
	return out, nil
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
	rows, err := tx.QueryContext(ctx, `SELECT key, fingerprint FROM `+s.t.keys+` WHERE scope = ?1 AND key IN (SELECT value FROM json_each(?2))`, scope, jsonKeys(old))
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

// keyArgs returns now, scope and the keys as arguments ?1, ?2, ?3.
func keyArgs(now int64, scope string, chunk []string) []any {
	return []any{now, scope, jsonKeys(chunk)}
}

// Complete marks keys pending under runID done with result, all or none. Keys already done
// under runID are accepted again (a retried completion); any other key is ErrConflict.
func (s *Store) Complete(ctx context.Context, scope string, keys []string, runID string, result []byte) error {
	if err := checkScope(scope); err != nil {
		return err
	}
	if runID == "" {
		return errors.New("sqlite: complete needs a run id")
	}
	if err := store.CheckKeyResult(result); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return s.tx(ctx, func(tx *sql.Tx, now int64) error {
		return forChunks(keys, func(chunk []string) error {
			const in = `SELECT value FROM json_each(?3)`
			args := keyArgs(now, scope, chunk)
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+s.t.keys+` WHERE scope = ?2 AND key IN (`+in+`) AND run_id = ?4 AND state IN ('pending', 'done')`, append(args, runID)...).Scan(&n); err != nil {
				return err
			}
			if n != len(chunk) {
				return fmt.Errorf("%w: %d of %d keys in scope %q are not claimed by run %s (never claimed, forgotten, or reclaimed by another)",
					store.ErrConflict, len(chunk)-n, len(chunk), scope, runID)
			}
			_, err := tx.ExecContext(ctx, `UPDATE `+s.t.keys+` SET state = 'done', done_at = ?5, result = ?4, expires_at = 0 WHERE scope = ?2 AND key IN (`+in+`) AND state = 'pending'`, append(args, result, s.wall())...)
			return err
		})
	})
}

// Lookup returns the stored keys among keys, in input order without repeats; pending keys whose
// claimant is gone are reported KeyUnknown.
func (s *Store) Lookup(ctx context.Context, scope string, keys []string) ([]store.Key, error) {
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	found := make(map[string]store.Key, len(keys))
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	err = forChunks(keys, func(chunk []string) error {
		rows, err := s.db.QueryContext(ctx, `SELECT k.key, k.state, `+s.goneExpr()+`, k.fingerprint, k.run_id, k.claimed_at, k.done_at, k.result
			FROM `+s.t.keys+` k WHERE k.scope = ?2 AND k.key IN (SELECT value FROM json_each(?3))`, keyArgs(now, scope, chunk)...)
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
	if err != nil {
		return nil, s.mapErr(err)
	}
	out := make([]store.Key, 0, len(found))
	for _, k := range store.Distinct(keys) {
		if v, ok := found[k]; ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// Reclaim changes the keys whose claimant is gone, in one transaction: pending under c when c is
// set, else done (asDone) or deleted. It returns the changed keys in input order.
func (s *Store) Reclaim(ctx context.Context, scope string, keys []string, c *store.Claimant, asDone bool) ([]string, error) {
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	if c != nil {
		if asDone {
			return nil, errors.New("sqlite: reclaim to a claimant needs asDone false")
		}
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	}
	changed := map[string]bool{}
	err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
		return forChunks(keys, func(chunk []string) error {
			args := keyArgs(now, scope, chunk)
			where := ` WHERE k.scope = ?2 AND k.key IN (SELECT value FROM json_each(?3)) AND ` + s.goneExpr()
			var q string
			switch {
			case c != nil:
				var exp int64
				if c.Expires > 0 {
					exp = now + ttlMicros(c.Expires)
				}
				q = `UPDATE ` + s.t.keys + ` AS k SET task = ?4, run_id = ?5, token = ?6, expires_at = ?7, claimed_at = ?8`
				args = append(args, c.Task, c.RunID, c.Token, exp, s.wall())
			case asDone:
				q = `UPDATE ` + s.t.keys + ` AS k SET state = 'done', done_at = ?4, expires_at = 0`
				args = append(args, s.wall())
			default:
				q = `DELETE FROM ` + s.t.keys + ` AS k`
			}
			rows, err := tx.QueryContext(ctx, q+where+` RETURNING key`, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				changed[k] = true
			}
			return rows.Err()
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

// Forget deletes the scope's keys claimed before before (store.Keys), in batches of
// store.ForgetBatch keys by claim time, a write transaction each: the claim time of the batch's last
// key is read by the (scope, claimed_at) index, then the keys up to it that may go are deleted.
// A million keys in one transaction held the write lock for 5.7 s, and each once run on the host
// waited that long (past busy_timeout, it would have failed).
func (s *Store) Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error) {
	if err := checkScope(scope); err != nil {
		return 0, err
	}
	b := before.UnixMicro()
	var total int64
	for from, more := store.ForgetFrom.UnixMicro(), true; more; {
		var n int64
		upTo := b
		err := s.tx(ctx, func(tx *sql.Tx, now int64) error {
			upTo, more = b, true
			err := tx.QueryRowContext(ctx, `SELECT claimed_at FROM `+s.t.keys+` WHERE scope = ?1 AND claimed_at > ?2 AND claimed_at < ?3
				ORDER BY claimed_at LIMIT 1 OFFSET ?4`, scope, from, b, store.ForgetBatch-1).Scan(&upTo)
			if errors.Is(err, sql.ErrNoRows) {
				upTo, more = b, false // the last batch: up to before
			} else if err != nil {
				return err
			}
			r, err := tx.ExecContext(ctx, `DELETE FROM `+s.t.keys+` AS k WHERE k.scope = ?2 AND k.claimed_at > ?3 AND k.claimed_at <= ?4
				AND k.claimed_at < ?5 AND (k.state = 'done' AND ?6 OR k.state = 'pending' AND k.token <= 0 AND k.expires_at <= 0 OR ?6 AND `+s.goneExpr()+`)`,
				now, scope, from, upTo, b, includeDone)
			if err != nil {
				return err
			}
			n, err = r.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		from = upTo
	}
	return total, nil
}

// ReleaseKeys deletes keys still pending under runID (a claim whose work did not happen), so they can
// be claimed again; keys in any other state or under another claimant are left alone (store.Keys).
func (s *Store) ReleaseKeys(ctx context.Context, scope string, keys []string, runID string) error {
	if err := checkScope(scope); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx, now int64) error {
		return forChunks(keys, func(chunk []string) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM `+s.t.keys+` WHERE scope = ?2 AND key IN (SELECT value FROM json_each(?3))
				AND state = 'pending' AND run_id = ?4 AND ?1 IS NOT NULL`, append(keyArgs(now, scope, chunk), runID)...)
			return err
		})
	})
}
