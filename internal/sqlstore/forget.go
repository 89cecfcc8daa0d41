package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/once-run/once/store"
)

// Forget deletes the scope's keys claimed before before (store.Keys), in batches of
// store.ForgetBatch keys by claim time, one READ COMMITTED transaction each: the claim time of the
// batch's last key is read by the (scope, claimed_at) index, then the keys up to it that may go are
// deleted. A batch's row locks are held for milliseconds, and no statement grows with the scope, so
// none meets call_timeout.
func (s *Store) Forget(ctx context.Context, scope string, before time.Time, includeDone bool) (int64, error) {
	if err := s.checkScope(scope); err != nil {
		return 0, err
	}
	del := `DELETE FROM {p}keys AS k` // MySQL and MariaDB name the alias of a DELETE so
	if s.Flavor == MySQL {
		del = `DELETE k FROM {p}keys AS k`
	}
	last := s.Q(`SELECT k.claimed_at FROM {p}keys AS k WHERE k.scope = ? AND k.claimed_at > ? AND k.claimed_at < ?
		ORDER BY k.claimed_at LIMIT 1 OFFSET ?`)
	q := s.Q(del + ` WHERE k.scope = ? AND k.claimed_at > ? AND k.claimed_at <= ? AND k.claimed_at < ? AND (k.state = 'done' AND ?
		OR k.state = 'pending' AND COALESCE(k.token, 0) <= 0 AND k.expires_at IS NULL OR ? AND ` + goneExpr + `)`)
	before = before.UTC()
	var total int64
	for from, more := store.ForgetFrom, true; more; {
		var n int64
		var upTo time.Time
		err := s.Tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			upTo, more = before, true
			err := tx.QueryRowContext(ctx, last, scope, from, before, store.ForgetBatch-1).Scan(&upTo)
			if errors.Is(err, sql.ErrNoRows) {
				upTo, more = before, false // the last batch: up to before
			} else if err != nil {
				return err
			}
			r, err := tx.ExecContext(ctx, q, scope, from, upTo.UTC(), before, includeDone, includeDone)
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
		from = upTo.UTC()
	}
	return total, nil
}
