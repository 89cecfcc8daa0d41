package sqlstore

import (
	"context"
	"strings"

	"github.com/once-run/once/store"
)

var _ store.SlotsReader = (*Store)(nil)

// Slots returns the state of each of slots of task, in order (store.SlotsReader): one statement
// (SlotsQuery), so one snapshot, whose row for each slot tried is what SlotQuery reads for it.
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
		clear(found)
		rows, err := s.DB.QueryContext(ctx, s.SlotsQuery(len(slots)), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var st store.SlotState
			var reviews int
			last, err := scanAttempt(extra{rows, []any{&st.Failures, &st.Checkpoint, &reviews}})
			if err != nil {
				return err
			}
			st.Last = &last
			st.Waiting = last.Resolution == nil && (last.State == store.Unknown || reviews > 0)
			found[s.slotKey(last.Slot)] = st
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return store.SlotsInOrder(task, slots, found, s.slotKey), nil
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
// row per slot, its last attempt and slotCols, as SlotQuery reads them, each part an index search
// of the slot's attempts or events: it costs the slots asked for, never the task's other history.
// Exported for the backends' plan tests.
func (s *Store) SlotsQuery(n int) string {
	return s.Q(`SELECT ` + qualified("a", attemptCols) + `, ` + s.slotCols("a.task", "a.slot", s.Flavor == Postgres) + `
	FROM {p}attempts a
	WHERE a.task = ? AND a.slot IN (?` + strings.Repeat(", ?", n-1) + `)
		AND a.attempt = (SELECT MAX(m.attempt) FROM {p}attempts m WHERE m.task = a.task AND m.slot = a.slot)`)
}
