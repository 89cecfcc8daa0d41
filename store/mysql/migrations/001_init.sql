-- Leases: one row per task, kept forever so the fencing token only ever grows. A released lease has
-- holder '' and an expiry in the past. Times are UTC (the session time zone is +00:00).
CREATE TABLE IF NOT EXISTS {p}leases (
    task        VARCHAR(200) NOT NULL PRIMARY KEY,
    holder      VARCHAR(255) NOT NULL,
    run_id      VARCHAR(255) NOT NULL,
    token       BIGINT       NOT NULL CHECK (token > 0),
    acquired_at DATETIME(6)  NOT NULL,
    expires_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Attempts: one row per try at a (task, slot).
CREATE TABLE IF NOT EXISTS {p}attempts (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task        VARCHAR(200) NOT NULL,
    slot        VARCHAR(255) NOT NULL,
    attempt     INT          NOT NULL CHECK (attempt > 0),
    run_id      VARCHAR(255) NOT NULL,
    state       VARCHAR(16)  NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'unknown')),
    holder      VARCHAR(255) NOT NULL,
    token       BIGINT       NOT NULL,
    started_at  DATETIME(6)  NOT NULL,
    ended_at    DATETIME(6)  NULL,
    exit_code   INT          NULL,
    records     BIGINT       NOT NULL DEFAULT 0,
    progress    VARCHAR(255) NOT NULL DEFAULT '',
    checkpoint  TEXT         NOT NULL,
    note        TEXT         NOT NULL,
    res_as      VARCHAR(16)  NULL CHECK (res_as IN ('succeeded', 'failed')),
    res_by      VARCHAR(255) NULL,
    res_at      DATETIME(6)  NULL,
    res_note    TEXT         NULL,
    -- The slot while the attempt runs, NULL otherwise: NULLs never collide in a UNIQUE index, so
    -- UNIQUE (task, running_slot) allows at most one running attempt per slot.
    running_slot VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'running', slot, NULL)) STORED,
    UNIQUE KEY attempts_number (task, slot, attempt),
    UNIQUE KEY attempts_one_running (task, running_slot),
    KEY attempts_run (run_id),
    KEY attempts_started (started_at),
    CONSTRAINT {p}attempts_resolvable CHECK (res_as IS NULL OR state IN ('failed', 'unknown')),
    CONSTRAINT {p}attempts_ended CHECK (state NOT IN ('succeeded', 'failed') OR ended_at IS NOT NULL)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Events: skipped, busy and review decisions.
CREATE TABLE IF NOT EXISTS {p}events (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task        VARCHAR(200) NOT NULL,
    slot        VARCHAR(255) NOT NULL,
    kind        VARCHAR(16)  NOT NULL CHECK (kind IN ('skipped', 'busy', 'review')),
    run_id      VARCHAR(255) NOT NULL,
    holder      VARCHAR(255) NOT NULL,
    token       BIGINT       NOT NULL,
    attempt     INT          NOT NULL,
    note        TEXT         NOT NULL,
    happened_at DATETIME(6)  NOT NULL,
    KEY events_slot (task, slot, kind, attempt),
    KEY events_time (happened_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
