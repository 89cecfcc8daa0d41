package sqlite

import (
	"context"
	"database/sql"
	"math"
	"strconv"
	"strings"

	"github.com/once-run/once/store"
)

// pruneBatch is how many entries one prune transaction looks at: each batch holds the write lock
// for a few milliseconds, so runs that start meanwhile wait that long at most.
const pruneBatch = 2000

// Prune removes old history by store.PruneRequest.Decide (see store.Ledger), in batches of short
// write transactions that walk the entries older than r.Before in time order: attempts first
// (forgetting a slot removes its events too), then events, then the waiting rows of slots that no
// longer wait. Every batch reads the facts and deletes in one transaction, so a run writing
// meanwhile is seen.
func (s *Store) Prune(ctx context.Context, r store.PruneRequest) (store.PruneResult, error) {
	var res store.PruneResult
	if err := store.CheckPrune(r); err != nil {
		return res, err
	}
	before := r.Before.UnixMicro()
	from := [2]int64{math.MinInt64, 0} // (time, rowid) of the last entry looked at
	if !r.Since.IsZero() {
		from = [2]int64{r.Since.UnixMicro(), -1}
	}
	// A dry run only reads: in read transactions, which also work on a ledger opened read-only.
	batch := func(fn func(tx *sql.Tx) error) error {
		if r.DryRun {
			return s.read(ctx, fn)
		}
		return s.txRaw(ctx, fn)
	}
	pos := from
	for done := false; !done; {
		err := batch(func(tx *sql.Tx) error {
			var n int
			var err error
			n, pos, err = s.pruneAttempts(ctx, tx, r, before, pos, &res)
			done = n < pruneBatch
			return err
		})
		if err != nil {
			return res, err
		}
	}
	pos = from
	for done := false; !done; {
		err := batch(func(tx *sql.Tx) error {
			var n int
			var err error
			n, pos, err = s.pruneEvents(ctx, tx, r, before, pos, &res)
			done = n < pruneBatch
			return err
		})
		if err != nil {
			return res, err
		}
	}
	if r.DryRun {
		return res, nil
	}
	return res, s.tx(ctx, func(tx *sql.Tx, _ int64) error { return s.pruneWaiting(ctx, tx) })
}

// lastCols reads the slot's last attempt (joined as l) for store.PruneFacts.
const lastCols = `l.number, l.state, l.started_at, l.ended_at, l.resolved_as`

func (s *Store) lastJoin(alias string) string {
	return ` LEFT JOIN ` + s.t.attempts + ` l ON l.task = ` + alias + `.task AND l.slot = ` + alias + `.slot
		AND l.number = (SELECT max(m.number) FROM ` + s.t.attempts + ` m WHERE m.task = ` + alias + `.task AND m.slot = ` + alias + `.slot)`
}

func scanLast(f *store.PruneFacts, number sql.NullInt64, state sql.NullString, started, ended sql.NullInt64, resAs sql.NullString) {
	if !number.Valid {
		return
	}
	f.Last = store.Attempt{Number: int(number.Int64), State: store.State(state.String), StartedAt: micros(started.Int64)}
	if ended.Valid {
		t := micros(ended.Int64)
		f.Last.EndedAt = &t
	}
	if resAs.Valid {
		f.Last.Resolution = &store.Resolution{As: store.State(resAs.String)}
	}
}

// pruneAttempts looks at the next batch of attempts older than before, after pos in (started_at,
// rowid) order.
func (s *Store) pruneAttempts(ctx context.Context, tx *sql.Tx, r store.PruneRequest, before int64, pos [2]int64, res *store.PruneResult) (int, [2]int64, error) {
	args := []any{}
	if r.ForgetSlots {
		args = append(args, before, before)
	}
	args = append(args, before, pos[0], pos[0], pos[1])
	if r.Task != "" {
		args = append(args, r.Task)
	}
	rows, err := tx.QueryContext(ctx, s.pruneAttemptsQuery(r.ForgetSlots, r.Task != ""), args...)
	if err != nil {
		return 0, pos, err
	}
	var drop []any
	var forget [][2]string
	n := 0
	for rows.Next() {
		var (
			rowid, started     int64
			task, slot, state  string
			number             int
			lNum, lStart, lEnd sql.NullInt64
			lState, lRes       sql.NullString
			cp                 int
			isRecent           bool
		)
		if err := rows.Scan(&rowid, &task, &slot, &number, &state, &started, &lNum, &lState, &lStart, &lEnd, &lRes, &cp, &isRecent); err != nil {
			rows.Close()
			return 0, pos, err
		}
		n++
		pos = [2]int64{started, rowid}
		f := store.PruneFacts{Kind: store.State(state), Number: number, At: micros(started), Checkpoint: cp, Recent: isRecent, Slotless: slot == ""}
		scanLast(&f, lNum, lState, lStart, lEnd, lRes)
		switch r.Decide(f) {
		case store.Drop:
			drop = append(drop, rowid)
		case store.Forget:
			if number < f.Last.Number {
				drop = append(drop, rowid) // the slot goes whole when its last attempt is reached
				break
			}
			forget = append(forget, [2]string{task, slot})
			res.Slots++
			if r.DryRun {
				res.Attempts++
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, pos, err
	}
	if r.DryRun {
		res.Attempts += int64(len(drop))
		return n, pos, nil
	}
	t := s.t
	if len(drop) > 0 {
		got, err := exec(ctx, tx, `DELETE FROM `+t.attempts+` WHERE state <> 'running' AND rowid IN (`+marks(len(drop))+`)`, drop...)
		if err != nil {
			return 0, pos, err
		}
		res.Attempts += got
	}
	for _, k := range forget {
		got, err := exec(ctx, tx, `DELETE FROM `+t.attempts+` WHERE task = ? AND slot = ?`, k[0], k[1])
		if err != nil {
			return 0, pos, err
		}
		res.Attempts += got
		if got, err = exec(ctx, tx, `DELETE FROM `+t.events+` WHERE task = ? AND slot = ?`, k[0], k[1]); err != nil {
			return 0, pos, err
		}
		res.Events += got
	}
	return n, pos, nil
}

// pruneEvents looks at the next batch of events older than before, after pos in (at, id) order.
func (s *Store) pruneEvents(ctx context.Context, tx *sql.Tx, r store.PruneRequest, before int64, pos [2]int64, res *store.PruneResult) (int, [2]int64, error) {
	args := []any{before, pos[0], pos[0], pos[1]}
	if r.Task != "" {
		args = append(args, r.Task)
	}
	rows, err := tx.QueryContext(ctx, s.pruneEventsQuery(r.Task != ""), args...)
	if err != nil {
		return 0, pos, err
	}
	var drop []any
	n := 0
	for rows.Next() {
		var (
			id, at             int64
			kind               string
			attempt            int
			lNum, lStart, lEnd sql.NullInt64
			lState, lRes       sql.NullString
		)
		if err := rows.Scan(&id, &kind, &attempt, &at, &lNum, &lState, &lStart, &lEnd, &lRes); err != nil {
			rows.Close()
			return 0, pos, err
		}
		n++
		pos = [2]int64{at, id}
		// Recent: the slot's whole removal is the attempts' pass; here only Drop or Keep matters.
		f := store.PruneFacts{Event: true, Kind: store.State(kind), Number: attempt, At: micros(at), Recent: true}
		scanLast(&f, lNum, lState, lStart, lEnd, lRes)
		if r.Decide(f) != store.Keep {
			drop = append(drop, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, pos, err
	}
	if r.DryRun || len(drop) == 0 {
		res.Events += int64(len(drop))
		return n, pos, nil
	}
	got, err := exec(ctx, tx, `DELETE FROM `+s.t.events+` WHERE id IN (`+marks(len(drop))+`)`, drop...)
	res.Events += got
	return n, pos, err
}

// pruneAttemptsQuery reads a batch of attempts (after a position in time order) with the facts
// store.PruneFacts needs, each an index search: the arguments are [before, before (forget)],
// before, the position's time twice and rowid, [task].
func (s *Store) pruneAttemptsQuery(forget, task bool) string {
	t := s.t
	recent := `0`
	if forget {
		recent = `EXISTS (SELECT 1 FROM ` + t.attempts + ` x WHERE x.task = a.task AND x.slot = a.slot AND x.started_at >= ?)
			OR EXISTS (SELECT 1 FROM ` + t.events + ` x WHERE x.task = a.task AND x.slot = a.slot AND x.at >= ?)`
	}
	cond := `a.started_at < ? AND a.started_at >= ? AND (a.started_at > ? OR a.rowid > ?)`
	if task {
		cond += ` AND a.task = ?`
	}
	return `SELECT a.rowid, a.task, a.slot, a.number, a.state, a.started_at, ` + lastCols + `,
		coalesce((SELECT max(c.number) FROM ` + t.attempts + ` c WHERE c.task = a.task AND c.slot = a.slot AND c.checkpoint <> ''), 0),
		` + recent + `
		FROM ` + t.attempts + ` a` + s.lastJoin("a") + `
		WHERE ` + cond + ` ORDER BY a.started_at, a.rowid LIMIT ` + strconv.Itoa(pruneBatch)
}

// pruneEventsQuery reads a batch of events like pruneAttemptsQuery: the arguments are before,
// the position's time twice and id, [task].
func (s *Store) pruneEventsQuery(task bool) string {
	cond := `e.at < ? AND e.at >= ? AND (e.at > ? OR e.id > ?)`
	if task {
		cond += ` AND e.task = ?`
	}
	return `SELECT e.id, e.kind, e.attempt, e.at, ` + lastCols + `
		FROM ` + s.t.events + ` e` + s.lastJoin("e") + `
		WHERE ` + cond + ` ORDER BY e.at, e.id LIMIT ` + strconv.Itoa(pruneBatch)
}

// pruneWaiting removes the waiting rows of slots that no longer wait (left by nothing but a
// concurrent writer's race in the server stores; here, by a deleted review event).
func (s *Store) pruneWaiting(ctx context.Context, tx *sql.Tx) error {
	keys, err := s.waitingKeys(ctx, tx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		st, err := s.slotState(ctx, tx, k[0], k[1])
		if err != nil {
			return err
		}
		if !st.Waiting {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.t.waiting+` WHERE task = ? AND slot = ?`, k[0], k[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }
