"""``POST /v1/conversations/{id}/events/upload`` on SQLite and PostgreSQL: an event with its
attachments as ``multipart/form-data``, streamed to spool files under the blob root and
ingested from them. An attachment reaches the limit exactly and is refused one byte past it
(413, nothing kept: no blob row, no file, no spool file); the whole request has its own cap;
bad parts are a 400 (an upload that is not multipart a 415). The body passes the guard
without being buffered, and is written a chunk at a time (checked on the code path, by
driving the ASGI app with a chunked body). Also ``NewAttachment.cas_from``/``file_from``,
the Python API the route uses."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.commands import validation
from purgekeeper.commands.http import app as http_app
from purgekeeper.commands.http import guard, uploads
from tests.helpers.http import AS_HOST, BODY_CAP, TOKENS, TestClient, World, make_client, ok, refused, snapshot

Pk = purgekeeper.Purgekeeper
LIMIT = 200_000  # past the tests' 64 KiB JSON body cap: the upload route has its own
BOUNDARY = "pk-test-boundary"
CHUNK = 64 * 1024


@pytest.fixture
def uploader(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk, max_attachment_bytes=LIMIT) as client:
        client.headers.update(AS_HOST)
        yield client


@pytest.fixture
def world(pk: Pk, roots: dict[str, Path]) -> World:
    """A conversation ``c1`` to upload to; ``snapshot`` compares every table and root."""
    pk.create_conversation("c1")
    return World(pk, roots["memory_root"], roots["memory_root"], ())


def upload(client: TestClient, conversation_id: str, fields: dict[str, str], files: list[Any]) -> Any:
    return client.post(f"/v1/conversations/{conversation_id}/events/upload", data=fields, files=files)


def spooled(pk: Pk) -> list[Path]:
    return sorted((pk.settings.blob_root / uploads.SPOOL_DIRECTORY).glob("*"))


# -- the route ------------------------------------------------------------------------------------


def test_attachments_at_the_limit_are_ingested_in_order_and_read_back(uploader: TestClient, world: World) -> None:
    exact, small = bytes(range(256)) * (LIMIT // 256) + b"z" * (LIMIT % 256), b"small cas bytes"
    assert len(exact) == LIMIT and LIMIT > BODY_CAP
    fields = {
        "author": "ada",
        "body": "the report",
        "provider_event_id": "slack:T1/C2/1700000000.000200",
        "occurred_at": "2024-05-01T12:00+02:00",
    }
    files = [("file", ("report.pdf", exact, "application/pdf")), ("cas", ("note.txt", small, "text/plain"))]
    event = ok(upload(uploader, "c1", fields, files))
    assert (event["author"], event["body"], event["occurred_at"]) == ("ada", "the report", "2024-05-01T10:00:00Z")
    assert [(a["name"], a["binding"], a["size"]) for a in event["attachments"]] == [
        ("report.pdf", "real_file", LIMIT),
        ("note.txt", "legacy_cas", len(small)),
    ]
    for attachment, data in zip(event["attachments"], (exact, small), strict=True):
        assert uploader.get(f"/v1/attachments/{attachment['id']}").content == data
    assert event["id"] in [e["id"] for e in ok(uploader.get("/v1/conversations/c1/events"))["events"]]
    again = ok(upload(uploader, "c1", fields, files))
    assert again["id"] == event["id"], "a duplicate delivery returns the event already ingested"
    assert spooled(world.pk) == [], "the spool files are removed once the event is ingested"


def test_one_byte_past_the_limit_is_413_and_keeps_nothing(uploader: TestClient, world: World) -> None:
    before = snapshot(world)
    files = [("cas", ("ok.txt", b"fits", "text/plain")), ("file", ("big.bin", b"x" * (LIMIT + 1), "x/y"))]
    body = refused(upload(uploader, "c1", {"author": "ada"}, files), 413, "payload_too_large")
    assert str(LIMIT) in body["detail"] and "attachment 2" in body["detail"]
    assert snapshot(world) == before and spooled(world.pk) == []


def test_a_request_over_the_route_s_cap_is_413_before_it_is_read(uploader: TestClient, world: World) -> None:
    """Seven attachments each under the limit, more than the limit and the allowance in all:
    refused as it is counted (no Content-Length), and told up front when it is declared."""
    before = snapshot(world)
    count = (LIMIT + http_app.UPLOAD_ALLOWANCE_BYTES) // LIMIT + 1
    parts = [("author", None, b"ada")] + [("file", f"part-{n}.bin", b"p" * LIMIT) for n in range(count)]
    url = "/v1/conversations/c1/events/upload"
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    chunked = uploader.post(url, content=iter(list(multipart(parts))), headers=headers)
    assert "larger than" in refused(chunked, 413, "payload_too_large")["detail"]
    declared = uploader.post(url, content=b"".join(multipart(parts)), headers=headers)
    refused(declared, 413, "payload_too_large")
    assert snapshot(world) == before and spooled(world.pk) == []


BAD_UPLOADS: list[tuple[str, dict[str, str], list[Any], int, str]] = [
    ("no author", {"body": "x"}, [], 400, "validation_error"),
    ("blank author", {"author": ""}, [], 400, "validation_error"),
    ("naive occurred_at", {"author": "ada", "occurred_at": "2024-05-01T12:00:00"}, [], 400, "validation_error"),
    ("bad event id", {"author": "ada", "event_id": "-x"}, [], 400, "validation_error"),
    ("unknown part", {"author": "ada", "colour": "red"}, [], 400, "validation_error"),
    ("file part without a filename", {"author": "ada", "file": "text"}, [], 400, "validation_error"),
    ("empty attachment", {"author": "ada"}, [("file", ("a.txt", b"", "text/plain"))], 400, "validation_error"),
    ("bad attachment name", {"author": "ada"}, [("cas", ("..", b"x", "text/plain"))], 400, "validation_error"),
    (
        "a file under a field's name",
        {"author": "ada"},
        [("body", ("a.txt", b"x", "text/plain"))],
        400,
        "validation_error",
    ),
]


def test_bad_uploads_are_refused_and_keep_nothing(uploader: TestClient, world: World) -> None:
    before = snapshot(world)
    failures = []
    for name, fields, files, status, code in BAD_UPLOADS:
        response = upload(uploader, "c1", fields, files or [("cas", ("ok.txt", b"fits", "text/plain"))])
        if (response.status_code, response.json().get("error")) != (status, code):
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
    url = "/v1/conversations/c1/events/upload"
    as_json = uploader.post(url, json={"author": "ada"})
    if (as_json.status_code, as_json.json()["error"]) != (415, "unsupported_media_type"):
        failures.append(f"json: {as_json.status_code}")
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    cut = b"".join(multipart([("author", None, b"ada"), ("file", "a.txt", b"abc")]))[:-10]
    for name, content in (("cut short", cut), ("not multipart at all", b"\x00garbage\r\n\r\n")):
        response = uploader.post(url, content=content, headers=headers)
        if (response.status_code, response.json()["error"]) != (400, "validation_error"):
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
    assert failures == []
    assert snapshot(world) == before and spooled(world.pk) == []


def test_refusals_of_the_command_keep_nothing_either(uploader: TestClient, world: World) -> None:
    before = snapshot(world)
    files = [("file", ("a.txt", b"bytes", "text/plain"))]
    refused(upload(uploader, "c-unknown", {"author": "ada"}, files), 404, "not_found")
    world.pk.purge_conversation("c-gone", actor="ops", reason="gone")
    refused(upload(uploader, "c-gone", {"author": "ada"}, files), 410, "conversation_purged")
    assert {k: v for k, v in snapshot(world).items() if k.startswith("/")} == {
        k: v for k, v in before.items() if k.startswith("/")
    }, "no file under the roots"
    assert spooled(world.pk) == []


def test_an_empty_attachment_is_refused_even_in_a_replayed_delivery(uploader: TestClient, world: World) -> None:
    """Schemathesis found it: a delivery again (the same provider id) answered the first event,
    so an attachment the document refuses (an empty file) got a 200 then."""
    fields = {"author": "ada", "provider_event_id": "slack:1"}
    ok(upload(uploader, "c1", fields, [("cas", ("a.txt", b"bytes", "text/plain"))]))
    before = snapshot(world)
    for attempt in ({"author": "ada"}, fields):
        empty = upload(uploader, "c1", attempt, [("cas", ("b.txt", b"", "text/plain"))])
        assert refused(empty, 400, "validation_error")["detail"] == "attachment 0 is empty"
    assert snapshot(world) == before and spooled(world.pk) == []


def test_a_crashed_upload_s_spool_file_is_swept_once_stale(pk: Pk) -> None:
    spool = uploads.spool_directory(pk.settings.blob_root)
    stale, fresh = spool / f"{uploads.SPOOL_PREFIX}old", spool / f"{uploads.SPOOL_PREFIX}new"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"another process's upload under way")
    old = stale.stat().st_mtime - uploads.STALE_AFTER_S - 60
    os.utime(stale, (old, old))
    assert uploads.sweep_stale(pk.settings.blob_root) == 1
    assert not stale.exists() and fresh.exists()


def test_a_running_server_sweeps_a_crashed_upload_s_spool_file_at_its_next_upload(
    uploader: TestClient, world: World
) -> None:
    """A supervisor restarts a crashed API at once, long before its spool files are stale: the
    sweep runs with every upload too, not only when the app starts."""
    spool = uploads.spool_directory(world.pk.settings.blob_root)
    stale = spool / f"{uploads.SPOOL_PREFIX}left-by-a-crash"
    stale.write_bytes(b"x" * 1024)
    old = stale.stat().st_mtime - uploads.STALE_AFTER_S - 60
    os.utime(stale, (old, old))
    answer = upload(uploader, "c1", {"author": "ada"}, [("file", ("a.txt", b"bytes"))])
    assert answer.status_code == 200, answer.text
    assert not stale.exists() and spooled(world.pk) == []


# -- the code path: streamed, never buffered ------------------------------------------------------


def test_the_default_limit_streams_through_in_chunks(pk: Pk, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB exactly is stored (and 64 MiB + 1 refused) through the default app, driven with a
    body that arrives in 64 KiB messages. The guard never reads an upload's body, and each
    write to a spool file is at most one such message: the memory an upload takes does not
    grow with its size. A client that leaves half-way leaves nothing behind either."""
    limit = validation.MAX_ATTACHMENT_BYTES
    app = http_app.create_app(pk, tokens=TOKENS)
    buffered: list[int] = []
    real_read_body = guard._read_body

    async def read_body(receive: Any, cap: int) -> bytes | None:
        buffered.append(cap)
        return await real_read_body(receive, cap)

    monkeypatch.setattr(guard, "_read_body", read_body)
    writes: list[int] = []
    real_flush = uploads._Parts.flush

    def flush(self: uploads._Parts) -> None:
        writes.append(sum(len(data) for _, data in self.pending))
        real_flush(self)

    monkeypatch.setattr(uploads._Parts, "flush", flush)
    status, body = drive(app, "c1", limit, digest := hashlib.sha256())
    assert status == 200, body
    [attachment] = body["attachments"]
    assert attachment["size"] == limit
    with pk.open_attachment(attachment["id"]) as stored:
        assert _sha256(stored) == digest.hexdigest()
    assert buffered == [], "the guard read an upload's body"
    assert len(writes) >= limit // CHUNK and max(writes) <= CHUNK

    before = snapshot(world)
    status, body = drive(app, "c1", limit + 1, hashlib.sha256())
    assert (status, body["error"]) == (413, "payload_too_large")
    assert snapshot(world) == before and spooled(pk) == []
    status, body = drive(app, "c1", limit, hashlib.sha256(), gone_after=100)  # the client leaves half-way
    assert (status, body["error"]) == (400, "validation_error")
    assert snapshot(world) == before and spooled(pk) == []


def drive(
    app: FastAPI, conversation_id: str, size: int, digest: Any, *, gone_after: int | None = None
) -> tuple[int, Any]:
    """POST an upload of ``size`` bytes to the ASGI app in CHUNK-sized messages; with
    ``gone_after``, the client disconnects after that many."""
    pattern = hashlib.sha256(b"pattern").digest() * (CHUNK // 32)

    def data() -> Iterator[bytes]:
        for offset in range(0, size, CHUNK):
            piece = pattern[: min(CHUNK, size - offset)]
            digest.update(piece)
            yield piece

    body = rechunked(multipart([("author", None, b"ada"), ("file", "big.bin", data())]))
    headers = [
        (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
        (b"authorization", AS_HOST["Authorization"].encode()),
    ]
    path = f"/v1/conversations/{conversation_id}/events/upload"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []
    finished = False
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal finished, received
        received += 1
        if finished or (gone_after is not None and received > gone_after):
            return {"type": "http.disconnect"}
        chunk = next(body, None)
        if chunk is None:
            finished = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(app, scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def multipart(parts: Iterable[tuple[str, str | None, bytes | Iterable[bytes]]]) -> Iterator[bytes]:
    """A ``multipart/form-data`` body, piece by piece (a part's data may come in pieces)."""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        yield f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        yield from [data] if isinstance(data, bytes) else data
        yield b"\r\n"
    yield f"--{BOUNDARY}--\r\n".encode()


def rechunked(pieces: Iterable[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """The same bytes in messages of at most ``size`` (as a server hands them on)."""
    pending = b""
    for piece in pieces:
        pending += piece
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
    if pending:
        yield pending


def _sha256(stream: Any) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


# -- the Python API the route uses ----------------------------------------------------------------


def test_attachments_from_files_are_stored_in_chunks(pk: Pk, tmp_path: Path) -> None:
    pk.create_conversation("c1")
    source = tmp_path / "photo.jpg"
    source.write_bytes(b"jpeg bytes " * 1000)
    twin = pk.ingest_event(
        "c1", author="ada", body=None, attachments=[NewAttachment.cas(source.read_bytes(), name="t")]
    )
    event = pk.ingest_event(
        "c1",
        author="ada",
        body=None,
        attachments=[NewAttachment.file_from(source, name="photo.jpg"), NewAttachment.cas_from(source, name="p")],
    )
    real, cas = event.attachments
    assert (real.size, real.binding.value) == (source.stat().st_size, "real_file")
    assert cas.blob_id == twin.attachments[0].blob_id, "CAS dedupe by the hash taken from the file"
    with pk.open_attachment(real.id) as stored:
        assert stored.read() == source.read_bytes()
    assert source.exists(), "the caller's file is left where it was"


def test_a_file_that_changes_before_it_is_stored_is_refused(pk: Pk, tmp_path: Path) -> None:
    pk.create_conversation("c1")
    source = tmp_path / "doc.txt"
    source.write_bytes(b"reviewed bytes")
    attachment = NewAttachment.file_from(source, name="doc.txt")
    source.write_bytes(b"swapped bytes!")  # the same size, other bytes
    with pytest.raises(purgekeeper.ValidationError, match="changed"):
        pk.ingest_event("c1", author="ada", body="x", attachments=[attachment])
    assert pk.read_conversation("c1") == []
    assert [p for p in pk.settings.file_root.rglob("*") if p.is_file()] == []
    for bad in (tmp_path / "missing", tmp_path / "empty"):
        if bad.name == "empty":
            bad.write_bytes(b"")
        with pytest.raises(purgekeeper.ValidationError):
            NewAttachment.cas_from(bad, name="x")


def test_an_upload_s_spool_file_never_holds_its_bytes_in_plain_text(
    pk: Pk, uploader: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tried: an upload of a file whose bytes repeat a marker, with every spool file read at
    the moment the ingest is called (the spool complete, the blob not yet written). No spool
    file holds the marker, the event's attachment reads back whole, and after the request no
    file under the roots holds it either (the blob is sealed)."""
    pk.create_conversation("c-spool")
    mark = b"MARK-spool-" + os.urandom(8).hex().encode()
    seen: dict[str, bool] = {}
    ingest = pk.ingest_event

    def watching(*args: Any, **kwargs: Any) -> Any:
        for spool in uploads.spool_directory(pk.settings.blob_root).iterdir():
            seen[spool.name] = mark in spool.read_bytes()
        return ingest(*args, **kwargs)

    monkeypatch.setattr(pk, "ingest_event", watching)
    answer = upload(uploader, "c-spool", {"author": "ada"}, [("file", ("report.pdf", mark * 5000, "application/pdf"))])
    event = ok(answer)
    assert seen and not any(seen.values()), seen
    attachment_id = event["attachments"][0]["id"]
    assert pk.open_attachment(attachment_id).read() == mark * 5000
    roots = (pk.settings.blob_root, pk.settings.file_root)
    assert [p for root in roots for p in root.rglob("*") if p.is_file() and mark in p.read_bytes()] == []
