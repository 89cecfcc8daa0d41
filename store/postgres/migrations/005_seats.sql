-- Seats of a task's lease (once run --limit N, store.AcquireRequest.Limit): one row per seat
-- granted; expired rows are cleared by the next seat granted. The task's lease row stays the token
-- counter and the exclusive grant, and is the live seats' summary (internal/sqlstore/seats.go). A
-- once older than this migration refuses the schema (its version is newer than it knows).
CREATE TABLE IF NOT EXISTS {p}lease_seats (
    task        text        NOT NULL,
    token       bigint      NOT NULL CHECK (token > 0),
    holder      text        NOT NULL,
    run_id      text        NOT NULL,
    seats       integer     NOT NULL CHECK (seats >= 2),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (task, token)
);
