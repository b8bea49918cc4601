-- The purge ledger's triggers, SQLite. Statements are separated by lines reading "-- ;;".
-- Three revisions create them from this one file: 0001 first, then 0008 and 0009 again, each
-- right after rebuilding purge_ledger to widen its kind CHECK (a rebuild drops the table's
-- triggers). Each trigger is dropped if it exists first, so the file runs in all three.
-- Those revisions install it as it stands: never edit it; a change to these triggers is a new
-- revision with its own file (schema/sql/sqlite/current.sql shows them as they stand).
-- A row must extend the chain at ledger_head, which then moves to it; a row is never changed
-- or deleted (0011 adds pk_purge_ledger_no_replace: nor written over by REPLACE).
DROP TRIGGER IF EXISTS pk_purge_ledger_no_update;
-- ;;
CREATE TRIGGER pk_purge_ledger_no_update BEFORE UPDATE ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the purge ledger is append-only');
END;
-- ;;
DROP TRIGGER IF EXISTS pk_purge_ledger_no_delete;
-- ;;
CREATE TRIGGER pk_purge_ledger_no_delete BEFORE DELETE ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the purge ledger is append-only');
END;
-- ;;
DROP TRIGGER IF EXISTS pk_purge_ledger_chain;
-- ;;
CREATE TRIGGER pk_purge_ledger_chain BEFORE INSERT ON purge_ledger
BEGIN
    -- The chain is enforced here too: a row must extend the head, which then moves to it.
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the row does not extend the ledger head')
     WHERE NOT EXISTS (SELECT 1 FROM ledger_head WHERE id = 1 AND seq + 1 = NEW.seq AND head_hash = NEW.prev_hash);
END;
-- ;;
DROP TRIGGER IF EXISTS pk_purge_ledger_moves_head;
-- ;;
CREATE TRIGGER pk_purge_ledger_moves_head AFTER INSERT ON purge_ledger
BEGIN
    UPDATE ledger_head SET seq = NEW.seq, head_hash = NEW.row_hash WHERE id = 1;
END;
