-- A slot's latest checkpoint (read on every run, and by prune): MySQL and MariaDB have no partial
-- index, so a generated column says whether an attempt has one, and attempts_checkpoint finds the
-- slot's latest such attempt in one search, where a read back from the slot's last attempt cost
-- every attempt of a slot with none (docs/stores/mysql.md). A once older than this migration refuses
-- the schema (its version is newer than it knows).
--
-- Additive and online: the VIRTUAL column is stored nowhere but the index (no rewrite of the table:
-- ALGORITHM=INSTANT on MariaDB 10.11; MySQL 8 adds a virtual column in place), and the index is
-- built while writes go on (4.5 s for 2 million attempts on MariaDB 10.11). Two statements, since
-- MariaDB builds an index online only in an ALTER TABLE that adds no virtual column. The migration
-- runner tolerates a column or an index already there (errors 1060, 1061): a migration cut short
-- runs again.
ALTER TABLE {p}attempts ADD COLUMN has_checkpoint TINYINT GENERATED ALWAYS AS (checkpoint <> '') VIRTUAL;
ALTER TABLE {p}attempts ADD KEY attempts_checkpoint (task, slot, has_checkpoint, attempt);
