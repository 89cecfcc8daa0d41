-- History, status and prune at any size: each read is an index search or an ordered index walk that
-- stops at its page (docs/stores/mysql.md). InnoDB appends the primary key (id) to every secondary
-- index, which is the tie-break of history's order and of its cursors. DDL commits by itself: a
-- migration cut short is run again, and an index that already exists is skipped (see migrate).
ALTER TABLE {p}attempts
    ADD KEY attempts_task_time (task, started_at),
    ADD KEY attempts_slot_time (task, slot, started_at),
    ADD KEY attempts_failures (task, slot, state, attempt),
    ADD KEY attempts_resolved (task, slot, res_as, attempt);
ALTER TABLE {p}events
    ADD KEY events_task_time (task, happened_at),
    ADD KEY events_slot_time (task, slot, happened_at);

-- Waiting: the slots waiting for a person, since their last attempt ended (internal/sqlstore keeps
-- it in the transaction of every write that can change it), so that status costs the slots
-- waiting, not the ledger.
CREATE TABLE IF NOT EXISTS {p}waiting (
    task        VARCHAR(200) NOT NULL,
    slot        VARCHAR(255) NOT NULL,
    since       DATETIME(6)  NOT NULL,
    PRIMARY KEY (task, slot),
    KEY waiting_since (since, task, slot)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT IGNORE INTO {p}waiting (task, slot, since)
SELECT a.task, a.slot, COALESCE(a.ended_at, a.started_at) FROM {p}attempts a
WHERE a.state IN ('failed', 'unknown') AND a.res_as IS NULL
AND a.attempt = (SELECT MAX(m.attempt) FROM {p}attempts m WHERE m.task = a.task AND m.slot = a.slot)
AND (a.state = 'unknown' OR EXISTS (SELECT 1 FROM {p}events e
    WHERE e.task = a.task AND e.slot = a.slot AND e.kind = 'review' AND e.attempt = a.attempt));
