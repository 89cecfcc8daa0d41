-- Keys: business idempotency keys (store.Keys), one row per (scope, key), kept until forgotten.
-- A pending key belongs to a claimant: a run (task, token > 0: gone when the task's lease is no
-- longer live with that token) or a TTL (expires_at: gone once it has passed). Done keys have
-- done_at and, when completed, an opaque result. Scope and key are VARBINARY: the text collations
-- pad spaces or fold case, which would merge distinct keys. claim_id tags the rows one claim
-- statement inserted (MySQL has no RETURNING; see docs/keys.md).
CREATE TABLE IF NOT EXISTS {p}keys (
    scope       VARBINARY(200)  NOT NULL,
    ikey        VARBINARY(1024) NOT NULL,
    state       VARCHAR(8)      NOT NULL CHECK (state IN ('pending', 'done')),
    fingerprint VARBINARY(255)  NOT NULL DEFAULT '',
    task        VARCHAR(200)    NOT NULL DEFAULT '',
    run_id      VARBINARY(255)  NOT NULL DEFAULT '',
    token       BIGINT          NOT NULL DEFAULT 0,
    expires_at  DATETIME(6)     NULL,
    claimed_at  DATETIME(6)     NOT NULL,
    done_at     DATETIME(6)     NULL,
    result      LONGBLOB        NULL,
    claim_id    BINARY(16)      NOT NULL,
    PRIMARY KEY (scope, ikey),
    KEY keys_claimed (scope, claimed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
