-- purgekeeper 0021: new blobs in one level of 256 shard directories (ab/<sha256>-<blob id>,
-- ab/<blob id>); the two-level paths of 0006 (ab/cd/...) stay canonical for the rows that hold
-- them. Statements are separated by lines reading "-- ;;". Every refusal raises
-- 'purgekeeper:<code>: <detail>'.
-- ;;
CREATE OR REPLACE FUNCTION pk_blob_canonical_path(kind text, sha256 text, id text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE kind
        WHEN 'cas' THEN substr(sha256, 1, 2) || '/' || sha256 || '-' || id
        ELSE substr(id, 1, 2) || '/' || id
    END;
$$;
-- ;;
-- A blob's own path: the one-level path of new blobs, or the two-level one of 0006 to 0020.
CREATE FUNCTION pk_blob_path_is_canonical(kind text, sha256 text, id text, path text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT path IS NOT NULL AND path IN (
        pk_blob_canonical_path(kind, sha256, id),
        CASE kind
            WHEN 'cas' THEN substr(sha256, 1, 2) || '/' || substr(sha256, 3, 2) || '/' || sha256 || '-' || id
            ELSE substr(id, 1, 2) || '/' || substr(id, 3, 2) || '/' || id
        END);
$$;
-- ;;
CREATE OR REPLACE FUNCTION pk_blobs_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id !~ '^[0-9A-Za-z_-]{4,64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -';
    END IF;
    IF NEW.sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % needs the lowercase hex SHA-256 of its bytes', NEW.id;
    END IF;
    IF NOT pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % must live at its canonical path %', NEW.id,
            pk_blob_canonical_path(NEW.kind, NEW.sha256, NEW.id);
    END IF;
    IF NEW.state <> 'present' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob is created present';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_blobs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob only changes state';
    END IF;
    IF NEW.path <> OLD.path
       AND NOT (NEW.state = 'deleted' AND pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path)) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob path changes only to its canonical one, once its bytes are deleted';
    END IF;
    IF NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % cannot go from % to %', OLD.id, OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END $$;
-- ;;
DROP TRIGGER pk_blobs_before_update ON blobs;
-- ;;
-- As in 0006: the function runs only for a change it refuses (marking blobs stays a HOT
-- update that enters no PL/pgSQL).
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
FOR EACH ROW WHEN (
    NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size
    OR (NEW.path <> OLD.path
        AND NOT (NEW.state = 'deleted' AND pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path)))
    OR (NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')))
)
EXECUTE FUNCTION pk_blobs_before_update();
