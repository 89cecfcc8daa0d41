-- History, status and prune at any size: each read is an index search or an ordered index walk that
-- stops at its page (docs/stores/postgres.md). The time indexes get the id as their tie-break (the
-- order of history and of its cursors) and replace the plain ones.
CREATE INDEX IF NOT EXISTS {p}attempts_time ON {p}attempts (started_at, id);
CREATE INDEX IF NOT EXISTS {p}attempts_task_time ON {p}attempts (task, started_at, id);
CREATE INDEX IF NOT EXISTS {p}attempts_slot_time ON {p}attempts (task, slot, started_at, id);
DROP INDEX IF EXISTS {p}attempts_started;
CREATE INDEX IF NOT EXISTS {p}events_time_id ON {p}events (happened_at, id);
CREATE INDEX IF NOT EXISTS {p}events_task_time ON {p}events (task, happened_at, id);
CREATE INDEX IF NOT EXISTS {p}events_slot_time ON {p}events (task, slot, happened_at, id);
DROP INDEX IF EXISTS {p}events_time;

-- A slot's failures since its latest resolution and its latest checkpoint (read on every run): only
-- the attempts that count are in these indexes.
CREATE INDEX IF NOT EXISTS {p}attempts_failures ON {p}attempts (task, slot, attempt) WHERE state IN ('failed', 'unknown');
CREATE INDEX IF NOT EXISTS {p}attempts_resolved ON {p}attempts (task, slot, attempt) WHERE res_as IS NOT NULL;
CREATE INDEX IF NOT EXISTS {p}attempts_checkpoint ON {p}attempts (task, slot, attempt) WHERE checkpoint <> '';

-- Waiting: the slots waiting for a person, since their last attempt ended (internal/sqlstore keeps
-- it in the transaction of every write that can change it), so that status costs the slots
-- waiting, not the ledger.
CREATE TABLE IF NOT EXISTS {p}waiting (
    task        text        NOT NULL,
    slot        text        NOT NULL,
    since       timestamptz NOT NULL,
    PRIMARY KEY (task, slot)
);
CREATE INDEX IF NOT EXISTS {p}waiting_since ON {p}waiting (since, task, slot);
INSERT INTO {p}waiting (task, slot, since)
SELECT a.task, a.slot, COALESCE(a.ended_at, a.started_at) FROM {p}attempts a
WHERE a.state IN ('failed', 'unknown') AND a.res_as IS NULL
AND a.attempt = (SELECT MAX(m.attempt) FROM {p}attempts m WHERE m.task = a.task AND m.slot = a.slot)
AND (a.state = 'unknown' OR EXISTS (SELECT 1 FROM {p}events e
    WHERE e.task = a.task AND e.slot = a.slot AND e.kind = 'review' AND e.attempt = a.attempt))
ON CONFLICT (task, slot) DO NOTHING;
