-- Retention and hold bookkeeping bound to the ledger (0011). Statements are separated by lines
-- reading "-- ;;". Every refusal raises 'purgekeeper:<code>: <detail>'.
--
-- A policy's definition (scope, max age), its end and a hold's release are written only
-- together with the ledger row that records them: the row (by its purge id, the ledger's
-- unique key) has the right kind, names this policy or hold, records this definition (or
-- ends this version), and is newer than the state it replaces. The acceptance appends its
-- ledger row before it writes the state (commands.kinds.base.Kind.ledger_first), and a merge
-- appends every row before it re-applies them, so both find it.
--
-- The scheduler's bookkeeping moves only as far as the policy's rows allow:
-- - a planned cutoff (pending_cutoff) is never later than now - max_age, on the clock of the
--   write;
-- - the window (expired_through: everything in scope that occurred before it has expired or
--   is exempt) moves back freely (a run then walks more), and forward either to the cutoff of
--   a run of this version (last_purge_id names it) whose window began where the policy's
--   stands, accepted after every row that makes runs walk everything again (a hold's
--   release, a policy's end or setting: pk_widened_seq), or over a stretch that holds nothing
--   a run would expire (the scheduler's quiet turn), and never past now - max_age.
CREATE FUNCTION pk_ledger_row(row_purge_id text, row_kind text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('seq', seq, 'selectors', selectors::jsonb)
      FROM purge_ledger WHERE purge_id = row_purge_id AND kind = row_kind;
$$;
-- ;;
CREATE FUNCTION pk_ledger_seq(row_purge_id text) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = row_purge_id), 0);
$$;
-- ;;
-- The newest row after which every standing policy's next run walks its whole scope again.
CREATE FUNCTION pk_widened_seq() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT GREATEST(
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'hold_release'), 0),
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention_end'), 0),
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention'), 0));
$$;
-- ;;
-- Whether a run of the policy over [from_at, to_at) would expire nothing now: no placement in
-- its scope of an event that occurred then, in a conversation that is not purged, that no
-- purge fenced, no erasure covers and no hold keeps (the scheduler's "anything to expire").
CREATE FUNCTION pk_retention_window_clear(policy retention_policies, from_at timestamptz, to_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id
                                   JOIN conversations c ON c.id = p.conversation_id
         WHERE e.occurred_at < to_at AND (from_at IS NULL OR e.occurred_at >= from_at)
           AND c.state <> 'purged'
           AND (policy.conversation_id IS NULL OR p.conversation_id = policy.conversation_id)
           AND (policy.conversation_id IS NOT NULL
                OR NOT EXISTS (SELECT 1 FROM retention_policies o
                                WHERE o.conversation_id = p.conversation_id AND o.ended_by IS NULL))
           AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = e.id)
           AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
           AND NOT pk_held(e.author, p.conversation_id));
$$;
-- ;;
CREATE FUNCTION pk_require_policy_version(policy retention_policies, replaced_seq bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    version jsonb := pk_ledger_row(policy.purge_id, 'retention');
BEGIN
    IF version IS NULL
       OR version #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR version #>> '{selectors,conversation_id}' IS DISTINCT FROM policy.conversation_id
       OR (version #>> '{selectors,max_age_seconds}')::bigint IS DISTINCT FROM policy.max_age_seconds THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its scope and max age are written only with the ledger row of that version (a retention row of this policy with this definition)', policy.policy_id;
    END IF;
    IF (version ->> 'seq')::bigint <= replaced_seq THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a version replaces only an older state', policy.policy_id;
    END IF;
END $$;
-- ;;
CREATE FUNCTION pk_require_policy_end(policy retention_policies) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ending jsonb := pk_ledger_row(policy.ended_by, 'retention_end');
BEGIN
    IF ending IS NULL
       OR ending #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR ending #>> '{selectors,ended}' IS DISTINCT FROM policy.purge_id
       OR (ending ->> 'seq')::bigint <= pk_ledger_seq(policy.purge_id) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: it ends only with the ledger row that ends this version', policy.policy_id;
    END IF;
END $$;
-- ;;
-- Whether the run last_purge_id names moves the window to new_through: a run of this
-- policy's version with that cutoff, whose window began where the policy's stood, accepted
-- after every row that widened the walk.
CREATE FUNCTION pk_run_moves_window(policy retention_policies, old_through timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    run jsonb := pk_ledger_row(policy.last_purge_id, 'retention_run');
    window_start timestamptz;
BEGIN
    IF run IS NULL
       OR run #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR run #>> '{selectors,policy_purge_id}' IS DISTINCT FROM policy.purge_id
       OR (run #>> '{selectors,cutoff}')::timestamptz IS DISTINCT FROM policy.expired_through
       OR (run ->> 'seq')::bigint <= pk_widened_seq() THEN
        RETURN false;
    END IF;
    window_start := (run #>> '{selectors,window_start}')::timestamptz;
    RETURN window_start IS NULL OR (old_through IS NOT NULL AND old_through >= window_start);
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_retention_policies_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    latest timestamptz;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a retention policy is never deleted; remove it with retention_end';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.ended_by IS NOT NULL OR NEW.pending_cutoff IS NOT NULL OR NEW.expired_through IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a new policy stands, with nothing run or planned', NEW.policy_id;
        END IF;
        -- a row already there (an upsert's conflict) is replaced only by a newer version
        PERFORM pk_require_policy_version(NEW, COALESCE(
            (SELECT GREATEST(pk_ledger_seq(purge_id), pk_ledger_seq(ended_by)) FROM retention_policies
              WHERE policy_id = NEW.policy_id), 0));
        RETURN NEW;
    END IF;
    IF NEW.policy_id <> OLD.policy_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its id never changes', OLD.policy_id;
    END IF;
    IF NEW.purge_id <> OLD.purge_id OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id
       OR NEW.max_age_seconds <> OLD.max_age_seconds THEN
        PERFORM pk_require_policy_version(NEW, GREATEST(pk_ledger_seq(OLD.purge_id), pk_ledger_seq(OLD.ended_by)));
    END IF;
    IF NEW.ended_by IS DISTINCT FROM OLD.ended_by THEN
        IF NEW.ended_by IS NOT NULL AND OLD.ended_by IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: it ended once', OLD.policy_id;
        ELSIF NEW.ended_by IS NOT NULL THEN
            PERFORM pk_require_policy_end(NEW);
        ELSIF NEW.purge_id = OLD.purge_id THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: an ended policy stands again only with a new version', OLD.policy_id;
        END IF;
    END IF;
    latest := clock_timestamp() - make_interval(secs => NEW.max_age_seconds);
    IF NEW.pending_cutoff IS DISTINCT FROM OLD.pending_cutoff AND NEW.pending_cutoff > latest THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a planned cutoff is never later than now - max_age', OLD.policy_id;
    END IF;
    IF NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through) THEN
        IF NEW.expired_through > latest THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its window never reaches past now - max_age', OLD.policy_id;
        END IF;
        IF NOT pk_run_moves_window(NEW, OLD.expired_through)
           AND NOT pk_retention_window_clear(NEW, OLD.expired_through, NEW.expired_through) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its window moves on only with a run of this version (last_purge_id) or over what holds nothing to expire', OLD.policy_id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
DROP TRIGGER pk_retention_policies_guard ON retention_policies;
-- ;;
CREATE TRIGGER pk_retention_policies_guard BEFORE INSERT OR UPDATE OR DELETE ON retention_policies
FOR EACH ROW EXECUTE FUNCTION pk_retention_policies_guard();
-- ;;
CREATE OR REPLACE FUNCTION pk_legal_holds_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    placed jsonb;
    released jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a legal hold is never deleted; release it';
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.hold_id <> OLD.hold_id OR NEW.purge_id <> OLD.purge_id
       OR (OLD.released_by IS NOT NULL AND NEW.released_by IS DISTINCT FROM OLD.released_by)) THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: legal hold % changes only by its release, once', OLD.hold_id;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF EXISTS (SELECT 1 FROM legal_holds WHERE hold_id = NEW.hold_id) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is written once', NEW.hold_id;
        END IF;
        placed := pk_ledger_row(NEW.purge_id, 'hold');
        IF placed IS NULL OR placed #>> '{selectors,hold_id}' IS DISTINCT FROM NEW.hold_id OR NEW.released_by IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is written only with its own ledger row (a hold row of this id)', NEW.hold_id;
        END IF;
    ELSIF NEW.released_by IS DISTINCT FROM OLD.released_by THEN
        released := pk_ledger_row(NEW.released_by, 'hold_release');
        IF released IS NULL OR released #>> '{selectors,hold_id}' IS DISTINCT FROM NEW.hold_id
           OR (released ->> 'seq')::bigint <= pk_ledger_seq(NEW.purge_id) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is released only with the ledger row of its release (a hold_release row of this id)', NEW.hold_id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
DROP TRIGGER pk_legal_holds_guard ON legal_holds;
-- ;;
CREATE TRIGGER pk_legal_holds_guard BEFORE INSERT OR UPDATE OR DELETE ON legal_holds
FOR EACH ROW EXECUTE FUNCTION pk_legal_holds_guard();
-- ;;
-- What a hold covers is what its own ledger row names.
CREATE FUNCTION pk_legal_hold_subjects_bound() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    placed jsonb := pk_ledger_row((SELECT purge_id FROM legal_holds WHERE hold_id = NEW.hold_id), 'hold');
    listed text := CASE NEW.kind WHEN 'conversation' THEN 'conversation_ids' ELSE 'authors' END;
BEGIN
    IF placed IS NULL OR NOT COALESCE(placed -> 'selectors' -> listed ? NEW.subject_id, false) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % covers only what its own ledger row names', NEW.hold_id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_bound BEFORE INSERT ON legal_hold_subjects
FOR EACH ROW EXECUTE FUNCTION pk_legal_hold_subjects_bound();
