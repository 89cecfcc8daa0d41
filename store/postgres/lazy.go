package postgres

import (
	"context"

	"github.com/once-run/once/store"
)

var _ store.LazyRecorder = (*Store)(nil)

// lazyNow is now() that also turns synchronous_commit off for the rest of its transaction:
// set_config(…, true) lasts until the end of the transaction (a statement's implicit one, or an
// explicit one), whose commit reads it. The scalar subquery makes the server evaluate it (an
// unreferenced CTE would not be).
const lazyNow = `(SELECT now() WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL)`

// lazyEventSQL is Record's INSERT whose own transaction commits with synchronous_commit off; its
// time is lazyNow's now(), the event's time, as Record's is.
const lazyEventSQL = `INSERT INTO {p}events (task, slot, kind, run_id, holder, token, attempt, note, happened_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ` + lazyNow + `)`

// RecordLazy keeps an event like Record, in one round trip, without waiting for the server's WAL
// flush (store.LazyRecorder): a server crash soon after may lose it; the WAL writer flushes it within
// a few wal_writer_delay, and any later durable commit flushes it with its own.
// A review event is recorded by Record: it may make the slot wait for a person, which is not
// written lazily.
func (s *Store) RecordLazy(ctx context.Context, e store.Event) error {
	if err := store.CheckEvent(e); err != nil {
		return err
	}
	if e.Kind == store.Review {
		return s.Record(ctx, e)
	}
	q := s.Q(lazyEventSQL)
	return s.Do(ctx, func(ctx context.Context) error {
		_, err := s.DB.ExecContext(ctx, q, e.Task, e.Slot, string(e.Kind), e.RunID, e.Holder, e.Token, e.Attempt, e.Note)
		return err
	})
}
