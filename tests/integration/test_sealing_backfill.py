"""The background sealing of content written before encryption at rest (0019, 0020), on both
backends: ``seal_older_content`` run in process over an "older" database, made with raw
inserts as a version before 0019 wrote it (``key_id`` NULL, content in plain text), beside
content an ingest sealed. Every value reads the same through the API afterwards, the raw
columns hold ``pk1:`` values under keys of their own, the partial indexes find nothing (the
disclosure goes), and a purge destroys the new keys. Held content waits for its hold, fenced
content for its purge; a crash leaves no row half sealed; ``purgectl content seal`` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from sqlalchemy import insert, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands import sealing_backfill
from purgekeeper.commands.acceptance import PLAIN_CONTENT_DISCLOSURE
from purgekeeper.schema import content_queries, sealing_queries
from purgekeeper.schema.tables import admissions, attachments, derivative_sources, derivatives, events, placements, runs
from purgekeeper.storage import failpoints
from tests.helpers import opened, rows, scalar
from tests.helpers.cleanup import run, step_of
from tests.helpers.factories import purge_events

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "counsel@example.com", "reason": "litigation hold"}
NOTHING = dict.fromkeys(sealing_queries.SEALED_TABLES, 0)
# what the older rows hold, by (what, row id): tests.helpers.opened's names
OLD = {
    ("body", "e-old"): "old words",
    ("body", "e-cy"): "cy's old words",
    ("name", "at-old"): "old report.pdf",
    ("name", "at-bare"): "bare.txt",
    ("payload", "ad-old"): '{"text": "old words, admitted"}',
    ("output", "r-old"): '"an old answer"',
    ("derivative", "d-old"): '"an old summary"',
}
ROWS = {"events": ("e-old", "e-cy", "e-bare"), "attachments": ("at-old", "at-bare")}
ROWS |= {"admissions": ("ad-old",), "runs": ("r-old",), "derivatives": ("d-old",)}


@pytest.fixture(autouse=True)
def _disarmed() -> Any:
    yield
    failpoints.disarm()


@pytest.fixture
def older(pk: Pk) -> Pk:
    """c1 holds ada's sealed e-new (a CAS attachment) and, as a version before 0019 wrote
    them: bob's e-old (a name bound to e-new's blob), cy's e-cy, bob's e-bare (no body, one
    name), the finished run r-old that admitted e-old, and d-old, derived from e-old."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    new = pk.ingest_event("c1", author="ada", body="new words", attachments=[NewAttachment.cas(b"bytes", name="n.txt")])
    blob = new.attachments[0].blob_id
    with pk.db.write() as conn:
        for event_id, author, body in (("e-old", "bob", "old words"), ("e-cy", "cy", "cy's old words")):
            conn.execute(insert(events).values(id=event_id, author=author, occurred_at=new.occurred_at, body=body))
        conn.execute(insert(events).values(id="e-bare", author="bob", occurred_at=new.occurred_at, body=None))
        for event_id in ROWS["events"]:
            conn.execute(insert(placements).values(event_id=event_id, conversation_id="c1"))
        for attachment_id, event_id in (("at-old", "e-old"), ("at-bare", "e-bare")):
            name = OLD["name", attachment_id]
            conn.execute(
                insert(attachments).values(
                    id=attachment_id, event_id=event_id, blob_id=blob, binding="legacy_cas", name=name
                )
            )
        conn.execute(insert(runs).values(id="r-old", conversation_id="c1", bot_id="b1", status="running"))
        conn.execute(
            insert(admissions).values(id="ad-old", event_id="e-old", run_id="r-old", payload=OLD["payload", "ad-old"])
        )
        conn.execute(
            text("UPDATE runs SET status = 'succeeded', output = :o WHERE id = 'r-old'"), {"o": OLD["output", "r-old"]}
        )
        conn.execute(
            insert(derivatives).values(
                id="d-old", conversation_id="c1", kind="summary", payload=OLD["derivative", "d-old"]
            )
        )
        conn.execute(insert(derivative_sources).values(derivative_id="d-old", event_id="e-old"))
    return pk


def seal(pk: Pk, batch: int = sealing_backfill.BATCH) -> sealing_backfill.SealingRound:
    return sealing_backfill.seal_older_content(pk.db, pk.keys, batch=batch)


def stored(pk: Pk) -> dict[tuple[str, str], str | None]:
    """What the older rows hold, opened with the handle's key store."""
    return {where: opened(pk, *where) for where in OLD}


def read(pk: Pk) -> list[tuple[str, str | None, tuple[str | None, ...]]]:
    """c1 through the API: each event's id, body and attachments' names."""
    return sorted((e.id, e.body, tuple(a.name for a in e.attachments)) for e in pk.read_conversation("c1"))


def keys_of(pk: Pk) -> dict[tuple[str, str], str | None]:
    """Each older row's key_id, by table and id."""
    return {
        (table, row_id): scalar(pk, f"SELECT key_id FROM {table} WHERE id = :id", id=row_id)
        for table, ids in ROWS.items()
        for row_id in ids
    }


def plain_left(pk: Pk) -> bool:
    with pk.db.read() as conn:
        return content_queries.holds_plain_content(conn)


def test_a_round_seals_every_older_row_in_place_and_every_read_stays_the_same(older: Pk) -> None:
    """Tried: one round over the older rows. Reads through the API and the stored values,
    opened, are the same before and after; each row holds a pk1: value under a key of its own
    (a name under its event's key, e-bare a key for its name alone); the partial indexes find
    nothing, so a preview discloses nothing; no conversation version moved."""
    pk = older
    before, values, version = read(pk), stored(pk), pk.get_conversation("c1").version  # type: ignore[union-attr]
    assert values == OLD and plain_left(pk)
    assert PLAIN_CONTENT_DISCLOSURE in pk.preview_purge(EventScope(event_ids=("e-old",))).disclosures
    done = seal(pk)
    assert done.sealed == {"events": 3, "attachments": 2, "admissions": 1, "runs": 1, "derivatives": 1}
    assert (done.left, done.held, done.done) == (NOTHING, NOTHING, True)
    assert (read(pk), stored(pk)) == (before, OLD)
    keys = keys_of(pk)
    assert (
        all(keys.values())
        and len({keys[t, i] for t in ("events", "admissions", "runs", "derivatives") for i in ROWS[t]}) == 6
    )
    assert (
        keys["attachments", "at-old"] == keys["events", "e-old"]
        and keys["attachments", "at-bare"] == keys["events", "e-bare"]
    )
    raw = rows(
        pk,
        "SELECT body FROM events WHERE id IN ('e-old', 'e-cy') UNION ALL SELECT name FROM attachments UNION ALL "
        "SELECT payload FROM admissions UNION ALL SELECT output FROM runs UNION ALL SELECT payload FROM derivatives",
    )
    assert len(raw) == 8 and all(value.startswith("pk1:") for (value,) in raw)
    assert scalar(pk, "SELECT body FROM events WHERE id = 'e-bare'") is None
    assert not plain_left(pk) and pk.get_conversation("c1").version == version  # type: ignore[union-attr]
    assert PLAIN_CONTENT_DISCLOSURE not in pk.preview_purge(EventScope(event_ids=("e-old",))).disclosures


def test_batches_resume_from_the_indexes_and_a_round_after_the_last_seals_nothing(older: Pk) -> None:
    """Tried: rounds of one row per table until one seals nothing. Each round seals at most
    one event (with its names) and one row of each other table; the rounds remember nothing but the indexes;
    a round once all is sealed seals nothing and changes no key."""
    pk = older
    rounds = []
    while not rounds or rounds[-1].sealed_any:
        rounds.append(seal(pk, batch=1))
    assert all(n <= 1 for r in rounds for table, n in r.sealed.items() if table != "attachments")
    # in id order: e-cy, then e-old with its name, then e-bare (no body) with its name
    assert [(r.left["events"], r.left["attachments"]) for r in rounds] == [(1, 2), (0, 1), (0, 0), (0, 0)]
    assert rounds[-1].done
    total = rounds[0]
    for later in rounds[1:]:
        total = total.then(later)
    assert total.sealed == {"events": 3, "attachments": 2, "admissions": 1, "runs": 1, "derivatives": 1}
    keys = keys_of(pk)
    assert seal(pk).sealed == NOTHING and keys_of(pk) == keys and stored(pk) == OLD


def test_a_purge_after_sealing_destroys_the_new_keys(older: Pk) -> None:
    """Tried: a content purge of e-old once it is sealed. Its bodies step destroys the keys
    the sealing gave e-old (its body and name), its admission, the run that admitted it and
    the derivative of it; cy's e-cy keeps its key and its words."""
    pk = older
    seal(pk)
    keys = keys_of(pk)
    purge_id = purge_events(pk, "e-old")
    assert run(pk, step_of(pk, purge_id, "bodies").id).status == "done"
    gone = [
        keys[t, i]
        for t, i in (("events", "e-old"), ("admissions", "ad-old"), ("runs", "r-old"), ("derivatives", "d-old"))
    ]
    assert pk.key_store.get(gone) == dict.fromkeys(gone)
    assert pk.key_store.get([keys["events", "e-cy"]])[keys["events", "e-cy"]] is not None
    assert opened(pk, "body", "e-cy") == "cy's old words"


def test_held_rows_are_skipped_and_reported_until_their_hold_is_released(older: Pk) -> None:
    """Tried: a hold on bob's content (e-old and e-bare, the admission, run and derivative of
    e-old), then a round, then the hold's release and a round. The first seals cy's e-cy only
    and reports the rest held, plain, with no key; the second seals them."""
    pk = older
    pk.place_hold("h1", authors=["bob"], **WHO)
    first = seal(pk)
    assert first.sealed == {"events": 1, "attachments": 0, "admissions": 0, "runs": 0, "derivatives": 0}
    held = {"events": 1, "attachments": 2, "admissions": 1, "runs": 1, "derivatives": 1}
    assert (first.held, first.left) == (held, held) and stored(pk) == OLD
    assert [k for k, v in keys_of(pk).items() if v] == [("events", "e-cy")]
    pk.release_hold("h1", **WHO)
    second = seal(pk)
    assert second.sealed == {"events": 2, "attachments": 2, "admissions": 1, "runs": 1, "derivatives": 1}
    assert second.done and all(keys_of(pk).values()) and stored(pk) == OLD


def test_fenced_content_is_left_to_its_purge(older: Pk) -> None:
    """Tried: a purge of cy's e-cy accepted (not yet cleaned), then a round. e-cy stays plain
    with no key (its cleanup NULLs it; the trigger refuses to write it again) and is counted
    left; once the bodies step has run, nothing is left."""
    pk = older
    purge_id = purge_events(pk, "e-cy")
    done = seal(pk)
    assert done.sealed["events"] == 2 and done.left == {**NOTHING, "events": 1} and done.held == NOTHING
    assert scalar(pk, "SELECT key_id FROM events WHERE id = 'e-cy'") is None
    assert run(pk, step_of(pk, purge_id, "bodies").id).status == "done"
    assert seal(pk).done and not plain_left(pk)


def test_an_error_after_the_keys_are_taken_leaves_every_row_plain_with_no_key(older: Pk) -> None:
    """Tried: a round whose first batch fails after its rows were written, before its commit
    (the failpoint raises EIO). Nothing is sealed, no row names a key; the next round seals it
    all."""
    pk = older
    failpoints.arm("sealing.batch=EIO")
    with pytest.raises(OSError):
        seal(pk)
    assert not any(keys_of(pk).values()) and stored(pk) == OLD
    failpoints.disarm()
    assert seal(pk).done and all(keys_of(pk).values()) and stored(pk) == OLD


CHILD = """
import sys
import purgekeeper
from purgekeeper.commands import sealing_backfill
from purgekeeper.storage import failpoints
url, checkpoints, blobs, files = sys.argv[1:5]
pk = purgekeeper.open(url, checkpoint_dir=checkpoints, blob_root=blobs, file_root=files, workers="none")
failpoints.arm("sealing.batch=exit")
sealing_backfill.seal_older_content(pk.db, pk.keys)
print("the round finished")
"""


def test_a_process_killed_in_a_batch_leaves_nothing_half_sealed(older: Pk) -> None:
    """Tried: a child process runs a round and dies (failpoint ``sealing.batch=exit``) with
    its first batch written and not committed. Every row is plain with no key; a round here
    then seals it all, with the same key store."""
    pk = older
    settings = pk.settings
    args = [pk.settings.database_url, str(settings.checkpoint_dir), str(settings.blob_root), str(settings.file_root)]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    assert child.returncode == 137 and "the round finished" not in child.stdout, child.stderr
    assert not any(keys_of(pk).values()) and stored(pk) == OLD
    assert seal(pk).done and stored(pk) == OLD


@pytest.mark.postgres_only
def test_a_row_another_sealer_holds_is_skipped_not_sealed_twice(older: Pk) -> None:
    """Tried (PostgreSQL): a transaction locks e-old as a sealer's batch does and stays open;
    meanwhile a second sealer's lock of the same candidates gets e-cy alone (SKIP LOCKED:
    it neither waits nor takes e-old). Once the first ends, a round seals every event once."""
    pk = older
    locked, release = threading.Event(), threading.Event()

    def first_sealer() -> None:
        with pk.db.write() as conn:
            assert [r.id for r in sealing_queries.lock(conn, "events", ["e-old"])] == ["e-old"]
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=first_sealer)
    holder.start()
    try:
        assert locked.wait(30)
        with pk.db.write() as conn:
            second = [r.id for r in sealing_queries.lock(conn, "events", ["e-cy", "e-old"])]
    finally:
        release.set()
        holder.join(30)
    assert second == ["e-cy"]
    assert seal(pk).sealed["events"] == 3 and all(keys_of(pk).values()) and stored(pk) == OLD


def test_a_plain_name_under_a_sealed_event_is_sealed_under_the_event_s_key(older: Pk) -> None:
    """Tried: a name a raw writer added in plain text to ada's sealed e-new (no key of its
    own), then a round. It is sealed under e-new's key (the attachments' pass: no new key),
    and a read of c1 then shows it as written."""
    pk = older
    new = scalar(pk, "SELECT id FROM events WHERE author = 'ada'")
    blob = scalar(pk, "SELECT blob_id FROM attachments WHERE event_id = :e", e=new)
    with pk.db.write() as conn:
        values = {"event_id": new, "blob_id": blob, "binding": "legacy_cas", "position": 1}
        conn.execute(insert(attachments).values(id="at-late", name="late.txt", **values))
    done = seal(pk)
    assert done.sealed["attachments"] == 3 and done.done
    key = scalar(pk, "SELECT key_id FROM events WHERE id = :e", e=new)
    assert scalar(pk, "SELECT key_id FROM attachments WHERE id = 'at-late'") == key
    assert scalar(pk, "SELECT name FROM attachments WHERE id = 'at-late'").startswith("pk1:")
    [read_new] = [e for e in pk.read_conversation("c1") if e.id == new]
    assert [a.name for a in read_new.attachments] == ["n.txt", "late.txt"]


def test_content_left_counts_each_table_with_a_cap_and_the_files_the_sealing_leaves(older: Pk) -> None:
    """Tried: ``content_left`` before and after a round, and with an attachment file written
    before 0019 (a blob row with no key). It counts each table's plain rows, ``blobs`` too,
    which the sealing leaves: the disclosure stays for them."""
    pk = older
    assert sealing_backfill.content_left(pk.db) == {
        **NOTHING,
        "events": 2,
        "attachments": 2,
        "admissions": 1,
        "runs": 1,
        "derivatives": 1,
        "blobs": 0,
    }
    seal(pk)
    assert sealing_backfill.content_left(pk.db) == {**NOTHING, "blobs": 0}
    sha = "a" * 64
    with pk.db.write() as conn:
        conn.execute(
            text("INSERT INTO blobs (id, kind, sha256, size, path) VALUES ('bl-old', 'cas', :s, 1, :p)"),
            {"s": sha, "p": f"aa/aa/{sha}-bl-old"},
        )
    assert sealing_backfill.content_left(pk.db)["blobs"] == 1 and plain_left(pk)


def purgectl(pk: Pk, *args: str) -> subprocess.CompletedProcess[str]:
    """purgectl with the content commands registered (commands/cli/content_sealing.py)."""
    settings = pk.settings
    env = {
        **os.environ,
        "PURGEKEEPER_DATABASE_URL": settings.database_url,
        "PURGEKEEPER_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "PURGEKEEPER_DATA_DIR": str(settings.checkpoint_dir.parent / "data"),
        "PURGEKEEPER_BLOB_ROOT": str(settings.blob_root),
        "PURGEKEEPER_FILE_ROOT": str(settings.file_root),
        "PURGEKEEPER_SIGNING_KEY_FILE": str(settings.signing_key_path),
    }
    program = "import purgekeeper.commands.cli.content_sealing\nfrom purgekeeper.commands.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", program, *args], env=env, capture_output=True, text=True, timeout=60)


def test_purgectl_content_seal_until_done_prints_progress_and_what_is_left(older: Pk) -> None:
    """Tried: ``purgectl content seal --batch 1 --until-done --json``, then the same in text.
    The JSON is what every round sealed and what is left (nothing); progress went to stderr,
    a line a round; the text run seals nothing more and says nothing is left."""
    pk = older
    done = purgectl(pk, "content", "seal", "--batch", "1", "--until-done", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["sealed"] == {"events": 3, "attachments": 2, "admissions": 1, "runs": 1, "derivatives": 1}
    assert document["left"] == NOTHING and document["held"] == NOTHING
    assert len([line for line in done.stderr.splitlines() if line.startswith("sealed ")]) == 4
    again = purgectl(pk, "content", "seal")
    assert again.returncode == 0 and "nothing written before encryption at rest is left" in again.stdout, again.stderr
    assert stored(pk) == OLD
