package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// The waiting table (migration 003) lists the slots waiting for a person with the time their last
// attempt ended, so that Waiting costs the slots waiting, not the ledger. The writes that can
// change whether a slot waits keep it in their own transaction: Begin (a new attempt: no longer
// waiting), Finish as unknown and Abandon (waiting), Resolve (no longer), Record of a review event
// about the last attempt (waiting). A row can outlive its reason only through a race between
// unfenced writers (a review event and a resolve at the same moment); Waiting reads each slot's
// state and skips such a row, and Prune removes it. A slot waiting without a row cannot happen:
// the row is written in the transaction that makes it wait. (A process of an older once cannot
// open the schema: it refuses a newer version.)

// upsertWaiting ends an INSERT INTO {p}waiting (task, slot, since) … so that it replaces the row.
func (s *Store) upsertWaiting() string {
	if s.Flavor == MySQL {
		return ` ON DUPLICATE KEY UPDATE since = VALUES(since)`
	}
	return ` ON CONFLICT (task, slot) DO UPDATE SET since = EXCLUDED.since`
}

// notWaiting removes (task, slot)'s waiting row.
func (s *Store) notWaiting(ctx context.Context, tx *sql.Tx, task, slot string) error {
	_, err := tx.ExecContext(ctx, s.Q(deleteWait), task, slot)
	return err
}

// waitsSince adds (task, slot)'s waiting row when its attempt number is the slot's last and
// unresolved, dated by that attempt's end; review says a review event is about it, otherwise the
// attempt must be unknown.
func (s *Store) waitsSince(ctx context.Context, tx *sql.Tx, task, slot string, number int, review bool) error {
	cond := `a.state = 'unknown'`
	if review {
		cond = `1 = 1` // a review event about the last attempt makes the slot wait, as SlotState says
	}
	_, err := tx.ExecContext(ctx, s.Q(`INSERT INTO {p}waiting (task, slot, since)
		SELECT a.task, a.slot, COALESCE(a.ended_at, a.started_at) FROM {p}attempts a
		WHERE a.task = ? AND a.slot = ? AND a.attempt = ? AND a.res_as IS NULL AND `+cond+`
		AND a.attempt = (SELECT MAX(m.attempt) FROM {p}attempts m WHERE m.task = ? AND m.slot = ?)`)+s.upsertWaiting(),
		task, slot, number, task, slot)
	return err
}

// WaitingQuery lists the waiting rows, oldest first (store.Ledger's order of Waiting).
const WaitingQuery = `SELECT task, slot FROM {p}waiting ORDER BY since, task, slot`

// SlotQuery reads a slot's last attempt with, in the same row, its failures since its latest
// resolution (failuresUpTo) and slotCols: its latest checkpoint and the review events about that
// attempt: one statement, so that the parts agree and a Start reads the slot in one round trip. No
// row: the slot has no attempt (and so no failure, checkpoint or review). Arguments: task and
// slot, four times. Each part is an index search (migration 003; the checkpoint on MySQL/MariaDB,
// 007), and the failures are counted up to store.MaxFailures, so it costs the same whatever the
// number of attempts in the slot. Exported for the backends' plan tests.
func (s *Store) SlotQuery() string {
	return s.Q(`SELECT ` + attemptCols + `, ` + s.failuresUpTo("?", "?") + `, ` + s.slotCols("?", "?") + `
	FROM {p}attempts a WHERE a.task = ? AND a.slot = ? ORDER BY a.attempt DESC LIMIT 1`)
}

// maxFailures is store.MaxFailures in SQL (TestMaxFailures).
const maxFailures = "1000"

// failuresUpTo are the failures (failed and unknown attempts) of the slot task, slot (SQL
// expressions) since its latest resolution, counted from a derived table limited to MaxFailures
// rows: a cost that does not grow with them. Slot's, and PostgreSQL's Slots' with the columns of
// each slot's last attempt; MariaDB refuses an outer reference (a.task) in a derived table, so its
// Slots counts them by slotsFailures, the same number (storetest's Slots cases and
// sqltest.SlotsAgreeDeep hold them to each other).
func (s *Store) failuresUpTo(task, slot string) string {
	same := `.task = ` + task + ` AND `
	return `(SELECT COUNT(*) FROM (SELECT 1 FROM {p}attempts f WHERE f` + same + `f.slot = ` + slot + ` AND f.state IN ('failed', 'unknown')
			AND f.attempt > COALESCE((SELECT MAX(r.attempt) FROM {p}attempts r
				WHERE r` + same + `r.slot = ` + slot + ` AND r.res_as IS NOT NULL), 0) LIMIT ` + maxFailures + `) f)`
}

// slotCols are a slot's latest checkpoint and the review events about its last attempt, read as
// the table alias a, for the slot task, slot given as SQL expressions: parameters in SlotQuery, a's
// columns in SlotsQuery (one rule for both).
func (s *Store) slotCols(task, slot string) string {
	return `COALESCE((SELECT c.checkpoint FROM {p}attempts c` + s.checkpointed("c", task, slot) + `
			ORDER BY c.attempt DESC LIMIT 1), ''),
		(SELECT COUNT(*) FROM {p}events e WHERE e.task = a.task AND e.slot = a.slot AND e.kind = 'review'
			AND e.attempt = a.attempt)`
}

// checkpointed is the index hint and WHERE clause of the attempts, as table alias t, of slot task,
// slot (SQL expressions) that have a checkpoint, for a read of the latest of them (ORDER BY
// t.attempt DESC LIMIT 1): PostgreSQL searches its partial index attempts_checkpoint (migration
// 003); MySQL/MariaDB, which have no partial index, search attempts_checkpoint (task, slot,
// has_checkpoint, attempt) of migration 007 over the generated column has_checkpoint (the same
// test of the checkpoint, with the same padding). A read of the slot back from its last attempt until
// one had a checkpoint cost every attempt of a slot that has none (1.8 s at a million on MariaDB).
func (s *Store) checkpointed(t, task, slot string) string {
	if s.Flavor == MySQL {
		return s.force("attempts_checkpoint") + ` WHERE ` + t + `.task = ` + task + ` AND ` + t + `.slot = ` + slot + ` AND ` + t + `.has_checkpoint = 1`
	}
	return ` WHERE ` + t + `.task = ` + task + ` AND ` + t + `.slot = ` + slot + ` AND ` + t + `.checkpoint <> ''`
}

// Waiting lists the slots waiting for a person, oldest first (store.Ledger).
func (s *Store) Waiting(ctx context.Context) ([]store.SlotState, error) {
	var out []store.SlotState
	err := s.Do(ctx, func(ctx context.Context) error {
		out = nil
		keys, err := s.waitingKeys(ctx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			st, err := s.slot(ctx, k[0], k[1])
			if err != nil {
				return err
			}
			if st.Waiting {
				out = append(out, st)
			}
		}
		return nil
	})
	return out, err
}

func (s *Store) waitingKeys(ctx context.Context) ([][2]string, error) {
	rows, err := s.DB.QueryContext(ctx, s.Q(WaitingQuery))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys [][2]string
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// historyPage is the page size store.EachHistory asks for.
const historyPage = 1000

// HistoryPageSize makes the store a store.HistoryPager: a page of history is read from indexes.
func (s *Store) HistoryPageSize() int { return historyPage }

// History lists attempts and events in history order (store.Ledger). Each table is read in time
// order from an index on (task, slot, time, id), (task, time, id), events' (kind, time, id) or
// (time, id) as the filter allows, up to the limit, and the two are merged: a page costs the
// page. The cursor is the entry's time, kind and id.
func (s *Store) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	query, args, err := s.HistoryQuery(q)
	if err != nil {
		return nil, err
	}
	var out []store.Entry
	err = s.Do(ctx, func(ctx context.Context) error {
		out = nil
		rows, err := s.DB.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev, seq int64
			a, err := scanAttempt(prefixScanner{rows, []any{&ev, &seq}})
			if err != nil {
				return err
			}
			out = append(out, store.Entry{Attempt: a, Cursor: store.CursorOf(a.StartedAt, ev == 1, "", seq).String()})
		}
		return rows.Err()
	})
	if q.After != "" { // read oldest first from the cursor: list newest first
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, err
}

// HistoryQuery builds History's statement, rebound for the dialect: the filter and the cursors
// are plain conditions on the indexed columns, so the planner sees them, and each table's read
// has its own ORDER BY and LIMIT, so it stops at the page. Exported for the backends' plan tests.
func (s *Store) HistoryQuery(q store.HistoryQuery) (string, []any, error) {
	before, after, err := q.Cursors()
	if err != nil {
		return "", nil, err
	}
	type branch struct {
		t     string // time column
		conds []string
		args  []any
	}
	at, ev := branch{t: "started_at"}, branch{t: "happened_at"}
	ai, ei := "attempts_started", "events_time" // MySQL's names (migrations 001, 003, 004)
	switch {
	case q.Task != "" && q.Slot != "":
		ai, ei = "attempts_slot_time", "events_slot_time"
	case q.Task != "":
		ai, ei = "attempts_task_time", "events_task_time"
	case q.Kind != "":
		ei = "events_kind_time"
	}
	add := func(b *branch, cond string, args ...any) {
		b.conds = append(b.conds, cond)
		b.args = append(b.args, args...)
	}
	for _, b := range []*branch{&at, &ev} {
		if q.Task != "" {
			add(b, "task = ?", q.Task)
		}
		if q.Slot != "" {
			add(b, "slot = ?", q.Slot)
		}
	}
	if q.Kind != "" {
		add(&at, "state = ?", string(q.Kind))
		add(&ev, "kind = ?", string(q.Kind))
	}
	atConds, evConds := store.PageConds(before, after, store.PageColumns{Time: at.t, Seq: "id"},
		store.PageColumns{Time: ev.t, Seq: "id"}, func(t time.Time) any { return t.UTC() })
	for _, c := range atConds {
		add(&at, c.SQL, c.Args...)
	}
	for _, c := range evConds {
		add(&ev, c.SQL, c.Args...)
	}
	dir := "DESC"
	if after != nil {
		dir = "ASC" // the page nearest the cursor; reversed after reading
	}
	limit := ""
	if q.Limit > 0 {
		limit = " LIMIT " + strconv.Itoa(q.Limit)
	}
	tail := func(b branch) string {
		w := ""
		if len(b.conds) > 0 {
			w = " WHERE " + strings.Join(b.conds, " AND ")
		}
		return w + " ORDER BY " + b.t + " " + dir + ", id " + dir + limit
	}
	// A Kind reads only the table of its entries (one of the two branches): one kind of event
	// without a task by events_kind_time (migration 004), an attempt state by the time index.
	var parts []string
	var args []any
	if q.ReadsAttempts() {
		parts = append(parts, `(SELECT 0 AS ev, id AS seq, `+attemptCols+` FROM {p}attempts`+s.force(ai)+tail(at)+`)`)
		args = append(args, at.args...)
	}
	if q.ReadsEvents() {
		parts = append(parts, `(SELECT 1 AS ev, id AS seq, task, slot, run_id, attempt, kind AS state, holder, token,
			happened_at AS started_at, NULL AS ended_at, NULL AS exit_code, 0 AS records, '' AS progress, '' AS checkpoint,
			note, NULL AS res_as, NULL AS res_by, NULL AS res_at, NULL AS res_note, 0 AS seats FROM {p}events`+s.force(ei)+tail(ev)+`)`)
		args = append(args, ev.args...)
	}
	query := `SELECT ev, seq, task, slot, run_id, attempt, state, holder, token, started_at, ended_at, exit_code,
		records, progress, checkpoint, note, res_as, res_by, res_at, res_note, seats FROM (
		` + strings.Join(parts, "\n\t\tUNION ALL\n\t\t") + `
		) h ORDER BY started_at ` + dir + `, ev ` + dir + `, seq ` + dir + limit
	return s.Q(query), args, nil
}

// force names the index a MySQL/MariaDB read must use (FORCE INDEX): their planners fall back
// to a table scan and a filesort on a table they think small, or sort a covering index's rows.
// PostgreSQL chooses well from its statistics and has no hints: "" there.
func (s *Store) force(index string) string {
	if s.Flavor == MySQL {
		return " FORCE INDEX (" + index + ")"
	}
	return ""
}

// prefixScanner scans leading columns into first, the rest through Scan.
type prefixScanner struct {
	r     scanner
	first []any
}

func (p prefixScanner) Scan(dest ...any) error {
	return p.r.Scan(append(append([]any{}, p.first...), dest...)...)
}
