-- The ledger head moves once per statement, not once per row (issue 12). Within one
-- transaction every UPDATE of the one-row ledger_head leaves a dead version that the next
-- lookup of the head walks past, so a merge appending n rows row by row cost O(n^2). Now:
-- - a row extends the row before it (seq - 1, or the genesis for seq 1), checked per row by
--   its primary key; a multi-row INSERT sees the rows it inserted before;
-- - once per statement, the head moves from the row before the statement's first to its
--   last, and the statement's rows must be contiguous.
CREATE OR REPLACE FUNCTION pk_purge_ledger_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_hash text;
BEGIN
    IF NEW.seq = 1 THEN
        before_hash := repeat('0', 64);
    ELSE
        SELECT row_hash INTO before_hash FROM purge_ledger WHERE seq = NEW.seq - 1;
    END IF;
    IF before_hash IS NULL OR NEW.prev_hash <> before_hash THEN
        RAISE EXCEPTION 'purgekeeper:ledger_append_only: row % does not extend the ledger', NEW.seq;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE FUNCTION pk_purge_ledger_move_head() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    first_seq bigint;
    last_seq bigint;
    rows_in bigint;
    last_hash text;
BEGIN
    SELECT min(seq), max(seq), count(*) INTO first_seq, last_seq, rows_in FROM new_rows;
    IF rows_in = 0 THEN
        RETURN NULL;
    END IF;
    SELECT row_hash INTO last_hash FROM new_rows WHERE seq = last_seq;
    UPDATE ledger_head SET seq = last_seq, head_hash = last_hash WHERE id = 1 AND seq = first_seq - 1;
    IF NOT FOUND OR last_seq - first_seq + 1 <> rows_in THEN
        RAISE EXCEPTION 'purgekeeper:ledger_append_only: rows % to % do not extend the ledger head', first_seq, last_seq;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_move_head AFTER INSERT ON purge_ledger
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_purge_ledger_move_head();
