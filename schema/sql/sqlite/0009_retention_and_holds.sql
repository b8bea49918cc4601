-- Retention and legal holds (0009); the rules are those of
-- schema/sql/postgresql/0009_retention_and_holds.sql. SQLite serialises writers (BEGIN
-- IMMEDIATE): a writer's checks read the latest state.
--
-- A fence expires only placements made before its run's acceptance (placed_before). The
-- library writes a placement's created_at to the millisecond; the column's default (a raw
-- writer's) has whole seconds, and such a placement made in the acceptance's second counts as
-- before it. A placement is live while its conversation is not purged and no retention fence
-- expires it: the view pk_live_placements says so once, and every trigger below that decides whether
-- an event is live asks it, where 0008 spelled out "a placement in a conversation that is not
-- purged". An event X is live while it has no event tombstone, no author erasure covers it,
-- and EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = X).
-- The migration rebuilt purge_ledger (its kind CHECK takes the new kinds) before this file
-- ran, which dropped the ledger's triggers: it created them again from
-- purge_ledger_triggers.sql, as 0001 did, just before running this file.
CREATE VIEW pk_live_placements AS
SELECT p.event_id, p.conversation_id
  FROM placements p JOIN conversations c ON c.id = p.conversation_id JOIN events e ON e.id = p.event_id
 WHERE c.state <> 'purged'
   AND NOT EXISTS (SELECT 1 FROM retention_fences f
                    WHERE f.cutoff > e.occurred_at AND f.placed_before > p.created_at
                      AND (f.conversation_id IS NULL OR f.conversation_id = p.conversation_id)
                      AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = f.purge_id
                                       AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
                      AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = f.purge_id
                                       AND x.kind = 'author' AND x.subject_id = e.author));
-- ;;
DROP TRIGGER pk_events_before_content_update;
-- ;;
CREATE TRIGGER pk_events_before_content_update BEFORE UPDATE ON events
WHEN NOT (NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at AND NEW.created_at = OLD.created_at)
BEGIN
    -- An erased event cannot leave its window, and no event moves into one (nor, by a change
    -- of author, to an author who is closed).
    SELECT RAISE(ABORT, 'purgekeeper:author_erased: the event is erased; its author and time never change')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = OLD.author AND a.window_end > OLD.occurred_at);
    SELECT RAISE(ABORT, 'purgekeeper:author_erased: the event would move into an erasure of its author')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND EXISTS (SELECT 1 FROM author_erasures a
                    WHERE a.author = NEW.author
                      AND (a.window_end > NEW.occurred_at OR (a.close_author AND NEW.author IS NOT OLD.author)));
    -- A retention run's window and exemptions are decided by an event's time and author.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event''s author and time never change while a retention policy stands or a retention run is under way')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND (EXISTS (SELECT 1 FROM retention_policies WHERE ended_by IS NULL) OR EXISTS (SELECT 1 FROM retention_fences));
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.id)
        OR EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = OLD.author AND a.window_end > OLD.occurred_at)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.id);
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = OLD.id AND c.state = 'deleted');
END;
-- ;;
DROP TRIGGER pk_placements_before_insert;
-- ;;
CREATE TRIGGER pk_placements_before_insert BEFORE INSERT ON placements
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id)));
    -- Unless a hold covers it, never past the cutoff (now - max_age) of the conversation's own
    -- standing policy, else the global one: a backfill cannot bring expired content back.
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event occurred before the cutoff of the retention policy that governs this conversation; a backfill cannot bring expired content back')
     WHERE EXISTS (
        SELECT 1 FROM events e JOIN retention_policies rp
            ON rp.policy_id = (SELECT g.policy_id FROM retention_policies g
                                WHERE g.ended_by IS NULL AND (g.conversation_id = NEW.conversation_id OR g.conversation_id IS NULL)
                                ORDER BY g.conversation_id IS NULL LIMIT 1)
         WHERE e.id = NEW.event_id
           AND e.occurred_at < strftime('%Y-%m-%d %H:%M:%f000', 'now', '-' || rp.max_age_seconds || ' seconds')
           AND NOT EXISTS (SELECT 1 FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
                            WHERE h.released_by IS NULL
                              AND ((s.kind = 'conversation' AND s.subject_id = NEW.conversation_id)
                                   OR (s.kind = 'author' AND s.subject_id = e.author))));
END;
-- ;;
DROP TRIGGER pk_placements_before_delete;
-- ;;
CREATE TRIGGER pk_placements_before_delete BEFORE DELETE ON placements
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
 AND NOT EXISTS (SELECT 1 FROM pk_live_placements
                  WHERE event_id = OLD.event_id AND conversation_id <> OLD.conversation_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event was placed in a purged conversation; only the purge''s cleanup removes that placement')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the event keeps its last live placement; place it elsewhere first, or purge it');
END;
-- ;;
DROP TRIGGER pk_runs_before_update;
-- ;;
CREATE TRIGGER pk_runs_before_update BEFORE UPDATE ON runs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a run id, conversation and bot never change') WHERE NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id OR NEW.bot_id <> OLD.bot_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the run is already terminal') WHERE OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned') AND NEW.status <> OLD.status;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE NOT (NEW.output IS NULL AND (NEW.status = OLD.status OR NEW.status = 'abandoned'))
       AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the run admitted an event that is purged or no longer live; its output stays NULL')
     WHERE NEW.output IS NOT NULL
       AND EXISTS (SELECT 1 FROM admissions ad WHERE ad.run_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ad.event_id)
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = ad.event_id)
                           OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = ad.event_id)));
END;
-- ;;
DROP TRIGGER pk_derivatives_before_content_update;
-- ;;
CREATE TRIGGER pk_derivatives_before_content_update BEFORE UPDATE ON derivatives
WHEN NOT (NEW.payload IS NULL AND NEW.kind = OLD.kind)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative comes from an event that is purged or no longer live; its payload stays NULL')
     WHERE NEW.payload IS NOT NULL
       AND EXISTS (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = s.event_id)
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = s.event_id)
                           OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = s.event_id)));
END;
-- ;;
DROP TRIGGER pk_admissions_before_insert;
-- ;;
CREATE TRIGGER pk_admissions_before_insert BEFORE INSERT ON admissions
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id) AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE (SELECT bot_id FROM runs WHERE id = NEW.run_id) IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = (SELECT bot_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM bots WHERE id = (SELECT bot_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted'));
END;
-- ;;
DROP TRIGGER pk_admissions_before_delete;
-- ;;
CREATE TRIGGER pk_admissions_before_delete BEFORE DELETE ON admissions
WHEN NOT EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
                  WHERE r.id = OLD.run_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the admission stays: its event is purged or no longer live');
END;
-- ;;
DROP TRIGGER pk_derivative_sources_before_insert;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_insert BEFORE INSERT ON derivative_sources
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id))
        OR EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id) AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id) AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
END;
-- ;;
DROP TRIGGER pk_derivative_sources_before_delete;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_delete BEFORE DELETE ON derivative_sources
WHEN NOT EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                  WHERE d.id = OLD.derivative_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative source stays: its event is purged or no longer live');
END;
-- ;;
DROP TRIGGER pk_attachments_before_insert;
-- ;;
CREATE TRIGGER pk_attachments_before_insert BEFORE INSERT ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = NEW.event_id AND c.state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:blob_not_present: the blob is being deleted or is deleted')
     WHERE EXISTS (SELECT 1 FROM blobs WHERE id = NEW.blob_id AND state <> 'present');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the blob holds purged content; it is bound to nothing new')
     WHERE EXISTS (SELECT 1 FROM attachments WHERE blob_id = NEW.blob_id)
       AND NOT EXISTS (SELECT 1 FROM attachments b WHERE b.blob_id = NEW.blob_id
                          AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = b.event_id)
                          AND NOT EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                           WHERE e.id = b.event_id)
                          AND EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = b.event_id));
END;
-- ;;
DROP TRIGGER pk_attachments_before_delete;
-- ;;
CREATE TRIGGER pk_attachments_before_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM blobs WHERE id = OLD.blob_id AND state <> 'deleted')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the attachment stays until the purge''s cleanup has deleted its bytes');
END;
-- ;;
CREATE TRIGGER pk_retention_fences_no_update BEFORE UPDATE ON retention_fences
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention fence never changes');
END;
-- ;;
-- Deleted only once nothing it expires is left: a placement it expires, still there.
CREATE TRIGGER pk_retention_fences_before_delete BEFORE DELETE ON retention_fences
WHEN (OLD.conversation_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id JOIN conversations c ON c.id = p.conversation_id
         WHERE p.conversation_id = OLD.conversation_id AND c.state <> 'purged' AND p.created_at < OLD.placed_before
           AND e.occurred_at < OLD.cutoff AND (OLD.window_start IS NULL OR e.occurred_at >= OLD.window_start)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'author' AND x.subject_id = e.author)))
  OR (OLD.conversation_id IS NULL AND EXISTS (
        SELECT 1 FROM events e JOIN placements p ON p.event_id = e.id JOIN conversations c ON c.id = p.conversation_id
         WHERE e.occurred_at < OLD.cutoff AND (OLD.window_start IS NULL OR e.occurred_at >= OLD.window_start)
           AND c.state <> 'purged' AND p.created_at < OLD.placed_before
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'author' AND x.subject_id = e.author)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the retention run still expires content; only its cleanup removes its fence');
END;
-- ;;
CREATE TRIGGER pk_retention_exemptions_no_update BEFORE UPDATE ON retention_exemptions
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention exemption never changes');
END;
-- ;;
CREATE TRIGGER pk_retention_exemptions_before_insert BEFORE INSERT ON retention_exemptions
WHEN EXISTS (SELECT 1 FROM retention_fences WHERE purge_id = NEW.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: the exemptions of a retention run are fixed while its fence stands');
END;
-- ;;
CREATE TRIGGER pk_retention_exemptions_before_delete BEFORE DELETE ON retention_exemptions
WHEN EXISTS (SELECT 1 FROM retention_fences WHERE purge_id = OLD.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: the exemptions of a retention run are fixed while its fence stands');
END;
-- ;;
CREATE TRIGGER pk_legal_holds_no_delete BEFORE DELETE ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a legal hold is never deleted; release it');
END;
-- ;;
CREATE TRIGGER pk_legal_holds_before_update BEFORE UPDATE ON legal_holds
WHEN NEW.hold_id IS NOT OLD.hold_id OR NEW.purge_id IS NOT OLD.purge_id
  OR (OLD.released_by IS NOT NULL AND NEW.released_by IS NOT OLD.released_by)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a legal hold changes only by its release, once');
END;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_no_update BEFORE UPDATE ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: what a legal hold covers never changes');
END;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_no_delete BEFORE DELETE ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: what a legal hold covers never changes');
END;
-- ;;
CREATE TRIGGER pk_retention_policies_no_delete BEFORE DELETE ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention policy is never deleted; remove it with retention_end');
END;
-- ;;
-- The scheduler's bookkeeping changes freely; what the policy is changes only with a new
-- version (the purge id of its ledger row), and its window never reaches past now.
CREATE TRIGGER pk_retention_policies_before_update BEFORE UPDATE ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s scope, max age and end change only with a new version')
     WHERE NEW.policy_id IS NOT OLD.policy_id
        OR (NEW.purge_id IS OLD.purge_id
            AND (NEW.conversation_id IS NOT OLD.conversation_id
                 OR NEW.max_age_seconds IS NOT OLD.max_age_seconds
                 OR (OLD.ended_by IS NOT NULL AND NEW.ended_by IS NOT OLD.ended_by)));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s window never reaches past now')
     WHERE NEW.expired_through IS NOT NULL AND NEW.expired_through > strftime('%Y-%m-%d %H:%M:%f999', 'now');
END;
