"""What encryption at rest costs: each content operation sealed, against the same operation
with sealing switched off in this script, in one run, on SQLite (the embedded default) and,
with ``--database-url``, on PostgreSQL too (``make bench``).

**The two sides.** Each run opens two handles (``purgekeeper.open(..., workers="none")``),
each on a database, blob and file roots and checkpoint directory (with its key store) of its
own, in a temporary directory (``--dir``; on PostgreSQL, a scratch database each on the
server ``--database-url`` names):

- **sealed** is the library as it ships, untouched: ``ingest_event`` takes the event's key
  from ``ContentKeys`` (made 64 at a time, one durable write of the key store per 64 keys),
  seals the body (and each attachment's name) under it, and for an attachment takes a second
  key for the blob and writes its bytes sealed in 64 KiB chunks (``seal_stream``);
  ``read_conversation`` looks its events' keys up in the key store once per read (its cache,
  after one read of the store's generation) and opens every body and name;
  ``open_attachment`` looks the blob's key up and returns a reader that opens each chunk.
- **plain** is the same code with three names replaced while the plain side's calls run (and
  only then: the sealed side's calls never see the replacements), so that it takes the path
  of content written before sealing, end to end:

  1. ``purgekeeper.commands.sealed_content.SealedEvent.of`` returns a ``SealedEvent`` with
     ``key_id=None``, the body and the names as given, and new attachment ids (as the real
     one makes them): no key is taken, nothing is sealed. The event row has ``key_id`` NULL,
     so its reads take the plain path: no key is looked up (``Opened`` asks the key store
     nothing for no ids) and nothing is opened.
  2. ``purgekeeper.commands.content_commands.stage`` (the name ``ingest_event`` calls) is
     the real ``stage`` given a key source whose ``take()`` answers ``(None, b"")``: the
     blob's id, path and SHA-256 as before, and ``key_id=None`` (which the ``blobs`` row
     then holds, so ``open_attachment`` returns the file as it is, with no lookup).
  3. ``purgekeeper.commands.attachments.seal_stream`` returns the plaintext unchanged, so
     ``BlobStore.write`` gets the attachment's bytes, as before sealing.

  What the plain side still does: the same validation, transactions, fence checks, gate
  checks, triggers, durable atomic file writes (fsynced alike) and file opens; its handle
  has a key store (opened, never written: the script checks it holds no key). What it does
  not do: take or look up keys, seal, open, or base64-encode anything. The script checks
  afterwards that it did what it says: the sealed side's rows carry a ``key_id`` and a
  ``pk1:`` body and its blob file is ``sealed_size`` bytes; the plain side's rows have
  ``key_id`` NULL and the body as given, its blob file holds the bytes as given; both sides
  read back the same bodies and bytes.

**Measured in each of ``--runs`` runs** (default 3; fresh databases every run), the sides in
turns (sealed, plain, then plain, sealed, ...) so that a busy neighbour or a slow disk
weighs on both alike, after untimed warm-up calls of each:

- ``ingest``: ``ingest_event`` of a short body, no attachment (``INGEST_CALLS`` calls a
  side); the median per call, and the mean (which carries the sealed side's key-store write
  every 64 ingests, that the median leaves out);
- ``read_50``, ``read_1000``: ``read_conversation`` of a conversation of 50 and of 1,000
  events with 200-character bodies (ingested through each side's own path beforehand),
  read again and again (warm);
- ``upload``: ``ingest_event`` with one ``NewAttachment.file`` of 1 MiB (random bytes, the
  same for both sides);
- ``download``: ``open_attachment(...).read()`` of one such attachment, again and again.

A figure is the median of the runs' medians; its ratio (sealed / plain) the median of the
runs' ratios (``mean_ratio``: the same of the means). Targets, on the medians: ingest and
reads <= 1.15x, upload and download <= 1.2x; ``--strict`` exits 1 when one is missed.
``--tiny`` (tests/bench) runs every part with a few calls. The last line printed is the
figures as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

from scratch import ScratchDatabase, open_under, shown_url
from sqlalchemy import text

from purgekeeper.commands import attachments, content_commands
from purgekeeper.commands.attachments import NewAttachment
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.sealed_content import SealedEvent
from purgekeeper.storage import keystore_files
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.sealed_files import sealed_size
from purgekeeper.storage.sealing import is_sealed_text

SIDES = ("sealed", "plain")
SHORT_BODY = "see you at the standup tomorrow"
READ_BODY = "a message of two hundred characters, " * 5 + "padded to size...."
READ_SIZES = {"read_50": 50, "read_1000": 1_000}
ATTACHMENT_BYTES = 1024 * 1024
INGEST_CALLS = 320  # a side, a run: the sealed side refills its pool of 64 keys five times
READ_CALLS = {"read_50": 150, "read_1000": 30}
UPLOAD_CALLS = 100
DOWNLOAD_CALLS = 100
WARM_CALLS = 5  # a side, before each operation's timed calls
TARGETS = {"ingest": 1.15, "read_50": 1.15, "read_1000": 1.15, "upload": 1.2, "download": 1.2}
OPERATIONS = {
    "ingest": "`ingest_event`, a short body",
    "read_50": "`read_conversation`, 50 events (warm)",
    "read_1000": "`read_conversation`, 1,000 events (warm)",
    "upload": "`ingest_event` with a 1 MiB `NewAttachment.file`",
    "download": "`open_attachment(...).read()`, 1 MiB",
}


# -- sealing switched off (the plain side only) ----------------------------------------------------


class _NoKey:
    """A key source for the plain side's ``stage``: no key, so the blob row's ``key_id`` is NULL."""

    def take(self) -> tuple[None, bytes]:
        return None, b""


def _plain_event(
    cls: type[SealedEvent], keys: ContentKeys, event_id: str, body: str | None, names: Sequence[str]
) -> SealedEvent:
    """``SealedEvent.of`` without a key: ``key_id`` None, the body and names as given."""
    ids = [uuid.uuid4().hex for _ in names]
    return cls(
        key_id=None,  # type: ignore[arg-type]  # the column is nullable: content from before sealing
        body=body,
        attachments=tuple(zip(ids, names, strict=True)),
        names=dict(zip(ids, names, strict=True)),
    )


_real_stage = attachments.stage


def _plain_stage(attachment: NewAttachment, keys: ContentKeys) -> attachments.StagedBlob | None:
    """The real ``stage``, its key from ``_NoKey``."""
    return _real_stage(attachment, _NoKey())  # type: ignore[arg-type]


def _plain_stream(key: bytes, plaintext: Any, *, bound_to: str) -> Any:
    """The bytes as given, for ``BlobStore.write``."""
    return plaintext


@contextlib.contextmanager
def without_sealing() -> Iterator[None]:
    """The three replacements of the module's docstring, undone on exit."""
    with (
        mock.patch.object(SealedEvent, "of", classmethod(_plain_event)),
        mock.patch.object(content_commands, "stage", _plain_stage),
        mock.patch.object(attachments, "seal_stream", _plain_stream),
    ):
        yield


# -- the sides ------------------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    pk: Purgekeeper
    attachment_id: str = ""  # the attachment its downloads read
    samples: dict[str, list[float]] = field(default_factory=dict)

    def scope(self) -> contextlib.AbstractContextManager[None]:
        return without_sealing() if self.name == "plain" else contextlib.nullcontext()

    def timed(self, call: Callable[[], object]) -> float:
        with self.scope():  # entered and left outside the timing
            begin = time.perf_counter()
            call()
            return time.perf_counter() - begin


def open_side(name: str, url: str, root: Path) -> Side:
    root.mkdir(parents=True, exist_ok=True)
    pk = open_under(url, root)
    return Side(name, pk)


@contextlib.contextmanager
def database_urls(server_url: str | None, root: Path, tag: str) -> Iterator[dict[str, str]]:
    """A database for each side: a SQLite file in its directory, or a scratch PostgreSQL
    database on ``server_url``."""
    if server_url is None:
        for name in SIDES:
            (root / name).mkdir(parents=True, exist_ok=True)
        yield {name: f"sqlite:///{root / name / 'pk.db'}" for name in SIDES}
        return
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(ScratchDatabase(server_url, f"pk_sealing_{os.getpid()}_{tag}_{name}")).url
            for name in SIDES
        }


def seed(side: Side, data: bytes) -> None:
    """Untimed, through the side's own path: the conversations, the read conversations'
    events, and the attachment its downloads read."""
    pk = side.pk
    with side.scope():
        for conversation in ("ingest", "uploads", *READ_SIZES):
            pk.create_conversation(conversation)
        for conversation, events in READ_SIZES.items():
            for _ in range(events):
                pk.ingest_event(conversation, author="ada", body=READ_BODY)
        event = pk.ingest_event("uploads", author="ada", body="a file", attachments=[file_of(data)])
    side.attachment_id = event.attachments[0].id


def file_of(data: bytes) -> NewAttachment:
    return NewAttachment.file(data, name="report.pdf")


# -- one run ----------------------------------------------------------------------------------------


Call = Callable[[Side], Callable[[], object]]  # a side's call of the operation


def in_turns(sides: list[Side], operation: str, call: Call, counts: dict[str, int]) -> None:
    """The operation's timed calls of each side, in turns, the side that goes first
    alternating; after untimed warm-up calls of each."""
    for side in sides:
        for _ in range(counts["warm"]):
            with side.scope():
                call(side)()
    for side in sides:
        side.samples[operation] = []
    for index in range(counts[operation]):
        for side in sides if index % 2 == 0 else sides[::-1]:
            side.samples[operation].append(side.timed(call(side)))


def ingest(side: Side) -> Callable[[], object]:
    return lambda: side.pk.ingest_event("ingest", author="ada", body=SHORT_BODY)


def reading(conversation: str) -> Call:
    return lambda side: lambda: side.pk.read_conversation(conversation)


def uploading(data: bytes) -> Call:
    def upload(side: Side) -> Callable[[], object]:
        return lambda: side.pk.ingest_event("uploads", author="ada", body="a file", attachments=[file_of(data)])

    return upload


def download(side: Side) -> Callable[[], bytes]:
    def read() -> bytes:
        with side.pk.open_attachment(side.attachment_id) as stream:
            return stream.read()

    return read


def measure(sides: list[Side], data: bytes, counts: dict[str, int]) -> None:
    in_turns(sides, "ingest", ingest, counts)
    for conversation in READ_SIZES:
        in_turns(sides, conversation, reading(conversation), counts)
    in_turns(sides, "upload", uploading(data), counts)
    in_turns(sides, "download", download, counts)


def one_run(server_url: str | None, root: Path, tag: str, counts: dict[str, int]) -> dict[str, Any]:
    data = os.urandom(ATTACHMENT_BYTES)
    with database_urls(server_url, root, tag) as urls:
        sides = [open_side(name, urls[name], root / name) for name in SIDES]
        try:
            for side in sides:
                seed(side, data)
            measure(sides, data, counts)
            checks = checks_of(sides, data)
        finally:
            for side in sides:
                side.pk.close()
    figures: dict[str, Any] = {"checks": checks}
    for operation in OPERATIONS:
        sealed, plain = (side.samples[operation] for side in sides)
        figures[operation] = {
            "sealed_ms": statistics.median(sealed) * 1000,
            "plain_ms": statistics.median(plain) * 1000,
            "sealed_mean_ms": statistics.fmean(sealed) * 1000,
            "plain_mean_ms": statistics.fmean(plain) * 1000,
            "ratio": statistics.median(sealed) / statistics.median(plain),
            "mean_ratio": statistics.fmean(sealed) / statistics.fmean(plain),
        }
    return figures


# -- the checks: each side did what the docstring says ---------------------------------------------


def checks_of(sides: list[Side], data: bytes) -> dict[str, bool]:
    sealed, plain = sides
    bodies = {side.name: [event.body for event in side.pk.read_conversation("read_50")] for side in sides}
    found = {
        "same_bodies_read": bodies["sealed"] == bodies["plain"] == [READ_BODY] * READ_SIZES["read_50"],
        "same_bytes_read": download(sealed)() == download(plain)() == data,
        "sealed_side_sealed": stored(sealed) == Stored(0, True, True, sealed_size(len(data))),
        "plain_side_plain": stored(plain) == Stored(event_count(plain), False, False, len(data)),
        "plain_key_store_empty": keys_made(plain) == 0,
    }
    for name, ok in found.items():
        if not ok:
            print(f"  CHECK FAILED: {name}", flush=True)
    return found


@dataclass(frozen=True)
class Stored:
    """What a side wrote: its events without a key, whether a body is sealed text (the
    first of the 50-event conversation), whether its download's blob has a key, and the
    size of that blob's file."""

    keyless_events: int
    body_sealed: bool
    blob_keyed: bool
    blob_file_bytes: int


def stored(side: Side) -> Stored:
    with side.pk.db.read() as conn:
        keyless = conn.exec_driver_sql("SELECT count(*) FROM events WHERE key_id IS NULL").scalar_one()
        body = conn.exec_driver_sql(
            "SELECT e.body FROM events e JOIN placements p ON p.event_id = e.id "
            "WHERE p.conversation_id = 'read_50' LIMIT 1"
        ).scalar_one()
        blob = conn.execute(
            text("SELECT b.path, b.key_id FROM attachments a JOIN blobs b ON b.id = a.blob_id WHERE a.id = :a"),
            {"a": side.attachment_id},
        ).one()
    size = (side.pk.settings.file_root / blob.path).stat().st_size
    return Stored(int(keyless), is_sealed_text(body), blob.key_id is not None, size)


def event_count(side: Side) -> int:
    with side.pk.db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one())


def keys_made(side: Side) -> int:
    """The keys in the side's key store (``keys.db``)."""
    with contextlib.closing(keystore_files.connect(side.pk.key_store.directory)) as db:
        return int(db.execute("SELECT count(*) FROM keys").fetchone()[0])


# -- across runs ----------------------------------------------------------------------------------


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for operation in OPERATIONS:
        per_run = [run[operation] for run in runs]
        out[operation] = {
            **{
                name: round(statistics.median(run[name] for run in per_run), 3)
                for name in ("sealed_ms", "plain_ms", "sealed_mean_ms", "plain_mean_ms")
            },
            "ratio": round(statistics.median(run["ratio"] for run in per_run), 3),
            "mean_ratio": round(statistics.median(run["mean_ratio"] for run in per_run), 3),
            "ratios": [round(run["ratio"], 3) for run in per_run],
        }
    out["checks_ok"] = all(all(run["checks"].values()) for run in runs)
    return out


def print_table(backend: str, figures: dict[str, Any]) -> None:
    print(f"\n{backend}: medians of {len(figures['ingest']['ratios'])} run(s)")
    print("| operation | sealed | plain | sealed / plain (each run) | target |")
    print("|---|---|---|---|---|")
    for operation, title in OPERATIONS.items():
        found = figures[operation]
        each = ", ".join(f"{r:.2f}" for r in found["ratios"])
        verdict = "met" if found["ratio"] <= TARGETS[operation] else "**missed**"
        print(
            f"| {title} | {found['sealed_ms']:.3f} ms | {found['plain_ms']:.3f} ms | "
            f"{found['ratio']:.2f}x ({each}) | <= {TARGETS[operation]}x: {verdict} |"
        )
    ingest = figures["ingest"]
    print(
        f"ingest, mean per call (with the key store's writes): sealed {ingest['sealed_mean_ms']:.3f} ms, "
        f"plain {ingest['plain_mean_ms']:.3f} ms, {ingest['mean_ratio']:.2f}x"
    )


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(143)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="a PostgreSQL server: measure there too")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary directories go")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: every part, a few calls")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    counts = {"ingest": INGEST_CALLS, **READ_CALLS, "upload": UPLOAD_CALLS, "download": DOWNLOAD_CALLS}
    counts["warm"] = WARM_CALLS
    if args.tiny:  # the figures' names stay; the 1,000-event conversation holds 100
        args.runs, counts = 1, dict.fromkeys(counts, 2)
        READ_SIZES.update(read_1000=100)
    signal.signal(signal.SIGTERM, _terminate)
    backends: dict[str, str | None] = {"sqlite": None}
    if args.database_url:
        backends["postgresql"] = args.database_url
    where = ", PostgreSQL at " + shown_url(args.database_url) if args.database_url else ""
    print(f"purgekeeper sealing benchmark: SQLite{where}; {args.runs} run(s); {os.cpu_count()} CPUs", flush=True)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pk-sealing-", dir=args.dir) as tmp:
        os.environ["PURGEKEEPER_DATA_DIR"] = str(Path(tmp) / "data")
        for backend, server_url in backends.items():
            runs = []
            for run in range(args.runs):
                started = time.perf_counter()
                runs.append(one_run(server_url, Path(tmp) / f"{backend}-{run}", f"r{run}", counts))
                ratios = {operation: round(runs[-1][operation]["ratio"], 3) for operation in OPERATIONS}
                print(
                    json.dumps(
                        {"backend": backend, "run": run, "seconds": round(time.perf_counter() - started, 1), **ratios}
                    ),
                    flush=True,
                )
            figures[backend] = summary(runs)
            print_table(backend, figures[backend])
    missed = [
        f"{backend} {operation}"
        for backend, found in figures.items()
        for operation, target in TARGETS.items()
        if found[operation]["ratio"] > target
    ]
    print()
    for name in missed:
        print(f"  MISSED {name}: {figures[name.split()[0]][name.split()[1]]['ratio']}x")
    checks_ok = all(found["checks_ok"] for found in figures.values())
    print(json.dumps({**figures, "met": not missed, "checks_ok": checks_ok}, sort_keys=True))
    return 1 if not checks_ok or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
