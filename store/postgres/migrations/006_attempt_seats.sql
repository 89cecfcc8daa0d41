-- The Limit of the seat an attempt runs under (store.Attempt.Limit, once run --limit N), 0 under
-- the exclusive lease: attempts of seats may run at the same time, which once doctor and the
-- timeline then do not call an overlap. A constant default: no table rewrite.
ALTER TABLE {p}attempts ADD COLUMN IF NOT EXISTS seats integer NOT NULL DEFAULT 0;
