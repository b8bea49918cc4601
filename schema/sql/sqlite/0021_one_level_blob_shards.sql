-- purgekeeper 0021: new blobs in one level of 256 shard directories (ab/<sha256>-<blob id>,
-- ab/<blob id>); the two-level paths of 0006 (ab/cd/...) stay canonical for the rows that hold
-- them. Statements are separated by lines reading "-- ;;". Every refusal raises
-- 'purgekeeper:<code>: <detail>'.
-- ;;
DROP TRIGGER pk_blobs_before_insert;
-- ;;
CREATE TRIGGER pk_blobs_before_insert BEFORE INSERT ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -')
     WHERE length(NEW.id) NOT BETWEEN 4 AND 64 OR NEW.id GLOB '*[^0-9A-Za-z_-]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob needs the lowercase hex SHA-256 of its bytes')
     WHERE length(NEW.sha256) <> 64 OR NEW.sha256 GLOB '*[^0-9a-f]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob must live at its canonical path')
     WHERE NEW.path IS NULL OR NEW.path NOT IN (
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || NEW.id END,
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob is created present') WHERE NEW.state <> 'present';
END;
-- ;;
DROP TRIGGER pk_blobs_before_update;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob only changes state') WHERE NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob path changes only to its canonical one, once its bytes are deleted')
     WHERE NEW.path <> OLD.path AND NOT (NEW.state = 'deleted' AND NEW.path IN (
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || NEW.id END,
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob state only moves forward') WHERE NEW.state <> OLD.state AND NOT ((OLD.state = 'present' AND NEW.state = 'deleting') OR (OLD.state = 'deleting' AND NEW.state = 'deleted'));
END;
