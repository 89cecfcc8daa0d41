package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/once-run/once/store"
)

var _ store.SlotsReader = (*Store)(nil)

// Slots returns the state of each of slots of task, in order (store.SlotsReader): one statement
// (SlotsQuery), so one snapshot, whose row for each slot tried is what SlotQuery reads for it.
// On MySQL/MariaDB a row may leave a slot's failures open (slotsFailures: over 1,000 failures of a
// state, a resolution among the newest): then the block is read again in a transaction of one
// snapshot (REPEATABLE READ, read only) with those slots' counts read as Slot reads them.
// Like Slot it is a read: it checks no schema version (SchemaGuard is for writes), and fails as
// every call does once this Store found the schema newer (Do).
func (s *Store) Slots(ctx context.Context, task string, slots []string) ([]store.SlotState, error) {
	if err := store.CheckSlotsRead(slots); err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return []store.SlotState{}, nil
	}
	args := store.SlotsArgs(task, slots)
	found := make(map[string]store.SlotState, len(slots))
	err := s.Do(ctx, func(ctx context.Context) error {
		open, err := s.readSlots(ctx, s.DB, args, found)
		if err != nil || len(open) == 0 {
			return err
		}
		tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }() // read only: nothing to keep
		if open, err = s.readSlots(ctx, tx, args, found); err != nil {
			return err
		}
		for _, k := range open {
			st := found[k]
			if err := tx.QueryRowContext(ctx, s.Q(`SELECT `+s.failuresUpTo("?", "?")), task, st.Last.Slot, task, st.Last.Slot).Scan(&st.Failures); err != nil {
				return err
			}
			found[k] = st
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return store.SlotsInOrder(task, slots, found, s.slotKey), nil
}

// querier is what readSlots reads through: the pool, or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readSlots reads SlotsQuery into found (cleared first) and lists the keys of the slots whose
// failures the statement left open (NULL: MySQL/MariaDB, slotsFailures).
func (s *Store) readSlots(ctx context.Context, q querier, args []any, found map[string]store.SlotState) ([]string, error) {
	clear(found)
	rows, err := q.QueryContext(ctx, s.SlotsQuery(len(args)-1), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var open []string
	for rows.Next() {
		var st store.SlotState
		var failures sql.NullInt64
		var reviews int
		last, err := scanAttempt(extra{rows, []any{&failures, &st.Checkpoint, &reviews}})
		if err != nil {
			return nil, err
		}
		st.Last, st.Failures = &last, int(failures.Int64)
		st.Waiting = last.Resolution == nil && (last.State == store.Unknown || reviews > 0)
		k := s.slotKey(last.Slot)
		if _, seen := found[k]; !seen && !failures.Valid {
			open = append(open, k)
		}
		found[k] = st
	}
	return open, rows.Err()
}

// slotKey is the slot as the attempts' slot column compares it: on MySQL and MariaDB its collation
// (utf8mb4_bin) pads, so that "d1 " is slot "d1" there, to Slot as to Slots.
func (s *Store) slotKey(slot string) string {
	if s.Flavor == MySQL {
		return strings.TrimRight(slot, " ")
	}
	return slot
}

// SlotsQuery reads the slots tried among n ≥ 1 of a task (arguments: the task, then the n slots): a
// row per slot, its last attempt, its failures and slotCols, as SlotQuery reads them. The slots
// asked for drive the read, and each part is a search of an index that stops at the rows it
// returns (a slot's last attempt, its latest checkpoint, MaxFailures failures): it costs the slots
// asked for, never the task's other history nor a slot's older attempts. (A filter of the slots'
// attempts by the last number, a.slot IN (…) AND a.attempt = (SELECT MAX …), read every attempt
// of each slot: 12 s on PostgreSQL and 4.7 s on MariaDB for a slot of a million.) PostgreSQL reads
// each slot's last attempt in a LATERAL subquery; MariaDB has no LATERAL: slotsMySQL. Exported for
// the backends' plan tests.
func (s *Store) SlotsQuery(n int) string {
	if s.Flavor == MySQL {
		return s.slotsMySQL(n)
	}
	return s.Q(`SELECT ` + qualified("a", attemptCols) + `, ` + s.failuresUpTo("a.task", "a.slot") + `, ` + s.slotCols("a.task", "a.slot") + `
	FROM (SELECT CAST(? AS text) AS task) k CROSS JOIN (VALUES (?)` + strings.Repeat(", (?)", n-1) + `) s (slot)
	CROSS JOIN LATERAL (SELECT * FROM {p}attempts l WHERE l.task = k.task AND l.slot = s.slot ORDER BY l.attempt DESC LIMIT 1) a`)
}

// slotsMySQL is SlotsQuery on MySQL/MariaDB, which have no LATERAL (MariaDB) and refuse an outer
// reference in a derived table, so Slot's count of failures cannot be made per slot. A derived
// table l holds a row per slot asked for with its last attempt number, a scalar subquery that reads
// attempts_number backwards to its LIMIT 1 (a LIMIT accepts outer references); LIMIT n keeps l
// materialised (merged, l.last would be that subquery again, in the join's condition),
// STRAIGHT_JOIN reads it first, and each slot's last attempt is then found by its unique key. The
// slots asked for are made utf8mb4_bin, the attempts' collation, so that they compare (and pad) as
// the column does. The failures: slotsFailures.
func (s *Store) slotsMySQL(n int) string {
	param := `CONVERT(? USING utf8mb4) COLLATE utf8mb4_bin`
	return s.Q(`SELECT ` + qualified("a", attemptCols) + `, ` + s.slotsFailures() + `, ` + s.slotCols("a.task", "a.slot") + `
	FROM (SELECT k.task, s.slot, (SELECT m.attempt FROM {p}attempts m` + s.force("attempts_number") + `
				WHERE m.task = k.task AND m.slot = s.slot ORDER BY m.attempt DESC LIMIT 1) AS last
		FROM (SELECT ` + param + ` AS task) k CROSS JOIN (SELECT ` + param + ` AS slot` + strings.Repeat(` UNION ALL SELECT `+param, n-1) + `) s
		LIMIT ` + strconv.Itoa(n) + `) l
	STRAIGHT_JOIN {p}attempts a ON a.task = l.task AND a.slot = l.slot AND a.attempt = l.last`)
}

// slotsFailures are the failures of slot l (slotsMySQL) since its latest resolution, up to
// MaxFailures, the number failuresUpTo counts. MariaDB reads a slot's attempts for a count by a ref
// of their (task, slot[, state]), not the range after an outer reference (measured: 1,000,000
// index entries read to count 1,000), so a count must be of a ref that holds at most 1,000:
//
//   - a slot whose last attempt number is at most 1,000 has at most 1,000 attempts: counted;
//   - else, per failing state, its 1,001st newest attempt in that state (attempts_failures read
//     backwards to a LIMIT): none, the state's attempts are at most 1,000 and counted; one not
//     before the latest resolution, the newest 1,000 are since it: 1,000; one before, NULL.
//
// NULL leaves the slot open: its resolution is among the newest 1,000 of a state with more, and
// Slots reads its count as Slot does, in the same snapshot. The latest resolution is read by one
// search per value of res_as (res_as IS NOT NULL would be a ref of the slot's every attempt).
func (s *Store) slotsFailures() string {
	own := func(t string) string { return t + `.task = l.task AND ` + t + `.slot = l.slot` }
	resolved := `GREATEST(` + s.newestResolved("failed") + `, ` + s.newestResolved("succeeded") + `)`
	count := func(state string) string {
		return `CASE COALESCE((SELECT g.attempt FROM {p}attempts g` + s.force("attempts_failures") + ` WHERE ` + own("g") + ` AND g.state = '` + state + `'
				ORDER BY g.attempt DESC LIMIT ` + maxFailures + `, 1) >= ` + resolved + `, -1)
			WHEN 1 THEN ` + maxFailures + `
			WHEN -1 THEN (SELECT COUNT(*) FROM {p}attempts f` + s.force("attempts_failures") + ` WHERE ` + own("f") + ` AND f.state = '` + state + `' AND f.attempt > ` + resolved + `)
			END`
	}
	return `CASE WHEN l.last <= ` + maxFailures + ` THEN (SELECT COUNT(*) FROM {p}attempts f WHERE ` + own("f") + ` AND f.state IN ('failed', 'unknown')
			AND f.attempt > COALESCE((SELECT MAX(r.attempt) FROM {p}attempts r WHERE ` + own("r") + ` AND r.res_as IS NOT NULL), 0))
		ELSE LEAST(` + maxFailures + `, ` + count("failed") + ` + ` + count("unknown") + `) END`
}

// newestResolved is the number of slot l's latest attempt resolved as as, 0 when none: a search of
// attempts_resolved (task, slot, res_as, attempt) read backwards to its first row.
func (s *Store) newestResolved(as string) string {
	return `COALESCE((SELECT r.attempt FROM {p}attempts r` + s.force("attempts_resolved") + ` WHERE r.task = l.task AND r.slot = l.slot
				AND r.res_as = '` + as + `' ORDER BY r.attempt DESC LIMIT 1), 0)`
}
