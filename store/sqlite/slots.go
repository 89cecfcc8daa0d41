package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/once-run/once/store"
)

var _ store.SlotsReader = (*Store)(nil)

// Slots returns the state of each of slots of task, in order (store.SlotsReader): one statement
// in one read transaction, the last attempt of each slot found by its primary key and the rest
// as slotQuery reads it, so that a backfill's dry run costs a read per block of slots.
func (s *Store) Slots(ctx context.Context, task string, slots []string) ([]store.SlotState, error) {
	if err := store.CheckSlotsRead(slots); err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return []store.SlotState{}, nil
	}
	found := make(map[string]store.SlotState, len(slots))
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, slotsQuery(s.t, len(slots)), store.SlotsArgs(task, slots)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			st, err := scanSlotState(rows)
			if err != nil {
				return err
			}
			found[st.Slot] = st
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return store.SlotsInOrder(task, slots, found, nil), nil
}

// scanSlotState reads a row of slotsQuery: the last attempt, then slotQuery's columns.
func scanSlotState(rows *sql.Rows) (store.SlotState, error) {
	var failures int
	var checkpoint string
	var review bool
	a, err := scanAttempt(rowWith{rows, []any{&failures, &checkpoint, &review}})
	if err != nil {
		return store.SlotState{}, err
	}
	return store.SlotState{Task: a.Task, Slot: a.Slot, Last: &a, Failures: failures, Checkpoint: checkpoint,
		Waiting: a.Resolution == nil && (a.State == store.Unknown || review)}, nil
}

// slotsQuery reads the slots tried among n of a task (the parameters: the task, then the n slots):
// a row per slot, its last attempt and slotQuery's failures, checkpoint and review, each subquery
// bounded by the index of its slot. The slots asked for drive the read: last_asked, materialised (SQLite
// would otherwise turn the join with the VALUES into a.slot IN (…) and the number searched for
// into a filter), holds each slot's last number, found by a search of the primary key, and each
// last attempt is then read by the whole key. A filter of the slots' attempts by the last number
// (a.slot IN (…) AND a.number = (…)) read every attempt of each slot. The parameters are
// anonymous: the driver looks each numbered one's name up, a cost that grows with their number.
func slotsQuery(t tables, n int) string {
	var in strings.Builder
	for i := range n {
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString("(?)")
	}
	return `WITH last_asked (task, slot, last) AS MATERIALIZED (SELECT task_asked.task, slots_asked.column1,
			(SELECT m.number FROM ` + t.attempts + ` m WHERE m.task = task_asked.task AND m.slot = slots_asked.column1 ORDER BY m.number DESC LIMIT 1)
		FROM (SELECT ? AS task) task_asked CROSS JOIN (VALUES ` + in.String() + `) slots_asked)
	SELECT ` + qualified("a", attemptCols) + `, ` + slotCols(t, "a.task", "a.slot", "a.number") + `
	FROM last_asked CROSS JOIN ` + t.attempts + ` a
	WHERE a.task = last_asked.task AND a.slot = last_asked.slot AND a.number = last_asked.last`
}

// qualified is cols (a list of column names) each read from table alias t.
func qualified(t, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = t + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
