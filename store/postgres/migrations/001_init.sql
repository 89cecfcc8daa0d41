-- Leases: one row per task, kept forever so the fencing token only ever grows. A released lease has
-- holder '' and an expiry in the past.
CREATE TABLE IF NOT EXISTS {p}leases (
    task        text        PRIMARY KEY,
    holder      text        NOT NULL,
    run_id      text        NOT NULL,
    token       bigint      NOT NULL CHECK (token > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Attempts: one row per try at a (task, slot).
CREATE TABLE IF NOT EXISTS {p}attempts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task        text        NOT NULL,
    slot        text        NOT NULL,
    attempt     integer     NOT NULL CHECK (attempt > 0),
    run_id      text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'unknown')),
    holder      text        NOT NULL,
    token       bigint      NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    exit_code   integer,
    records     bigint      NOT NULL DEFAULT 0,
    progress    text        NOT NULL DEFAULT '',
    checkpoint  text        NOT NULL DEFAULT '',
    note        text        NOT NULL DEFAULT '',
    res_as      text        CHECK (res_as IN ('succeeded', 'failed')),
    res_by      text,
    res_at      timestamptz,
    res_note    text,
    CONSTRAINT {p}attempts_number UNIQUE (task, slot, attempt),
    CONSTRAINT {p}attempts_resolvable CHECK (res_as IS NULL OR state IN ('failed', 'unknown')),
    CONSTRAINT {p}attempts_ended CHECK (state NOT IN ('succeeded', 'failed') OR ended_at IS NOT NULL)
);

-- At most one running attempt per slot, whatever the writers do.
CREATE UNIQUE INDEX IF NOT EXISTS {p}attempts_one_running ON {p}attempts (task, slot) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS {p}attempts_run ON {p}attempts (run_id);
CREATE INDEX IF NOT EXISTS {p}attempts_started ON {p}attempts (started_at);

-- Events: skipped, busy and review decisions.
CREATE TABLE IF NOT EXISTS {p}events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task        text        NOT NULL,
    slot        text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('skipped', 'busy', 'review')),
    run_id      text        NOT NULL,
    holder      text        NOT NULL,
    token       bigint      NOT NULL,
    attempt     integer     NOT NULL,
    note        text        NOT NULL,
    happened_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS {p}events_slot ON {p}events (task, slot, kind, attempt);
CREATE INDEX IF NOT EXISTS {p}events_time ON {p}events (happened_at);
