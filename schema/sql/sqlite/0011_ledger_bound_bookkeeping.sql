-- Retention and hold bookkeeping bound to the ledger (0011). Statements are separated by lines
-- reading "-- ;;". Every refusal raises 'purgekeeper:<code>: <detail>'.
--
-- The same rules as PostgreSQL's 0011 (see there): a policy's definition, its end and a hold's
-- release are written only together with the ledger row that records them (found by its purge
-- id, of the right kind, naming this policy or hold and this definition, newer than the state
-- it replaces); a planned cutoff is never later than now - max_age; the window moves forward
-- only to the cutoff of a run of this version (last_purge_id) that began where the policy's
-- window stood and was accepted after every row that widened the walk (a hold's release, a
-- policy's end or setting), or over a stretch that holds nothing a run would expire, and
-- never past now - max_age. Times are compared as the canonical text the library writes
-- (YYYY-MM-DD HH:MM:SS.ffffff); a ledger row's times are its canonical JSON's
-- (YYYY-MM-DDTHH:MM:SS.ffffffZ), read back into that form.
CREATE TRIGGER pk_retention_policies_before_insert BEFORE INSERT ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a new retention policy stands, with nothing run or planned')
     WHERE NEW.ended_by IS NOT NULL OR NEW.pending_cutoff IS NOT NULL OR NEW.expired_through IS NOT NULL;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s scope and max age are written only with the ledger row of that version (a retention row of this policy with this definition)')
     WHERE NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'retention'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.conversation_id') IS NEW.conversation_id
                          AND json_extract(l.selectors, '$.max_age_seconds') IS NEW.max_age_seconds);
    -- A row already there (an upsert's conflict, or REPLACE, which deletes it without its
    -- DELETE triggers) is replaced only by a newer version.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy is replaced only by a newer version')
     WHERE EXISTS (SELECT 1 FROM retention_policies o
                    WHERE o.policy_id = NEW.policy_id
                      AND COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0)
                          <= max(COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = o.purge_id), 0),
                                 COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = o.ended_by), 0)));
END;
-- ;;
DROP TRIGGER pk_retention_policies_before_update;
-- ;;
CREATE TRIGGER pk_retention_policies_before_update BEFORE UPDATE ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s id never changes')
     WHERE NEW.policy_id IS NOT OLD.policy_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s scope and max age are written only with the ledger row of a newer version (a retention row of this policy with this definition)')
     WHERE (NEW.purge_id IS NOT OLD.purge_id OR NEW.conversation_id IS NOT OLD.conversation_id
            OR NEW.max_age_seconds IS NOT OLD.max_age_seconds)
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'retention'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.conversation_id') IS NEW.conversation_id
                          AND json_extract(l.selectors, '$.max_age_seconds') IS NEW.max_age_seconds
                          AND l.seq > max(COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = OLD.purge_id), 0),
                                          COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = OLD.ended_by), 0)));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy ended once')
     WHERE NEW.ended_by IS NOT OLD.ended_by AND NEW.ended_by IS NOT NULL AND OLD.ended_by IS NOT NULL;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy ends only with the ledger row that ends this version')
     WHERE NEW.ended_by IS NOT OLD.ended_by AND NEW.ended_by IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.ended_by AND l.kind = 'retention_end'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.ended') IS NEW.purge_id
                          AND l.seq > COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an ended retention policy stands again only with a new version')
     WHERE OLD.ended_by IS NOT NULL AND NEW.ended_by IS NULL AND NEW.purge_id IS OLD.purge_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s planned cutoff is never later than now - max_age')
     WHERE NEW.pending_cutoff IS NOT OLD.pending_cutoff
       AND NEW.pending_cutoff > strftime('%Y-%m-%d %H:%M:%f999', 'now', '-' || NEW.max_age_seconds || ' seconds');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s window never reaches past now - max_age')
     WHERE NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through)
       AND NEW.expired_through > strftime('%Y-%m-%d %H:%M:%f999', 'now', '-' || NEW.max_age_seconds || ' seconds');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s window moves on only with a run of this version (last_purge_id) or over what holds nothing to expire')
     WHERE NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through)
       AND NOT EXISTS (
           SELECT 1 FROM purge_ledger l
            WHERE l.purge_id = NEW.last_purge_id AND l.kind = 'retention_run'
              AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
              AND json_extract(l.selectors, '$.policy_purge_id') IS NEW.purge_id
              AND replace(replace(json_extract(l.selectors, '$.cutoff'), 'T', ' '), 'Z', '') IS NEW.expired_through
              AND l.seq > max(COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'hold_release'), 0),
                              COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention_end'), 0),
                              COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention'), 0))
              AND (json_extract(l.selectors, '$.window_start') IS NULL
                   OR OLD.expired_through >= replace(replace(json_extract(l.selectors, '$.window_start'), 'T', ' '), 'Z', '')))
       AND EXISTS (
           SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id
                                      JOIN conversations c ON c.id = p.conversation_id
            WHERE e.occurred_at < NEW.expired_through
              AND (OLD.expired_through IS NULL OR e.occurred_at >= OLD.expired_through)
              AND c.state <> 'purged'
              AND (NEW.conversation_id IS NULL OR p.conversation_id = NEW.conversation_id)
              AND (NEW.conversation_id IS NOT NULL
                   OR NOT EXISTS (SELECT 1 FROM retention_policies o
                                   WHERE o.conversation_id = p.conversation_id AND o.ended_by IS NULL))
              AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = e.id)
              AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
              AND NOT EXISTS (SELECT 1 FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
                               WHERE h.released_by IS NULL
                                 AND ((s.kind = 'conversation' AND s.subject_id = p.conversation_id)
                                      OR (s.kind = 'author' AND s.subject_id = e.author))));
END;
-- ;;
CREATE TRIGGER pk_legal_holds_before_insert BEFORE INSERT ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is written once')
     WHERE EXISTS (SELECT 1 FROM legal_holds WHERE hold_id = NEW.hold_id);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is written only with its own ledger row (a hold row of this id)')
     WHERE NEW.released_by IS NOT NULL
        OR NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'hold'
                          AND json_extract(l.selectors, '$.hold_id') IS NEW.hold_id);
END;
-- ;;
DROP TRIGGER pk_legal_holds_before_update;
-- ;;
CREATE TRIGGER pk_legal_holds_before_update BEFORE UPDATE ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a legal hold changes only by its release, once')
     WHERE NEW.hold_id IS NOT OLD.hold_id OR NEW.purge_id IS NOT OLD.purge_id
        OR (OLD.released_by IS NOT NULL AND NEW.released_by IS NOT OLD.released_by);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is released only with the ledger row of its release (a hold_release row of this id)')
     WHERE NEW.released_by IS NOT OLD.released_by
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.released_by AND l.kind = 'hold_release'
                          AND json_extract(l.selectors, '$.hold_id') IS NEW.hold_id
                          AND l.seq > COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0));
END;
-- ;;
-- What a hold covers is what its own ledger row names.
CREATE TRIGGER pk_legal_hold_subjects_before_insert BEFORE INSERT ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold covers only what its own ledger row names')
     WHERE NOT EXISTS (
         SELECT 1 FROM legal_holds h JOIN purge_ledger l ON l.purge_id = h.purge_id AND l.kind = 'hold',
                json_each(l.selectors, CASE NEW.kind WHEN 'conversation' THEN '$.conversation_ids' ELSE '$.authors' END) j
          WHERE h.hold_id = NEW.hold_id AND j.value = NEW.subject_id);
END;
-- ;;
-- REPLACE deletes the row it conflicts with without its DELETE triggers: a ledger row is
-- never written over (its purge id and seq are taken for ever).
CREATE TRIGGER pk_purge_ledger_no_replace BEFORE INSERT ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: a ledger row is never written over')
     WHERE EXISTS (SELECT 1 FROM purge_ledger WHERE purge_id = NEW.purge_id OR seq = NEW.seq);
END;
