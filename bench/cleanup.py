"""Cleanup benchmark of conversation purges on PostgreSQL (``make bench``).

The data (seeded once, untimed, with ``INSERT ... SELECT ... FROM generate_series``, so the
schema's triggers fire): 1,300 conversations of 1,000 events each (1,300,000 events; ``--scale``
shrinks the events per conversation), each event with a 200-byte body, a provider event id and
one placement. Every event and blob of a conversation that is purged names a key
(``key_id``), made in the handle's key store at seeding, so that the steps destroy keys as
they do for sealed content (the bodies stay plain text: nothing here opens them).
Every fifth event (20%) carries one attachment of 4 KiB (``--file-bytes``), its
bytes written to disk at the path its blob row names, in the layout new blobs get: CAS blobs
(``ab/<sha256>-<blob id>`` under the blob root) and real files (``ab/<blob id>`` under the
file root), alternately. The 1,000 conversations have these roles:

- 100 per run (``--per-run``) for the library, 100 per run for the plain baselines and 100
  per run for the same-work bodies baseline (900 in all);
- one warm-up conversation for each of the three, purged untimed before the runs (``--cold``
  skips that);
- 397 *keepers*, never purged. A third of the attachments of every purged conversation (the
  attachment slots 0, 3, 6, ...: 67 of 200) are *shared*: their blob is also bound to an
  attachment of an event in a keeper conversation, so the attachments step must keep its
  bytes. (The keepers' partner attachments are among their own 20%, so in the whole database
  40% of the attachments bind a blob with two references.)

Measured in each of ``--runs`` runs (default 3), on 100 fresh conversations per side:

(a) rows/s of body removal. ``purgekeeper``: ``purge_conversation`` of the 100 conversations,
    then ``runner.run_step`` of each purge's bodies step, called directly, in one thread, with
    the library's ``StepContext.batch_size`` (``--batch-size``, default
    ``purgekeeper.workers.cleanup.DEFAULT_BATCH_SIZE``); the figure is the steps' ``removed`` progress (the
    NULLed bodies, the deleted placements and the NULLed attachment names) over the summed wall time of those
    ``run_step`` calls (claim, batches, unparking the attachments step, finish).
    ``baseline``: plain psycopg on one connection, per conversation, batches of the same size,
    each ``SELECT`` the next event ids from its placements, ``UPDATE events SET body = NULL``,
    ``DELETE FROM placements``, one commit per batch; the same number of rows (no runs or
    derivatives are seeded, so neither side deletes any).
(b) files/s of attachment deletion. ``purgekeeper``: ``runner.run_step`` of each purge's
    attachments step (which the bodies step unparked): the blobs it unlinked (its ``removed``
    progress) over the summed wall time of those calls; the shared blobs are retained. The
    step unlinks a batch's files ``StepContext.unlink_threads`` at a time (``--unlink-threads``,
    default ``purgekeeper.workers.cleanup.DEFAULT_UNLINK_THREADS``; 1 measures it one after another).
    Two baselines, each unlinking as many files of the same shape with the same number of
    threads as the step (each thread one share of the files; paths read beforehand and the
    threads started, untimed): ``unlink``, plain ``os.unlink`` of the absolute path (the
    unshared attachment files of the baseline's conversations); and ``safe unlink``, the
    least a symlink-safe deleter does, on copies of those files (same relative paths under
    two other roots, written at seeding): per file, ``os.open(name, O_DIRECTORY|O_NOFOLLOW,
    dir_fd=...)`` of each directory below the root (the roots' descriptors are held, as the
    store resolves its roots once), ``os.unlink(name, dir_fd=...)``, and the closes. Neither
    fsyncs; the step fsyncs each directory it unlinked from once per batch, before it marks
    the blobs deleted.
(d) the same-work baselines (issue 37): hand-written, they do the durable work the steps do,
    with the same batch size, and none of the step protocol. Each ratio below is the
    library's figure of (a) or (b) over its same-work baseline's, within a run.

    ``rows_same_work_ratio``, on its own 100 conversations per run. It does, per
    conversation, in batches of ``--batch-size`` events (``batch size + 1`` placements read
    to know the last batch, as the step reads):
      - the same writes, with the schema's triggers ON: ``INSERT`` of the events' tombstones
        (``ON CONFLICT DO NOTHING``), ``UPDATE events SET body = NULL``, ``UPDATE attachments
        SET name = NULL`` (the name erasure), ``DELETE FROM placements``;
      - the same key destruction: the batch's event keys read (as the step reads them) and
        destroyed with the handle's ``pk.keys.destroy`` before the commit (one durable write
        of the key store per batch);
      - one commit per batch, committed as the step's batches are: without waiting for the
        WAL flush while more batches follow, durably for the last one.
    It does not: claim the step, take or renew a lease, write progress rows, finish the
    step or unpark the attachments step; ask which events are live in another conversation
    (none are, in this data; the step must ask); probe for admissions and derivatives, or
    look for the conversation's runs and derivatives (none are seeded: the step's statements
    for them change no row); check whether other sessions are active (the yield); go
    through SQLAlchemy.

    ``files_same_work_ratio``, on a third copy of the plain baselines' files (the same
    paths under two other roots, written at seeding; the blobs' keys are the plain
    baselines' conversations' own). It does, per conversation (a purge), in batches of
    ``--batch-size`` of its unshared blobs in blob id order (paths and key ids read
    beforehand, untimed):
      - the same key destruction: the batch's blob keys destroyed with ``pk.keys.destroy``
        (one durable write of the key store per batch), before the unlinks;
      - the same unlinks: the files grouped by directory, ``--unlink-threads`` at a time (a
        directory's files to one thread), each directory opened once by its absolute path
        and its files unlinked through that descriptor;
      - the same fsyncs: each directory the batch touched, once, ``max(unlink threads,
        SYNCS_AT_A_TIME)`` at a time, as ``BlobStore.discard_all`` does.
    It does not: claim, lease, write progress or finish; walk the purge's fenced events,
    find their blobs, lock them or count their live references; mark blobs deleting and
    deleted (the step's two durable commits per purge); check each path is the blob's
    canonical one or walk the directories with ``O_NOFOLLOW`` (the ``safe unlink`` baseline
    prices that walk).

    The plain baselines of (a) and (b) stay in the report as the price of the guarantees,
    with no target: they run with the triggers off, write no fence and no key, and their
    unlinks are not made durable.
(c) time from acceptance to complete: from the first ``purge_conversation`` of the 100 to the
    end of the last attachments step; and per conversation, its acceptance plus its two steps.

The side that goes first alternates between runs. Before each run, untimed: ``sync`` (so both
sides unlink files whose blocks are on disk), ``VACUUM ANALYZE`` and ``CHECKPOINT`` (as
autovacuum and the checkpointer would do between bursts). After each run,
untimed, the result is checked: every library purge is ``complete``, the bodies are NULL and
the placements gone on both sides, the unshared blobs are ``deleted`` and their files gone, the
shared ones ``present`` with their files still there.

Figures are reported per run, then as the median of the runs; each ratio is taken within a run
(both sides from the same run) and the median of those ratios is reported.

``--batch-sizes 500,2000,10000`` sweeps body removal over batch sizes: ``--runs`` runs at each
size, the sizes in turn (run 1 at the first size, run 2 at the second, ...; the side that goes
first alternates per round), each against the baseline at the same size; the main figures are
the first size's, and ``batch_sweep`` in the JSON line holds each size's rows/s and ratios.
Conversations of 1,000 events are one batch at 2,000 and at 10,000 alike: a sweep wants
bigger ones and fewer of them (``--scale 10 --conversations 30 --per-run 1``: 300,000 events
in conversations of 10,000).

Targets (issue 37): ``rows_same_work_ratio`` >= 0.8 and ``files_same_work_ratio`` >= 0.8;
the ratios against the plain baselines have none. ``--strict`` exits 1 when one is missed (or a
check fails); otherwise the exit status reports only errors.

``--statements N`` profiles the library's steps of the timed runs statement by statement
(``bench/statements.py``): per step kind, the statements each step sent, their share of its
time, and the ``N`` that took the longest.

The server is ``PK_BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
the script creates ``pk_bench_<pid>`` there and drops it at the end, also on failure or SIGTERM.
The attachment files go to a temporary directory (under ``--dir``, default the system's),
removed at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from scratch import ScratchDatabase, shown_url
from statements import StatementProfile

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.storage import blobstore
from purgekeeper.storage.blobstore import SYNCS_AT_A_TIME
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.workers import runner
from purgekeeper.workers.cleanup import DEFAULT_BATCH_SIZE, DEFAULT_UNLINK_THREADS, StepContext

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CONVERSATIONS = 1_300  # 903 purged (3 runs x 3 x 100, and 3 warm-ups) and 397 keepers
EVENTS_PER_CONVERSATION = 1_000  # x --scale
ATTACHMENT_EVERY = 5  # one event in five (20%) carries an attachment
SHARED_EVERY = 3  # attachment slots 0, 3, 6, ... (a third) of a purged conversation are shared
PER_RUN = 100
SIDES = 3  # conversations per run: the library's, the plain baseline's, the same-work bodies baseline's
FILE_BYTES = 4096
BODY_BYTES = 200
SEED_CONVERSATIONS_PER_CHUNK = 100  # 100,000 events (at full scale) per statement and transaction
TARGET_ROWS_SAME_WORK_RATIO = 0.8  # issue 37: against the baselines that do the same durable work
TARGET_FILES_SAME_WORK_RATIO = 0.8
KEYS_PER_WRITE = 10_000  # keys created per write of the key store, at seeding


# -- connection strings and the scratch database ------------------------------------------------


# -- the layout of the data -----------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Which conversation plays which role, and where each attachment's blob comes from.

    Conversation ``i`` is ``c<i:04d>``; its event ``n`` is ``c<i:04d>-e<n:06d>``; its attachment
    slot ``k`` sits on event ``5k``. Conversations ``0 .. purgeable-1`` are purged (run ``r``:
    the library takes ``[3*per_run*r, +per_run)``, the plain baseline the next ``per_run``,
    the same-work bodies baseline the ``per_run`` after; then one warm-up conversation for
    each of the three); the rest are keepers. Every event and blob of a purgeable
    conversation has a key in the key store (``key_of``), as sealed content has. Slot ``k`` of a purgeable
    conversation binds its own blob ``md5('blob:c..:k')``; when ``k % 3 == 0`` that blob is
    shared: shared index ``t = i*shared_each + k//3`` is also bound by keeper ``t % keepers`` at
    its slot ``t // keepers``. A keeper's other slots bind blobs of their own."""

    events_each: int
    runs: int
    per_run: int
    conversations: int = CONVERSATIONS

    @property
    def attachments_each(self) -> int:
        return self.events_each // ATTACHMENT_EVERY

    @property
    def shared_each(self) -> int:
        return -(-self.attachments_each // SHARED_EVERY)

    @property
    def unshared_each(self) -> int:
        return self.attachments_each - self.shared_each

    @property
    def warm_up_product(self) -> int:
        return SIDES * self.per_run * self.runs

    @property
    def warm_up_baseline(self) -> int:
        return self.warm_up_product + 1

    @property
    def warm_up_same_work(self) -> int:
        return self.warm_up_product + 2

    @property
    def purgeable(self) -> int:
        return SIDES * self.per_run * self.runs + SIDES

    @property
    def keepers(self) -> int:
        return self.conversations - self.purgeable

    def check(self) -> None:
        if self.attachments_each < 1:
            raise SystemExit("--scale leaves no attachments: use at least 5 events per conversation")
        if self.keepers < 1:
            raise SystemExit(f"{self.runs} runs x {SIDES} x {self.per_run} conversations leave no keeper conversation")
        if -(-self.purgeable * self.shared_each // self.keepers) > self.attachments_each:
            raise SystemExit("too few keeper conversations to hold the partners of the shared attachments")

    def product(self, run: int) -> list[int]:
        start = SIDES * self.per_run * run
        return list(range(start, start + self.per_run))

    def baseline(self, run: int) -> list[int]:
        start = SIDES * self.per_run * run + self.per_run
        return list(range(start, start + self.per_run))

    def same_work(self, run: int) -> list[int]:
        start = SIDES * self.per_run * run + 2 * self.per_run
        return list(range(start, start + self.per_run))

    @staticmethod
    def conversation_id(index: int) -> str:
        return f"c{index:04d}"

    @staticmethod
    def blob_id(index: int, slot: int) -> str:
        return hashlib.md5(f"blob:c{index:04d}:{slot}".encode()).hexdigest()

    def blob_ids(self, indexes: Sequence[int], *, shared: bool) -> list[str]:
        """The blobs of these purgeable conversations' own slots: the shared or the unshared."""
        return [
            self.blob_id(i, k)
            for i in indexes
            for k in range(self.attachments_each)
            if (k % SHARED_EVERY == 0) == shared
        ]

    @property
    def sql_params(self) -> dict[str, int]:
        return {
            "events": self.events_each,
            "slots": self.attachments_each,
            "every": ATTACHMENT_EVERY,
            "shared_every": SHARED_EVERY,
            "purgeable": self.purgeable,
            "keepers": self.keepers,
            "shared_each": self.shared_each,
        }


# -- seeding ------------------------------------------------------------------------------------

CONVERSATION_ID = "'c' || lpad(({})::text, 4, '0')"

SEED_CONVERSATIONS = f"""
INSERT INTO conversations (id)
SELECT {CONVERSATION_ID.format("i")} FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS i
"""

# The key of an event or blob of a purgeable conversation (key_of in SQL); keepers have none.
KEY_OF = "CASE WHEN ({}) < %(purgeable)s::int THEN 'k' || md5('key:' || ({})) END"

SEED_EVENTS = f"""
INSERT INTO events (id, provider_event_id, author, occurred_at, body, key_id)
SELECT c || '-e' || lpad(n::text, 6, '0'), 'prov:' || c || '-e' || lpad(n::text, 6, '0'),
       'author-' || (n %% 7), timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second',
       repeat('x', %(body)s::int), {KEY_OF.format("i", "c || '-e' || lpad(n::text, 6, '0')")}
  FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS i
 CROSS JOIN LATERAL (SELECT {CONVERSATION_ID.format("i")} AS c) AS conv
 CROSS JOIN generate_series(0, %(events)s::int - 1) AS n
"""

SEED_PLACEMENTS = f"""
INSERT INTO placements (event_id, conversation_id)
SELECT c || '-e' || lpad(n::text, 6, '0'), c
  FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS i
 CROSS JOIN LATERAL (SELECT {CONVERSATION_ID.format("i")} AS c) AS conv
 CROSS JOIN generate_series(0, %(events)s::int - 1) AS n
"""

# Every attachment slot of conversations [lo, hi), with the conversation (bc) and slot (bk) whose
# blob it binds: its own, or for a keeper's partner slot, the shared blob of a purgeable one.
SLOTS = f"""
SELECT s.i, {CONVERSATION_ID.format("s.i")} AS c, s.k,
       CASE WHEN s.t IS NULL THEN {CONVERSATION_ID.format("s.i")}
            ELSE {CONVERSATION_ID.format("s.t / %(shared_each)s::int")} END AS bc,
       CASE WHEN s.t IS NULL THEN s.k ELSE (s.t %% %(shared_each)s::int) * %(shared_every)s::int END AS bk
  FROM (SELECT i, k,
               CASE WHEN i >= %(purgeable)s::int AND k * %(keepers)s::int + (i - %(purgeable)s::int)
                         < %(purgeable)s::int * %(shared_each)s::int
                    THEN k * %(keepers)s::int + (i - %(purgeable)s::int) END AS t
          FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS i, generate_series(0, %(slots)s::int - 1) AS k) AS s
"""

# New blobs' layout in the purgekeeper under test (an --against tree's may be the older
# two-level one, ab/cd/...): the seeded rows must pass its blobs trigger.
TWO_LEVEL = blobstore.file_path("0" * 32).count("/") == 2
SHARD_OF = "substr({0}, 3, 2) || '/' || " if TWO_LEVEL else ""
SEED_BLOBS = f"""
INSERT INTO blobs (id, kind, sha256, size, path, key_id)
SELECT b.id, b.kind, b.sha, %(file_bytes)s::int,
       CASE WHEN b.kind = 'cas'
            THEN substr(b.sha, 1, 2) || '/' || {SHARD_OF.format("b.sha")}b.sha || '-' || b.id
            ELSE substr(b.id, 1, 2) || '/' || {SHARD_OF.format("b.id")}b.id END,
       {KEY_OF.format("b.i", "b.id")}
  FROM (SELECT o.i, o.id, o.kind, o.name,
               encode(sha256(convert_to(left(repeat(o.id, %(file_bytes)s::int / 32 + 1), %(file_bytes)s::int), 'UTF8')),
                      'hex') AS sha
          FROM (SELECT x.i, md5('blob:' || x.c || ':' || x.k) AS id,
                       CASE WHEN x.k %% 2 = 0 THEN 'cas' ELSE 'file' END AS kind,
                       'attachment-' || x.k || '.bin' AS name
                  FROM ({SLOTS}) AS x
                 WHERE x.bc = x.c AND x.bk = x.k) AS o) AS b
"""

SEED_ATTACHMENTS = f"""
INSERT INTO attachments (id, event_id, blob_id, binding, name)
SELECT md5('attachment:' || x.c || ':' || x.k), x.c || '-e' || lpad((x.k * %(every)s::int)::text, 6, '0'),
       md5('blob:' || x.bc || ':' || x.bk),
       CASE WHEN x.bk %% 2 = 0 THEN 'legacy_cas' ELSE 'real_file' END,
       'attachment-' || x.k || '.bin'
  FROM ({SLOTS}) AS x
"""


def file_bytes_of(blob_id: str, size: int) -> bytes:
    """The bytes of a blob, as the seed's sha256 computed them: its id repeated, cut to size."""
    return (blob_id * (size // 32 + 1))[:size].encode()


@dataclass(frozen=True)
class Roots:
    blob_root: Path
    file_root: Path

    def absolute(self, kind: str, path: str) -> Path:
        return (self.blob_root if kind == "cas" else self.file_root) / path

    def copies(self) -> Roots:
        """Where the safe baseline's copies of the baseline's files are."""
        return Roots(self.blob_root.with_name("safe-blobs"), self.file_root.with_name("safe-files"))

    def same_work(self) -> Roots:
        """Where the same-work files baseline's copies of the baseline's files are."""
        return Roots(self.blob_root.with_name("same-blobs"), self.file_root.with_name("same-files"))


def seed(url: str, layout: Layout, roots: Roots, file_bytes: int) -> None:
    print("seeding (untimed) ...", flush=True)
    params: dict[str, Any] = {**layout.sql_params, "body": BODY_BYTES, "file_bytes": file_bytes}
    chunks = [
        (lo, min(lo + SEED_CONVERSATIONS_PER_CHUNK, layout.conversations))
        for lo in range(0, layout.conversations, SEED_CONVERSATIONS_PER_CHUNK)
    ]
    with psycopg.connect(url) as conn:
        for label, statement in (
            ("conversations", SEED_CONVERSATIONS),
            ("events", SEED_EVENTS),
            ("placements", SEED_PLACEMENTS),
            ("blobs", SEED_BLOBS),
            ("attachments", SEED_ATTACHMENTS),
        ):
            started = time.perf_counter()
            rows = 0
            for lo, hi in chunks:
                rows += conn.execute(statement, {**params, "lo": lo, "hi": hi}).rowcount
                conn.commit()
            print(f"  {rows:>9,} {label:<13} {time.perf_counter() - started:6.1f} s", flush=True)
        started = time.perf_counter()
        written = write_files(conn, roots, file_bytes)
        written += write_copies(conn, layout, roots.copies(), file_bytes)
        written += write_copies(conn, layout, roots.same_work(), file_bytes)
        print(
            f"  {written:>9,} files of {file_bytes:,} bytes written {time.perf_counter() - started:6.1f} s", flush=True
        )
    started = time.perf_counter()
    settle(url)
    print(f"  sync + VACUUM ANALYZE + CHECKPOINT {time.perf_counter() - started:.1f} s", flush=True)
    with psycopg.connect(url) as conn:
        sizes = conn.execute(
            """SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM events),
                      (SELECT count(*) FROM placements), (SELECT count(*) FROM attachments),
                      (SELECT count(*) FROM blobs),
                      (SELECT count(*) FROM (SELECT blob_id FROM attachments GROUP BY blob_id
                                              HAVING count(*) > 1) AS s),
                      pg_size_pretty(pg_database_size(current_database()))"""
        ).fetchone()
    assert sizes is not None
    conversations, events, placements, attachments, blobs, shared, size = sizes
    print(
        f"  database: {conversations:,} conversations, {events:,} events, {placements:,} placements, "
        f"{attachments:,} attachments ({attachments / events:.0%} of the events), {blobs:,} blobs "
        f"({shared:,} bound twice: {2 * shared / attachments:.0%} of the attachments); {size}",
        flush=True,
    )
    print(
        f"  each purged conversation: {layout.events_each:,} events, {layout.attachments_each:,} attachments, "
        f"{layout.shared_each:,} of them shared with a keeper ({layout.shared_each / layout.attachments_each:.1%})",
        flush=True,
    )


def write_files(conn: psycopg.Connection[Any], roots: Roots, file_bytes: int) -> int:
    """Every blob's bytes at the path its row names (no fsync: the page cache is enough here)."""
    made: set[Path] = set()
    count = 0
    with conn.cursor(name="blob_paths") as cursor:
        cursor.itersize = 10_000
        cursor.execute("SELECT id, kind, path FROM blobs")
        for blob_id, kind, path in cursor:
            target = roots.absolute(kind, path)
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            target.write_bytes(file_bytes_of(blob_id, file_bytes))
            count += 1
    conn.commit()
    return count


def write_copies(conn: psycopg.Connection[Any], layout: Layout, copies: Roots, file_bytes: int) -> int:
    """The files of the baseline's unshared blobs again, at the same paths under the copies'
    roots: the safe baseline unlinks one set of copies, the same-work baseline another."""
    indexes = [i for run in range(layout.runs) for i in layout.baseline(run)] + [layout.warm_up_baseline]
    rows = conn.execute(
        "SELECT id, kind, path FROM blobs WHERE id = ANY(%s)", (layout.blob_ids(indexes, shared=False),)
    ).fetchall()
    conn.commit()
    for blob_id, kind, path in rows:
        target = copies.absolute(kind, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file_bytes_of(blob_id, file_bytes))
    return len(rows)


def seed_keys(pk: Purgekeeper, conn: psycopg.Connection[Any]) -> int:
    """The keys the seeded rows name, made in the handle's key store (untimed): the steps
    destroy them as they destroy a sealed event's or blob's, and so do the same-work
    baselines. (The bodies stay plain text: nothing here opens them.)"""
    key_ids = [
        row[0]
        for row in conn.execute(
            "SELECT key_id FROM events WHERE key_id IS NOT NULL "
            "UNION ALL SELECT key_id FROM blobs WHERE key_id IS NOT NULL"
        )
    ]
    conn.commit()
    for start in range(0, len(key_ids), KEYS_PER_WRITE):
        pk.keys.store.create(key_ids[start : start + KEYS_PER_WRITE])
    return len(key_ids)


def settle(url: str) -> None:
    """Untimed, before each run: the planner sees the tombstones of the runs before, the dead
    row versions are gone (as autovacuum would do), no checkpoint falls inside a run, and every
    attachment file is on disk (unlinking a file whose blocks are allocated costs more than
    unlinking one still in the page cache; both sides now meet the former)."""
    os.sync()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.Error as exc:  # not a superuser: a checkpoint may fall inside the timings
            print(f"  (CHECKPOINT skipped: {exc})")


# -- the library side -----------------------------------------------------------------------------


@dataclass
class ProductSide:
    accept_s: list[float] = field(default_factory=list)
    bodies_s: list[float] = field(default_factory=list)
    attachments_s: list[float] = field(default_factory=list)
    rows: int = 0
    files: int = 0
    retained: int = 0
    window_s: float = 0.0
    purge_ids: list[str] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        return self.rows / sum(self.bodies_s)

    @property
    def files_per_s(self) -> float:
        return self.files / sum(self.attachments_s)

    @property
    def per_conversation_s(self) -> list[float]:
        return [sum(t) for t in zip(self.accept_s, self.bodies_s, self.attachments_s, strict=True)]


def run_product(
    pk: Purgekeeper,
    ctx: StepContext,
    conn: psycopg.Connection[Any],
    conversations: list[str],
    statements: StatementProfile | None = None,
) -> ProductSide:
    """Accept the purges, then run each one's bodies step, then each one's attachments step
    (their statements counted by ``statements``, when given)."""
    side = ProductSide()
    policy = runner.Policy()
    window_start = time.perf_counter()
    for conversation_id in conversations:
        begin = time.perf_counter()
        acceptance = pk.purge_conversation(conversation_id, actor="bench", reason="bench")
        side.accept_s.append(time.perf_counter() - begin)
        if acceptance.outcome != "accepted":
            raise RuntimeError(f"purge_conversation({conversation_id}) gave {acceptance.outcome!r}")
        side.purge_ids.append(acceptance.purge_id)
    step_ids: dict[tuple[str, str], str] = {
        (purge_id, kind): step_id
        for purge_id, kind, step_id in conn.execute(
            "SELECT purge_id, kind, id FROM cleanup_steps WHERE purge_id = ANY(%s)", (side.purge_ids,)
        )
    }
    conn.commit()
    woken: set[str] = set()
    for kind, times in (("bodies", side.bodies_s), ("attachments", side.attachments_s)):
        for purge_id in side.purge_ids:
            step_id = step_ids[(purge_id, kind)]
            profiled = statements.during(kind) if statements is not None else contextlib.nullcontext()
            begin = time.perf_counter()
            with profiled:
                outcome = runner.run_step(ctx, step_id, policy=policy)
            times.append(time.perf_counter() - begin)
            if outcome.status == "skipped" and step_status(conn, step_id) == "done":
                continue  # an earlier delivery's group did it (purgekeeper.workers.grouped)
            if outcome.status != "done":
                raise RuntimeError(f"{kind} step {step_id} of purge {purge_id} ended {outcome.status!r}")
            woken.update(outcome.wake)
    unparked = {step_ids[(purge_id, "attachments")] for purge_id in side.purge_ids}
    if woken != unparked:
        raise RuntimeError(f"the bodies steps unparked {len(woken)} attachments steps, not {len(unparked)}")
    side.window_s = time.perf_counter() - window_start
    progress = conn.execute(
        "SELECT kind, sum(removed), sum(retained_shared) FROM cleanup_steps WHERE purge_id = ANY(%s) GROUP BY kind",
        (side.purge_ids,),
    ).fetchall()
    conn.commit()
    by_kind = {kind: (int(removed), int(retained)) for kind, removed, retained in progress}
    side.rows = by_kind["bodies"][0]
    side.files, side.retained = by_kind["attachments"]
    return side


def step_status(conn: psycopg.Connection[Any], step_id: str) -> str:
    row = conn.execute("SELECT status FROM cleanup_steps WHERE id = %s", (step_id,)).fetchone()
    conn.commit()
    return str(row[0]) if row else "?"


# -- the baseline ---------------------------------------------------------------------------------


@dataclass
class BaselineSide:
    bodies_s: float = 0.0
    unlink_s: float = 0.0
    safe_unlink_s: float = 0.0
    rows: int = 0
    files: int = 0
    same_work_bodies_s: float = 0.0
    same_work_rows: int = 0
    same_work_files_s: float = 0.0
    same_work_files: int = 0

    @property
    def same_work_rows_per_s(self) -> float:
        return self.same_work_rows / self.same_work_bodies_s

    @property
    def same_work_files_per_s(self) -> float:
        return self.same_work_files / self.same_work_files_s

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.bodies_s

    @property
    def files_per_s(self) -> float:
        return self.files / self.unlink_s

    @property
    def safe_files_per_s(self) -> float:
        return self.files / self.safe_unlink_s


def baseline_bodies(conn: psycopg.Connection[Any], conversations: list[str], batch_size: int) -> tuple[int, float]:
    """Per conversation, batches of ``batch_size`` events: NULL their bodies, delete their
    placements, commit. Returns the rows changed and the wall time. Plain SQL with no
    fences: the session runs with triggers off (``session_replication_role = replica``,
    this session only), since the fences refuse to unplace live events."""
    rows = 0
    conn.execute("SET session_replication_role = replica")
    conn.commit()
    begin = time.perf_counter()
    for conversation_id in conversations:
        while True:
            event_ids = [
                row[0]
                for row in conn.execute(
                    "SELECT event_id FROM placements WHERE conversation_id = %s ORDER BY event_id LIMIT %s",
                    (conversation_id, batch_size),
                )
            ]
            if not event_ids:
                conn.commit()
                break
            rows += conn.execute(
                "UPDATE events SET body = NULL WHERE id = ANY(%s) AND body IS NOT NULL", (event_ids,)
            ).rowcount
            rows += conn.execute(
                "UPDATE attachments SET name = NULL WHERE event_id = ANY(%s) AND name IS NOT NULL", (event_ids,)
            ).rowcount
            rows += conn.execute(
                "DELETE FROM placements WHERE conversation_id = %s AND event_id = ANY(%s)",
                (conversation_id, event_ids),
            ).rowcount
            conn.commit()
    elapsed = time.perf_counter() - begin
    conn.execute("SET session_replication_role = DEFAULT")
    conn.commit()
    return rows, elapsed


_PLACED = "SELECT event_id FROM placements WHERE conversation_id = %s ORDER BY event_id LIMIT %s"
_TOMBSTONE_EVENTS = (
    "INSERT INTO tombstones (kind, id, purge_id) SELECT 'event', unnest(%s::text[]), %s ON CONFLICT DO NOTHING"
)
_EVENT_KEYS = "SELECT key_id FROM events WHERE id = ANY(%s) AND key_id IS NOT NULL"


def same_work_bodies(
    conn: psycopg.Connection[Any], keys: ContentKeys, conversations: list[str], batch_size: int
) -> tuple[int, float]:
    """The bodies step's durable work by hand, triggers on: per conversation, batches of
    ``batch_size`` placed events (``batch_size + 1`` read, as the step reads, to know the
    last), each one transaction that tombstones them, NULLs their bodies and their
    attachments' names, deletes their placements, destroys their keys (one durable write of
    the key store) and commits; a batch with more to come commits without waiting for the
    WAL flush, the last one durably, as the step's do. Returns the rows changed and the wall
    time."""
    rows = 0
    begin = time.perf_counter()
    for conversation_id in conversations:
        last = False
        while not last:
            placed = [row[0] for row in conn.execute(_PLACED, (conversation_id, batch_size + 1))]
            last = len(placed) <= batch_size
            rows += _same_work_batch(conn, keys, conversation_id, placed[:batch_size], durable=last)
    return rows, time.perf_counter() - begin


def _same_work_batch(
    conn: psycopg.Connection[Any], keys: ContentKeys, conversation_id: str, event_ids: list[str], *, durable: bool
) -> int:
    if not durable:
        conn.execute("SET LOCAL synchronous_commit TO OFF")
    conn.execute(_TOMBSTONE_EVENTS, (event_ids, f"same-work-{conversation_id}"))
    key_ids = [row[0] for row in conn.execute(_EVENT_KEYS, (event_ids,))]
    rows = conn.execute("UPDATE events SET body = NULL WHERE id = ANY(%s) AND body IS NOT NULL", (event_ids,)).rowcount
    rows += conn.execute(
        "UPDATE attachments SET name = NULL WHERE event_id = ANY(%s) AND name IS NOT NULL", (event_ids,)
    ).rowcount
    rows += conn.execute(
        "DELETE FROM placements WHERE conversation_id = %s AND event_id = ANY(%s)", (conversation_id, event_ids)
    ).rowcount
    keys.destroy(key_ids)  # durably, before the commit, as the step's batch does
    conn.commit()
    return rows


SameWorkFile = tuple[str, str, str | None]  # a blob's kind, relative path and key id


def same_work_files(
    keys: ContentKeys, roots: Roots, purges: list[list[SameWorkFile]], batch_size: int, threads: int
) -> float:
    """The attachments step's durable work on disk by hand: per purge (its unshared blobs,
    in blob id order), batches of ``batch_size`` files, each: the blobs' keys destroyed (one
    durable write of the key store), the files unlinked ``threads`` at a time (the files of
    one directory to one thread, each directory opened once), then each directory the batch
    touched fsynced once, ``max(threads, SYNCS_AT_A_TIME)`` at a time, as ``discard_all``
    does. The pool's threads are started beforehand. Returns the wall time."""
    with concurrent.futures.ThreadPoolExecutor(max(threads, SYNCS_AT_A_TIME)) as pool:
        list(pool.map(time.sleep, [0.0] * max(threads, SYNCS_AT_A_TIME)))  # the threads started, untimed
        begin = time.perf_counter()
        for files in purges:
            for start in range(0, len(files), batch_size):
                _same_work_files_batch(pool, keys, roots, files[start : start + batch_size], threads)
        return time.perf_counter() - begin


def _same_work_files_batch(
    pool: concurrent.futures.ThreadPoolExecutor,
    keys: ContentKeys,
    roots: Roots,
    batch: list[SameWorkFile],
    threads: int,
) -> None:
    keys.destroy([key_id for _kind, _path, key_id in batch if key_id])
    by_directory: dict[Path, list[str]] = {}
    for kind, path, _key_id in batch:
        target = roots.absolute(kind, path)
        by_directory.setdefault(target.parent, []).append(target.name)
    groups = list(by_directory.items())
    opened: list[int] = []
    try:
        for share in _shares(pool, _unlink_in, groups, threads):
            opened += share
        list(_shares(pool, _sync_each, opened, max(threads, SYNCS_AT_A_TIME)))
    finally:
        for fd in opened:
            os.close(fd)


def _shares(
    pool: concurrent.futures.ThreadPoolExecutor, work: Callable[[list[Any]], Any], items: list[Any], n: int
) -> Any:
    """``work`` on ``n`` shares of the items, one thread each; their results."""
    return pool.map(work, [items[i::n] for i in range(min(n, len(items)))])


def _unlink_in(groups: list[tuple[Path, list[str]]]) -> list[int]:
    """Unlink each directory's files through its descriptor; the descriptors, open."""
    opened = []
    for directory, names in groups:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        opened.append(fd)
        for name in names:
            os.unlink(name, dir_fd=fd)
    return opened


def _sync_each(fds: list[int]) -> None:
    for fd in fds:
        os.fsync(fd)


def in_threads(work: Callable[[list[Any]], None], items: list[Any], threads: int) -> float:
    """The wall time of ``work`` over ``threads`` shares of the items, one thread each, from
    the moment every thread has started to the moment the last one ends."""
    start = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def share(part: list[Any]) -> None:
        start.wait()
        try:
            work(part)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=share, args=(items[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    begin = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - begin
    if failures:
        raise failures[0]
    return elapsed


def baseline_unlink(paths: list[Path], threads: int) -> float:
    def unlink(part: list[Path]) -> None:
        for path in part:
            os.unlink(path)

    return in_threads(unlink, paths, threads)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def baseline_safe_unlink(copies: Roots, files: list[tuple[str, str]], threads: int) -> float:
    """Each ``(kind, relative path)`` unlinked through no symlink: each directory below the
    root opened from its parent's descriptor with ``O_NOFOLLOW``, then ``unlinkat``."""
    roots = {kind: os.open(copies.absolute(kind, "."), _DIRECTORY) for kind in ("cas", "file")}

    def unlink(part: list[tuple[str, str]]) -> None:
        for kind, relative in part:
            *directories, name = relative.split("/")
            opened = [roots[kind]]
            try:
                for directory in directories:
                    opened.append(os.open(directory, _DIRECTORY, dir_fd=opened[-1]))
                os.unlink(name, dir_fd=opened[-1])
            finally:
                for fd in opened[1:]:
                    os.close(fd)

    try:
        return in_threads(unlink, files, threads)
    finally:
        for fd in roots.values():
            os.close(fd)


# -- one run --------------------------------------------------------------------------------------


@dataclass
class RunResult:
    product: ProductSide
    baseline: BaselineSide
    order: str
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def rows_ratio(self) -> float:
        return self.product.rows_per_s / self.baseline.rows_per_s

    @property
    def files_ratio(self) -> float:
        return self.product.files_per_s / self.baseline.files_per_s

    @property
    def files_safe_ratio(self) -> float:
        return self.product.files_per_s / self.baseline.safe_files_per_s

    @property
    def rows_same_work_ratio(self) -> float:
        return self.product.rows_per_s / self.baseline.same_work_rows_per_s

    @property
    def files_same_work_ratio(self) -> float:
        return self.product.files_per_s / self.baseline.same_work_files_per_s


@dataclass
class Bench:
    pk: Purgekeeper
    ctx: StepContext
    conn: psycopg.Connection[Any]
    layout: Layout
    roots: Roots
    problems: list[str] = field(default_factory=list)
    statements: StatementProfile | None = None  # --statements: the timed runs' steps, statement by statement

    def paths(self, blob_ids: list[str]) -> list[Path]:
        return [self.roots.absolute(kind, path) for kind, path in self.relative_paths(blob_ids)]

    def relative_paths(self, blob_ids: list[str]) -> list[tuple[str, str]]:
        # in blob id order, as the attachments step goes
        rows = self.conn.execute("SELECT kind, path FROM blobs WHERE id = ANY(%s) ORDER BY id", (blob_ids,))
        paths = [(kind, path) for kind, path in rows]
        self.conn.commit()
        if len(paths) != len(blob_ids):
            raise RuntimeError(f"{len(blob_ids) - len(paths)} blobs are missing")
        return paths

    def unlink_baselines(self, blob_ids: list[str], base: BaselineSide, *, safe_first: bool = False) -> None:
        """Both baselines' unlinks of these blobs' files: the originals plainly, the copies
        safely (``safe_first``: in that order or the other)."""
        threads = self.ctx.unlink_threads
        relative = self.relative_paths(blob_ids)
        base.files = len(relative)
        for safe in (safe_first, not safe_first):
            if safe:
                base.safe_unlink_s = baseline_safe_unlink(self.roots.copies(), relative, threads)
            else:
                absolute = [self.roots.absolute(kind, path) for kind, path in relative]
                base.unlink_s = baseline_unlink(absolute, threads)

    def same_work_baselines(self, same_work: list[int], unlinked: list[int], base: BaselineSide) -> None:
        """The same-work baselines: the bodies of the ``same_work`` conversations, and the
        files of the ``unlinked`` conversations' unshared blobs (their third copies)."""
        conversations = [self.layout.conversation_id(i) for i in same_work]
        base.same_work_rows, base.same_work_bodies_s = same_work_bodies(
            self.conn, self.pk.keys, conversations, self.ctx.batch_size
        )
        purges = [self.same_work_files_of(i) for i in unlinked]
        base.same_work_files = sum(len(files) for files in purges)
        base.same_work_files_s = same_work_files(
            self.pk.keys, self.roots.same_work(), purges, self.ctx.batch_size, self.ctx.unlink_threads
        )

    def same_work_files_of(self, index: int) -> list[SameWorkFile]:
        """A conversation's unshared blobs (kind, path, key id), in blob id order, as its
        attachments step goes (read untimed)."""
        rows = self.conn.execute(
            "SELECT kind, path, key_id FROM blobs WHERE id = ANY(%s) ORDER BY id",
            (self.layout.blob_ids([index], shared=False),),
        ).fetchall()
        self.conn.commit()
        return [(kind, path, key_id) for kind, path, key_id in rows]

    def warm_up(self) -> float:
        """Untimed, before the runs: one conversation purged by each side, as in a database that
        has seen a purge before. It fills the connection pool, the statement caches and the
        prepared statements; and the statistics of the next ANALYZE see a purged conversation
        (without one, the first run meets the generic-plan trap of the closing note)."""
        layout = self.layout
        begin = time.perf_counter()
        side = run_product(self.pk, self.ctx, self.conn, [layout.conversation_id(layout.warm_up_product)])
        if side.files != layout.unshared_each or side.retained != layout.shared_each:
            self.problems.append(f"warm-up: removed {side.files} blobs and retained {side.retained}")
        baseline_bodies(self.conn, [layout.conversation_id(layout.warm_up_baseline)], self.ctx.batch_size)
        self.unlink_baselines(layout.blob_ids([layout.warm_up_baseline], shared=False), BaselineSide())
        self.same_work_baselines([layout.warm_up_same_work], [layout.warm_up_baseline], BaselineSide())
        return time.perf_counter() - begin

    def run_once(self, run: int, *, turn: int | None = None) -> RunResult:
        """Run ``run``'s conversations; which side goes first alternates with ``turn`` (by
        default the run's number; a batch-size sweep gives its round)."""
        layout = self.layout
        product = [layout.conversation_id(i) for i in layout.product(run)]
        baseline = [layout.conversation_id(i) for i in layout.baseline(run)]
        unlinked = layout.blob_ids(layout.baseline(run), shared=False)
        base = BaselineSide()
        baseline_first = (run if turn is None else turn) % 2 == 1

        def run_baseline() -> None:
            base.rows, base.bodies_s = baseline_bodies(self.conn, baseline, self.ctx.batch_size)
            self.unlink_baselines(unlinked, base, safe_first=baseline_first)
            self.same_work_baselines(layout.same_work(run), layout.baseline(run), base)

        if not baseline_first:
            order = "purgekeeper first"
            side = run_product(self.pk, self.ctx, self.conn, product, self.statements)
            run_baseline()
        else:
            order = "baseline first"
            run_baseline()
            side = run_product(self.pk, self.ctx, self.conn, product, self.statements)
        self.check(run, side, base, unlinked)
        return RunResult(side, base, order, self.ctx.batch_size)

    def check(self, run: int, side: ProductSide, base: BaselineSide, unlinked: list[str]) -> None:
        """Untimed: what each side was meant to do, it did."""
        layout = self.layout
        problems: list[str] = []
        expected_rows = (2 * layout.events_each + layout.attachments_each) * layout.per_run
        if side.rows != expected_rows or base.rows != expected_rows:
            problems.append(
                f"rows removed: purgekeeper {side.rows:,}, baseline {base.rows:,}, expected {expected_rows:,}"
            )
        if side.files != layout.unshared_each * layout.per_run or side.retained != layout.shared_each * layout.per_run:
            problems.append(f"blobs: purgekeeper removed {side.files:,} and retained {side.retained:,}")
        if base.same_work_rows != expected_rows:
            problems.append(f"rows removed: same-work baseline {base.same_work_rows:,}, expected {expected_rows:,}")
        if side.files != base.files or side.files != base.same_work_files:
            problems.append(
                f"files: purgekeeper unlinked {side.files:,}, baseline {base.files:,}, "
                f"same-work baseline {base.same_work_files:,}"
            )
        statuses = {self.pk.status(purge_id).status for purge_id in side.purge_ids}
        if statuses != {"complete"}:
            problems.append(f"purge statuses {sorted(statuses)}")
        prefixes = [
            layout.conversation_id(i) for i in layout.product(run) + layout.baseline(run) + layout.same_work(run)
        ]
        left = self.conn.execute(
            """SELECT (SELECT count(*) FROM events WHERE left(id, 5) = ANY(%(c)s) AND body IS NOT NULL),
                      (SELECT count(*) FROM placements WHERE conversation_id = ANY(%(c)s)),
                      (SELECT count(*) FROM attachments WHERE left(event_id, 5) = ANY(%(c)s) AND name IS NOT NULL)""",
            {"c": prefixes},
        ).fetchone()
        if left != (0, 0, 0):
            problems.append(f"bodies, placements and attachment names left: {left}")
        unshared = layout.blob_ids(layout.product(run), shared=False)
        shared = layout.blob_ids(layout.product(run), shared=True)
        for ids, state, on_disk in ((unshared, "deleted", False), (shared, "present", True)):
            states = dict(
                self.conn.execute("SELECT state, count(*) FROM blobs WHERE id = ANY(%s) GROUP BY state", (ids,))
            )
            if states != {state: len(ids)}:
                problems.append(f"blob states {states}, expected {len(ids):,} {state}")
            found = sum(path.exists() for path in self.paths(ids))
            if found != (len(ids) if on_disk else 0):
                problems.append(f"{found:,} of {len(ids):,} {state} blobs' files on disk")
        self.conn.commit()
        originals = [self.roots.absolute(kind, path) for kind, path in self.relative_paths(unlinked)]
        copies = [
            copy.absolute(kind, path)
            for copy in (self.roots.copies(), self.roots.same_work())
            for kind, path in self.relative_paths(unlinked)
        ]
        if any(path.exists() for path in originals + copies):
            problems.append("a baseline file is still there")
        for problem in problems:
            print(f"  CHECK FAILED, run {run + 1}: {problem}", flush=True)
        self.problems.extend(problems)


# -- the report ---------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(results: list[RunResult], layout: Layout, batch_size: int) -> dict[str, Any]:
    print()
    print(
        f"Per run: {layout.per_run} conversations of {layout.events_each:,} events per side, batch size {batch_size}; "
        "rows = NULLed bodies + deleted placements + NULLed attachment names; files = unlinked blobs"
    )
    print(
        f"{'run':>3}  {'order':<17}  {'side':<11}  {'rows':>8}  {'bodies s':>8}  {'rows/s':>8}  "
        f"{'files':>6}  {'files s':>7}  {'files/s':>8}"
    )
    for index, result in enumerate(results, 1):
        p, b = result.product, result.baseline
        print(
            f"{index:>3}  {result.order:<17}  {'purgekeeper':<11}  {p.rows:>8,}  {sum(p.bodies_s):>8.2f}  "
            f"{p.rows_per_s:>8,.0f}  {p.files:>6,}  {sum(p.attachments_s):>7.2f}  {p.files_per_s:>8,.0f}"
        )
        print(
            f"{index:>3}  {result.order:<17}  {'baseline':<11}  {b.rows:>8,}  {b.bodies_s:>8.2f}  "
            f"{b.rows_per_s:>8,.0f}  {b.files:>6,}  {b.unlink_s:>7.2f}  {b.files_per_s:>8,.0f}"
        )
        print(
            f"{index:>3}  {result.order:<17}  {'safe unlink':<11}  {'':>8}  {'':>8}  {'':>8}  "
            f"{b.files:>6,}  {b.safe_unlink_s:>7.2f}  {b.safe_files_per_s:>8,.0f}"
        )
        print(
            f"{index:>3}  {result.order:<17}  {'same work':<11}  {b.same_work_rows:>8,}  {b.same_work_bodies_s:>8.2f}  "
            f"{b.same_work_rows_per_s:>8,.0f}  {b.same_work_files:>6,}  {b.same_work_files_s:>7.2f}  "
            f"{b.same_work_files_per_s:>8,.0f}"
        )
    print()
    print(f"Acceptance to complete, purgekeeper, {layout.per_run} conversations per run (s):")
    print(
        f"{'run':>3}  {'accept':>7}  {'bodies':>7}  {'attach':>7}  {'window':>7}  "
        f"{'per conversation p50':>20}  {'max':>6}"
    )
    for index, result in enumerate(results, 1):
        p = result.product
        per = p.per_conversation_s
        print(
            f"{index:>3}  {sum(p.accept_s):>7.2f}  {sum(p.bodies_s):>7.2f}  {sum(p.attachments_s):>7.2f}  "
            f"{p.window_s:>7.2f}  {statistics.median(per):>20.3f}  {max(per):>6.3f}"
        )

    def median(values: list[float]) -> float:
        return statistics.median(values)

    figures: dict[str, Any] = {
        "rows_same_work_ratio": median([r.rows_same_work_ratio for r in results]),
        "files_same_work_ratio": median([r.files_same_work_ratio for r in results]),
        "baseline_same_work_rows_per_s": median([r.baseline.same_work_rows_per_s for r in results]),
        "baseline_same_work_files_per_s": median([r.baseline.same_work_files_per_s for r in results]),
        "rows_ratio": median([r.rows_ratio for r in results]),
        "files_ratio": median([r.files_ratio for r in results]),
        "files_safe_ratio": median([r.files_safe_ratio for r in results]),
        "purgekeeper_rows_per_s": median([r.product.rows_per_s for r in results]),
        "baseline_rows_per_s": median([r.baseline.rows_per_s for r in results]),
        "purgekeeper_files_per_s": median([r.product.files_per_s for r in results]),
        "baseline_files_per_s": median([r.baseline.files_per_s for r in results]),
        "baseline_safe_files_per_s": median([r.baseline.safe_files_per_s for r in results]),
        "acceptance_to_complete_s": median([r.product.window_s for r in results]),
        "acceptance_to_complete_per_conversation_p50_s": median(
            [statistics.median(r.product.per_conversation_s) for r in results]
        ),
        "acceptance_s": median([sum(r.product.accept_s) for r in results]),
        "bodies_steps_s": median([sum(r.product.bodies_s) for r in results]),
        "attachments_steps_s": median([sum(r.product.attachments_s) for r in results]),
    }
    figures["rows_same_work_ratio_per_run"] = [round(r.rows_same_work_ratio, 4) for r in results]
    figures["files_same_work_ratio_per_run"] = [round(r.files_same_work_ratio, 4) for r in results]
    figures["rows_ratio_per_run"] = [round(r.rows_ratio, 4) for r in results]
    figures["files_ratio_per_run"] = [round(r.files_ratio, 4) for r in results]
    figures["files_safe_ratio_per_run"] = [round(r.files_safe_ratio, 4) for r in results]
    figures["attachments_steps_s_per_run"] = [round(sum(r.product.attachments_s), 3) for r in results]
    figures["acceptance_to_complete_s_per_run"] = [round(r.product.window_s, 3) for r in results]
    figures["rows_ok"] = figures["rows_same_work_ratio"] >= TARGET_ROWS_SAME_WORK_RATIO
    figures["files_ok"] = figures["files_same_work_ratio"] >= TARGET_FILES_SAME_WORK_RATIO
    figures["runs"] = len(results)
    figures["conversations_per_run"] = layout.per_run
    figures["events_per_conversation"] = layout.events_each
    figures["events_total"] = layout.events_each * layout.conversations
    figures["batch_size"] = batch_size
    figures["rows_per_run"] = results[0].product.rows
    figures["files_per_run"] = results[0].product.files
    figures["retained_per_run"] = results[0].product.retained

    no_target = ("-", "price of the guarantees")
    rows = (
        (
            "body removal rows/s: purgekeeper vs same work",
            figures["purgekeeper_rows_per_s"],
            figures["baseline_same_work_rows_per_s"],
            f"{figures['rows_same_work_ratio']:.2f}",
            f">= {TARGET_ROWS_SAME_WORK_RATIO}",
            verdict(figures["rows_ok"]),
        ),
        (
            "attachment files/s: purgekeeper vs same work",
            figures["purgekeeper_files_per_s"],
            figures["baseline_same_work_files_per_s"],
            f"{figures['files_same_work_ratio']:.2f}",
            f">= {TARGET_FILES_SAME_WORK_RATIO}",
            verdict(figures["files_ok"]),
        ),
        (
            "body removal rows/s: purgekeeper vs plain baseline",
            figures["purgekeeper_rows_per_s"],
            figures["baseline_rows_per_s"],
            f"{figures['rows_ratio']:.2f}",
            *no_target,
        ),
        (
            "attachment files/s: purgekeeper vs plain unlink",
            figures["purgekeeper_files_per_s"],
            figures["baseline_files_per_s"],
            f"{figures['files_ratio']:.2f}",
            *no_target,
        ),
        (
            "attachment files/s: purgekeeper vs safe unlink",
            figures["purgekeeper_files_per_s"],
            figures["baseline_safe_files_per_s"],
            f"{figures['files_safe_ratio']:.2f}",
            *no_target,
        ),
    )
    print()
    print(f"Median of {len(results)} runs (each ratio is taken within a run, then the median of the ratios):")
    print(f"{'figure':<52}  {'value':>9}  {'versus':>9}  {'ratio':>6}  {'target':>7}  result")
    for label, value, versus, ratio, target, outcome in rows:
        print(f"{label:<52}  {value:>9,.0f}  {versus:>9,.0f}  {ratio:>6}  {target:>7}  {outcome}")
    print(
        f"{f'acceptance to complete, {layout.per_run} conversations (s)':<52}  "
        f"{figures['acceptance_to_complete_s']:>9.2f}  (accept {figures['acceptance_s']:.2f} + bodies "
        f"{figures['bodies_steps_s']:.2f} + attachments {figures['attachments_steps_s']:.2f})"
    )
    print(
        f"{'acceptance to complete, per conversation p50 (s)':<52}  "
        f"{figures['acceptance_to_complete_per_conversation_p50_s']:>9.3f}  (its acceptance + its two steps)"
    )
    return figures


def sweep_report(results: list[RunResult], sizes: list[int]) -> dict[str, dict[str, Any]]:
    """Body removal at each batch size of the sweep: both sides' rows/s (medians of the runs)
    and the median of the per-run ratios, each ratio against the baseline at the same size."""
    print()
    print("Body removal by batch size (each ratio within a run, against the baseline at the same size):")
    print(f"{'batch':>6}  {'purgekeeper rows/s':>18}  {'baseline rows/s':>15}  {'ratio':>6}  per-run ratios")
    sweep: dict[str, dict[str, Any]] = {}
    for size in sizes:
        runs = [r for r in results if r.batch_size == size]
        ratios = [r.rows_ratio for r in runs]
        figures = {
            "purgekeeper_rows_per_s": statistics.median(r.product.rows_per_s for r in runs),
            "baseline_rows_per_s": statistics.median(r.baseline.rows_per_s for r in runs),
            "rows_ratio": statistics.median(ratios),
            "rows_ratio_per_run": [round(ratio, 4) for ratio in ratios],
        }
        sweep[str(size)] = figures
        print(
            f"{size:>6}  {figures['purgekeeper_rows_per_s']:>18,.0f}  {figures['baseline_rows_per_s']:>15,.0f}  "
            f"{figures['rows_ratio']:>6.2f}  {', '.join(f'{ratio:.2f}' for ratio in ratios)}"
        )
    return sweep


def batch_sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive batch sizes, e.g. 500,2000,10000")
    return sizes


# -- main ---------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: the scratch database is dropped


def against(rev: str, argv: list[str]) -> dict[str, Any]:
    """This script run again, with ``argv`` less ``--against``, on the purgekeeper of commit
    ``rev`` (checked out as a git worktree, first on PYTHONPATH: this script and its helpers
    stay this tree's), in a scratch database of its own; its figures beside this run's."""
    repo = Path(__file__).resolve().parent.parent
    rest = [a for i, a in enumerate(argv) if not (a.startswith("--against") or (i and argv[i - 1] == "--against"))]
    with tempfile.TemporaryDirectory(prefix="pk-bench-against-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), rev], check=True)
        try:
            commit = subprocess.run(
                ["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
            print(f"\nthe same benchmark on {rev} ({commit}), after this one:", flush=True)
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, __file__, *rest], env=env, capture_output=True, text=True, check=True
            )
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)
    lines = done.stdout.strip().splitlines()
    print("\n".join(f"  [{commit}] {line}" for line in lines[:-1]), flush=True)
    theirs = json.loads(lines[-1])
    names = (
        "acceptance_to_complete_s",
        "bodies_steps_s",
        "attachments_steps_s",
        "purgekeeper_rows_per_s",
        "purgekeeper_files_per_s",
        "rows_same_work_ratio",
        "files_same_work_ratio",
    )
    return {"against": {"commit": commit, **{name: theirs.get(name) for name in names}}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-run", type=int, default=PER_RUN, help="conversations purged per side per run")
    parser.add_argument(
        "--conversations", type=int, default=CONVERSATIONS, help="conversations seeded (with --scale: a sweep's size)"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help=f"events per conversation: {EVENTS_PER_CONVERSATION:,} x scale"
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="both sides' batch size")
    parser.add_argument(
        "--batch-sizes",
        type=batch_sizes,
        default=None,
        help="a body-removal sweep, e.g. 500,2000,10000: --runs runs at each size, the sizes taken in turn "
        "(the first is the one the main figures report); --per-run applies to each",
    )
    parser.add_argument("--unlink-threads", type=int, default=DEFAULT_UNLINK_THREADS, help="files unlinked at a time")
    parser.add_argument("--file-bytes", type=int, default=FILE_BYTES, help="bytes per attachment file")
    parser.add_argument("--dir", default=None, help="where the temporary attachment files go")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="no warm-up purge: the first run then meets no purged conversation (slow; see the closing note)",
    )
    parser.add_argument(
        "--statements",
        type=int,
        default=0,
        metavar="N",
        help="profile the library's steps statement by statement (bench/statements.py) and show the N that take "
        "the longest, per step kind; the profile's listeners add a little to the steps' times",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        default=None,
        help="then run this script, with the same arguments, on the purgekeeper of commit REV (a git worktree put "
        "first on PYTHONPATH), and report its acceptance-to-complete beside this run's (at_once_ratio)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    sizes = args.batch_sizes or [args.batch_size]
    layout = Layout(
        events_each=max(1, round(EVENTS_PER_CONVERSATION * args.scale)),
        runs=args.runs * len(sizes),
        per_run=args.per_run,
        conversations=args.conversations,
    )
    layout.check()
    signal.signal(signal.SIGTERM, _terminate)

    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    scratch = ScratchDatabase(server_url, f"pk_bench_{os.getpid()}")
    with scratch, tempfile.TemporaryDirectory(prefix="pk-bench-cleanup-", dir=args.dir) as tmp:
        root = Path(tmp).resolve()
        os.environ["PURGEKEEPER_DATA_DIR"] = str(root / "data")  # keep the default data dir out of $HOME
        roots = Roots(blob_root=root / "blobs", file_root=root / "files")
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        with psycopg.connect(scratch.url) as probe:
            server = probe.execute("SELECT split_part(version(), ' ', 2), current_setting('synchronous_commit')")
            version, synchronous_commit = server.fetchone() or ("?", "?")
        print(f"purgekeeper cleanup benchmark: PostgreSQL {version} at {shown_url(scratch.admin_url)}")
        print(
            f"scratch database {scratch.name}; synchronous_commit={synchronous_commit} (server default, both sides); "
            f"{args.runs} runs; {os.cpu_count()} CPUs; files under {root}; the attachments step unlinks "
            f"{args.unlink_threads} at a time, and both unlink baselines as many"
        )
        if args.scale != 1.0 or args.file_bytes != FILE_BYTES or args.conversations != CONVERSATIONS:
            print(
                f"NOT THE FULL SIZE: --scale {args.scale:g}, --conversations {args.conversations:,}, "
                f"--file-bytes {args.file_bytes:,}"
            )

        pk = purgekeeper.open(
            scratch.url,
            blob_root=roots.blob_root,
            file_root=roots.file_root,
            checkpoint_dir=root / "ledger",
            memory_roots=[root / "memory"],
            workers="none",  # nothing runs in the background: the steps are run here, directly
        )
        ctx = dataclasses.replace(pk.step_context(), batch_size=sizes[0], unlink_threads=args.unlink_threads)
        conn: psycopg.Connection[Any] | None = None
        try:
            seed(scratch.url, layout, roots, args.file_bytes)  # after the open: the key store exists before any key_id
            conn = psycopg.connect(scratch.url)
            started = time.perf_counter()
            made = seed_keys(pk, conn)
            print(
                f"  {made:>9,} keys made in the key store (untimed) {time.perf_counter() - started:6.1f} s", flush=True
            )
            bench = Bench(pk=pk, ctx=ctx, conn=conn, layout=layout, roots=roots)
            if args.statements:
                bench.statements = StatementProfile(pk.db.engine)
            if args.cold:
                print("no warm-up (--cold): the first run meets a database with no purged conversation", flush=True)
            else:
                print(f"warm-up: one conversation purged by each side (untimed): {bench.warm_up():.1f} s", flush=True)
            results = []
            for run in range(layout.runs):
                started = time.perf_counter()
                settle(scratch.url)
                load_before = os.getloadavg()[0]
                bench.ctx = dataclasses.replace(ctx, batch_size=sizes[run % len(sizes)])
                results.append(bench.run_once(run, turn=run // len(sizes)))
                print(
                    f"run {run + 1}/{layout.runs} (batch size {bench.ctx.batch_size}) done "
                    f"({time.perf_counter() - started:.1f} s, untimed sync, VACUUM ANALYZE, CHECKPOINT and checks "
                    f"included); 1-minute load average {load_before:.2f} before, "
                    f"{os.getloadavg()[0]:.2f} after",
                    flush=True,
                )
            figures = report([r for r in results if r.batch_size == sizes[0]], layout, sizes[0])
            if args.batch_sizes:
                figures["batch_sweep"] = sweep_report(results, sizes)
            figures["checks_ok"] = not bench.problems
            figures["file_bytes"] = args.file_bytes
            figures["unlink_threads"] = args.unlink_threads
            figures["warm_up"] = not args.cold
            if bench.statements is not None:
                figures["statements"] = bench.statements.report(args.statements)
            if args.against:
                figures.update(against(args.against, list(sys.argv[1:] if argv is None else argv)))
                theirs = figures["against"]["acceptance_to_complete_s"]
                figures["at_once_ratio"] = figures["acceptance_to_complete_s"] / theirs
                print(
                    f"\n{layout.per_run} purges at once, acceptance to complete: "
                    f"{figures['acceptance_to_complete_s']:.2f} s here, {theirs:.2f} s on {args.against}: "
                    f"{figures['at_once_ratio']:.2f}x (target <= 0.5x)"
                )
            print()
            print(f"checks after each run: {'ok' if not bench.problems else 'FAILED'}")
            print(json.dumps(figures, sort_keys=True))
        finally:
            if conn is not None:
                conn.close()
            pk.close()
    met = figures["rows_ok"] and figures["files_ok"] and figures["checks_ok"]
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
