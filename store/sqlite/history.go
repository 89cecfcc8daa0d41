package sqlite

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// upgrade3 adds what history, status and prune read, so that their cost is the page or the slots
// waiting, not the ledger: indexes for history by task and by slot in time order, partial indexes
// for a slot's failures, resolution and checkpoint (Slot, on every run), and the waiting table.
//
// The waiting table lists the slots that wait for a person, by the time their last attempt ended.
// Triggers keep it in the same transaction as every write that can change a slot's waiting
// (a new attempt, a new state or resolution, a review event), by recomputing the slot's row
// from the ledger: no code path has to remember it, and a process of an older once cannot open a
// version 3 file. Deletes (prune) never make a slot wait, so they have no trigger; a row left for
// a slot that no longer waits is skipped by Waiting and removed by Prune.
func (s *Store) upgrade3() []string {
	t := s.t
	recompute := func(name, event string) string {
		return `CREATE TRIGGER ` + name + ` ` + event + ` BEGIN
			DELETE FROM ` + t.waiting + ` WHERE task = NEW.task AND slot = NEW.slot;
			INSERT INTO ` + t.waiting + ` (task, slot, since) ` + s.waitingSelect("NEW.task", "NEW.slot") + `;
		END`
	}
	return []string{
		`CREATE INDEX ` + t.attempts + `_task_started ON ` + t.attempts + ` (task, started_at)`,
		`CREATE INDEX ` + t.attempts + `_slot_started ON ` + t.attempts + ` (task, slot, started_at)`,
		`CREATE INDEX ` + t.attempts + `_failures ON ` + t.attempts + ` (task, slot, number) WHERE state IN ('failed', 'unknown')`,
		`CREATE INDEX ` + t.attempts + `_resolved ON ` + t.attempts + ` (task, slot, number) WHERE resolved_as IS NOT NULL`,
		`CREATE INDEX ` + t.attempts + `_checkpoint ON ` + t.attempts + ` (task, slot, number) WHERE checkpoint <> ''`,
		`CREATE INDEX ` + t.events + `_task_at ON ` + t.events + ` (task, at)`,
		`CREATE INDEX ` + t.events + `_slot_at ON ` + t.events + ` (task, slot, at)`,
		`CREATE TABLE ` + t.waiting + ` (
			task TEXT NOT NULL,
			slot TEXT NOT NULL,
			since INTEGER NOT NULL,
			PRIMARY KEY (task, slot)
		) STRICT, WITHOUT ROWID`,
		`CREATE INDEX ` + t.waiting + `_since ON ` + t.waiting + ` (since, task, slot)`,
		recompute(t.waiting+`_on_begin`, `AFTER INSERT ON `+t.attempts),
		recompute(t.waiting+`_on_change`, `AFTER UPDATE OF state, resolved_as ON `+t.attempts),
		recompute(t.waiting+`_on_review`, `AFTER INSERT ON `+t.events+` WHEN NEW.kind = 'review'`),
		// The slots waiting in the ledger as it is.
		`INSERT INTO ` + t.waiting + ` (task, slot, since) ` + s.waitingSelect("a.task", "a.slot") +
			` AND a.state IN ('failed', 'unknown')`,
	}
}

// waitingSelect selects the waiting row of the slot (task, slot), SQL expressions: the slot's last
// attempt when it is unresolved and unknown, or has a review event (see store.SlotState.Waiting).
func (s *Store) waitingSelect(task, slot string) string {
	t := s.t
	return `SELECT a.task, a.slot, coalesce(a.ended_at, a.started_at) AS since FROM ` + t.attempts + ` a
		WHERE a.task = ` + task + ` AND a.slot = ` + slot + ` AND a.resolved_as IS NULL
		AND a.number = (SELECT max(m.number) FROM ` + t.attempts + ` m WHERE m.task = ` + task + ` AND m.slot = ` + slot + `)
		AND (a.state = 'unknown' OR EXISTS (SELECT 1 FROM ` + t.events + ` e
			WHERE e.task = ` + task + ` AND e.slot = ` + slot + ` AND e.kind = 'review' AND e.attempt = a.number))`
}

// Waiting lists the slots waiting for a person, oldest first (store.Ledger): from the waiting
// table, so it costs the slots waiting, not the ledger.
func (s *Store) Waiting(ctx context.Context) ([]store.SlotState, error) {
	var out []store.SlotState
	err := s.read(ctx, func(tx *sql.Tx) error {
		out = nil
		keys, err := s.waitingKeys(ctx, tx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			st, err := s.slotState(ctx, tx, k[0], k[1])
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

func (s *Store) waitingKeys(ctx context.Context, q querier) ([][2]string, error) {
	rows, err := q.QueryContext(ctx, waitingQuery(s.t))
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

// lastQuery reads a slot's last attempt; slotQuery its failures since the latest resolution, its
// latest checkpoint and whether a review event is about attempt ?3. Each is an index search (the
// partial indexes of upgrade3), whatever the number of attempts in the slot.
func lastQuery(t tables) string {
	return `SELECT ` + attemptCols + ` FROM ` + t.attempts + ` WHERE task = ? AND slot = ? ORDER BY number DESC LIMIT 1`
}

func slotQuery(t tables) string { return `SELECT ` + slotCols(t, "?1", "?2", "?3") }

// slotCols are slotQuery's columns for the slot task, slot and the attempt number, given as SQL
// expressions: parameters in slotQuery, the columns of each slot's last attempt in slotsQuery
// (one rule for both, which storetest's Slots case holds to each other). The failures are read
// from their partial index by name: with a slot's columns, and statistics of a slot of a million
// succeeded attempts, SQLite chose the primary key's range after the resolution instead, and read
// every attempt of the slot for none (0.4 s).
func slotCols(t tables, task, slot, number string) string {
	return `(SELECT count(*) FROM (SELECT 1 FROM ` + t.attempts + ` f INDEXED BY ` + t.attempts + `_failures WHERE f.task = ` + task + ` AND f.slot = ` + slot + ` AND f.state IN ('failed', 'unknown')
			AND f.number > coalesce((SELECT max(r.number) FROM ` + t.attempts + ` r WHERE r.task = ` + task + ` AND r.slot = ` + slot + ` AND r.resolved_as IS NOT NULL), 0)
			LIMIT ` + strconv.Itoa(store.MaxFailures) + `)),
		coalesce((SELECT c.checkpoint FROM ` + t.attempts + ` c WHERE c.task = ` + task + ` AND c.slot = ` + slot + ` AND c.checkpoint <> '' ORDER BY c.number DESC LIMIT 1), ''),
		EXISTS (SELECT 1 FROM ` + t.events + ` e WHERE e.task = ` + task + ` AND e.slot = ` + slot + ` AND e.kind = 'review' AND e.attempt = ` + number + `)`
}

func waitingQuery(t tables) string {
	return `SELECT task, slot FROM ` + t.waiting + ` ORDER BY since, task, slot`
}

// historyPage is the page size store.EachHistory asks for.
const historyPage = 1000

// HistoryPageSize makes the store a store.HistoryPager: a page of history is read from indexes.
func (s *Store) HistoryPageSize() int { return historyPage }

var _ store.HistoryPager = (*Store)(nil)

// History returns attempts and events in history order, filtered by q (store.Ledger).
//
// Each table is read newest first from an index on (task, slot, time), (task, time), (kind,
// time) or (time) as the filter allows, and the two are merged up to the limit: a page costs
// the page. The cursor is the entry's time, kind and rowid.
func (s *Store) History(ctx context.Context, q store.HistoryQuery) ([]store.Entry, error) {
	query, args, err := s.historyQuery(q)
	if err != nil {
		return nil, err
	}
	if err := s.still(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []store.Entry
	for rows.Next() {
		var ev, seq int64
		a, err := scanAttempt(rowWith{rows, []any{&ev, &seq}})
		if err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, store.Entry{Attempt: a, Cursor: store.CursorOf(a.StartedAt, ev == 1, "", seq).String()})
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr(err)
	}
	if q.After != "" { // read oldest first from the cursor: list newest first
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// historyQuery builds History's statement: the filter and the cursors as plain conditions on
// the indexed columns, so the planner sees them (no "? = ” OR task = ?").
func (s *Store) historyQuery(q store.HistoryQuery) (string, []any, error) {
	before, after, err := q.Cursors()
	if err != nil {
		return "", nil, err
	}
	type branch struct {
		conds []string
		args  []any
	}
	var at, ev branch // attempts (time column started_at, seq rowid), events (at, id)
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
	atConds, evConds := store.PageConds(before, after, store.PageColumns{Time: "started_at", Seq: "rowid"},
		store.PageColumns{Time: "at", Seq: "id"}, func(t time.Time) any { return t.UnixMicro() })
	for _, c := range atConds {
		add(&at, c.SQL, c.Args...)
	}
	for _, c := range evConds {
		add(&ev, c.SQL, c.Args...)
	}
	where := func(b branch) string {
		if len(b.conds) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(b.conds, " AND ")
	}
	dir := "DESC"
	if after != nil {
		dir = "ASC" // the page nearest the cursor; reversed after reading
	}
	limit := q.Limit
	if limit <= 0 {
		limit = -1
	}
	// Each table is read through the index named (INDEXED BY: the statement fails rather than
	// fall back to a scan), in time order; the merge stops at the limit and sorts only entries of
	// the same instant. A Kind reads only the table of its entries: one kind of event without a
	// task, by events_kind_at (kind, at); an attempt state, by the time index, past the attempts
	// of other states.
	ai, ei := s.t.attempts+"_started", s.t.events+"_at"
	switch {
	case q.Slot != "" && q.Task != "":
		ai, ei = s.t.attempts+"_slot_started", s.t.events+"_slot_at"
	case q.Task != "":
		ai, ei = s.t.attempts+"_task_started", s.t.events+"_task_at"
	case q.Kind != "":
		ei = s.t.events + "_kind_at"
	}
	var parts []string
	var args []any
	if q.ReadsAttempts() {
		parts = append(parts, `SELECT `+strings.Join(strings.Fields(attemptCols), " ")+`, 0 AS ev, rowid AS seq FROM `+s.t.attempts+` INDEXED BY `+ai+where(at))
		args = append(args, at.args...)
	}
	if q.ReadsEvents() {
		parts = append(parts, `SELECT task, slot, attempt, run_id, kind, holder, token, at AS started_at, NULL, NULL, 0, '', '', note,
			NULL, NULL, NULL, NULL, 0, 1 AS ev, id AS seq FROM `+s.t.events+` INDEXED BY `+ei+where(ev))
		args = append(args, ev.args...)
	}
	query := strings.Join(parts, " UNION ALL ") + ` ORDER BY started_at ` + dir + `, ev ` + dir + `, seq ` + dir + ` LIMIT ?`
	return query, append(args, limit), nil
}
