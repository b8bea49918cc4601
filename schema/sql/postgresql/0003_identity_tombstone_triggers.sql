-- Tombstone triggers fire only for identity tombstones (conversation, channel, bot). A bodies
-- step fences thousands of events and provider ids per batch; a WHEN clause is evaluated by
-- the executor without entering PL/pgSQL or queueing an AFTER event for those rows.
DROP TRIGGER pk_tombstones_before_insert ON tombstones;
-- ;;
CREATE TRIGGER pk_tombstones_before_insert BEFORE INSERT ON tombstones
FOR EACH ROW WHEN (NEW.kind IN ('conversation', 'channel', 'bot'))
EXECUTE FUNCTION pk_tombstones_before_insert();
-- ;;
DROP TRIGGER pk_tombstones_after_insert ON tombstones;
-- ;;
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
FOR EACH ROW WHEN (NEW.kind IN ('conversation', 'channel', 'bot'))
EXECUTE FUNCTION pk_tombstones_after_insert();
