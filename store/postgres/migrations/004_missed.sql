-- Missed events (store.Missed: a scheduler's slot that passed unrun outside its catch-up window), and
-- the index a page of one kind of event reads (docs/stores/postgres.md). The CHECK on kind is the one
-- 001 declared on the column, which PostgreSQL named {p}events_kind_check: replaced under the same name.
-- A once older than this migration refuses the schema (its version is newer than it knows).
ALTER TABLE {p}events
    DROP CONSTRAINT IF EXISTS {p}events_kind_check,
    ADD CONSTRAINT {p}events_kind_check CHECK (kind IN ('skipped', 'busy', 'review', 'missed'));
CREATE INDEX IF NOT EXISTS {p}events_kind_time ON {p}events (kind, happened_at, id);
