-- Tombstone triggers fire only for identity tombstones (conversation, channel, bot): a bodies
-- step fences thousands of events and provider ids per batch.
DROP TRIGGER pk_tombstones_after_insert;
-- ;;
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
WHEN NEW.kind IN ('conversation', 'channel', 'bot')
BEGIN
    -- The tombstone is the source of truth; the state columns follow it.
    UPDATE conversations SET state = 'purged', version = version + 1
     WHERE NEW.kind = 'conversation' AND id = NEW.id AND state <> 'purged';
    UPDATE conversations SET state = 'deleted', version = version + 1
     WHERE NEW.kind = 'channel' AND id = NEW.id AND state = 'active';
    UPDATE bots SET state = 'deleted', deleted_at = strftime('%Y-%m-%d %H:%M:%f000', 'now')
     WHERE NEW.kind = 'bot' AND id = NEW.id AND state = 'active';
END;
