-- The Limit of the seat an attempt runs under (store.Attempt.Limit, once run --limit N), 0 under
-- the exclusive lease: attempts of seats may run at the same time, which once doctor and the
-- timeline then do not call an overlap. Added at the end with a constant default (instant on
-- MariaDB 10.3 and later). Plain ADD COLUMN, which MySQL 8 accepts too; the migration runner
-- tolerates a column already there (error 1060).
ALTER TABLE {p}attempts ADD COLUMN seats INT NOT NULL DEFAULT 0;
