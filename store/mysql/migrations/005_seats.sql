-- Seats of a task's lease (once run --limit N, store.AcquireRequest.Limit): one row per seat
-- granted; expired rows are cleared by the next seat granted. The task's lease row stays the token
-- counter and the exclusive grant, and is the live seats' summary (internal/sqlstore/seats.go). A
-- once older than this migration refuses the schema (its version is newer than it knows).
CREATE TABLE IF NOT EXISTS {p}lease_seats (
    task        VARCHAR(200) NOT NULL,
    token       BIGINT       NOT NULL CHECK (token > 0),
    holder      VARCHAR(255) NOT NULL,
    run_id      VARCHAR(255) NOT NULL,
    seats       INT          NOT NULL CHECK (seats >= 2),
    acquired_at DATETIME(6)  NOT NULL,
    expires_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (task, token)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
