-- Keys: business idempotency keys (store.Keys), one row per (scope, key), kept until forgotten.
-- A pending key belongs to a claimant: a run (task, token > 0: gone when the task's lease is no
-- longer live with that token) or a TTL (expires_at: gone once it has passed). Done keys have
-- done_at and, when completed, an opaque result.
CREATE TABLE IF NOT EXISTS {p}keys (
    scope       text        NOT NULL,
    ikey        text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('pending', 'done')),
    fingerprint text        NOT NULL DEFAULT '',
    task        text        NOT NULL DEFAULT '',
    run_id      text        NOT NULL DEFAULT '',
    token       bigint      NOT NULL DEFAULT 0,
    expires_at  timestamptz,
    claimed_at  timestamptz NOT NULL,
    done_at     timestamptz,
    result      bytea,
    PRIMARY KEY (scope, ikey),
    CONSTRAINT {p}keys_done CHECK (state <> 'done' OR done_at IS NOT NULL)
);
CREATE INDEX IF NOT EXISTS {p}keys_claimed ON {p}keys (scope, claimed_at);
