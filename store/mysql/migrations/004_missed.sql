-- Missed events (store.Missed: a scheduler's slot that passed unrun outside its catch-up window), and
-- the index a page of one kind of event reads (docs/stores/mysql.md). A once older than this migration
-- refuses the schema (its version is newer than it knows).
--
-- The CHECK on kind is the one 001 declared on the column. MariaDB keeps it as the column's own
-- constraint (named kind), which only a MODIFY of the column drops; MySQL 8 makes it a table
-- constraint named {p}events_chk_N, which MODIFY keeps and DROP CHECK drops. So one ALTER TABLE
-- redefines the column without it, drops every other CHECK of the table and adds the new one under a
-- name of its own, {p}events_kind (all or nothing). It is built from information_schema and run only
-- while {p}events_kind does not exist: a migration cut short after it runs again and skips it.
SET @once_drop = (SELECT GROUP_CONCAT(CONCAT(', DROP CHECK `', CONSTRAINT_NAME, '`') SEPARATOR '')
    FROM information_schema.TABLE_CONSTRAINTS
    WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = '{p}events' AND CONSTRAINT_TYPE = 'CHECK'
    AND CONSTRAINT_NAME NOT IN ('kind', '{p}events_kind'));
SET @once_sql = IF(EXISTS (SELECT 1 FROM information_schema.TABLE_CONSTRAINTS
        WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = '{p}events' AND CONSTRAINT_NAME = '{p}events_kind'),
    'DO 0',
    CONCAT('ALTER TABLE {p}events MODIFY kind VARCHAR(16) NOT NULL', COALESCE(@once_drop, ''),
        ', ADD CONSTRAINT {p}events_kind CHECK (kind IN (''skipped'', ''busy'', ''review'', ''missed''))'));
PREPARE once_missed FROM @once_sql;
EXECUTE once_missed;
DEALLOCATE PREPARE once_missed;
ALTER TABLE {p}events ADD KEY events_kind_time (kind, happened_at);
