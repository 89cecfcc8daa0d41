-- The attempts still running across every task (store.RunningLister, once status's RUNNING): the
-- generated column running_slot is the slot while the attempt runs and NULL after, so the range
-- running_slot IS NOT NULL of this key holds the running attempts alone, in (running_slot, task)
-- order, and a list of them costs the attempts running, not the ledger. UNIQUE (task,
-- running_slot) of 001 cannot serve it: its running rows are spread through the whole index.
-- Added in place (InnoDB builds a secondary index without copying the table); a migration cut short
-- skips an index already there (error 1061, see migrate). A once older than this migration refuses
-- the schema (its version is newer than it knows).
ALTER TABLE {p}attempts ADD KEY attempts_running (running_slot, task);
