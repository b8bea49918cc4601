"""What the long-running and set-up processes do, as functions the surfaces call: create or
migrate the database (``purgectl init``), open a handle on an initialised one (every other
one-shot command), check health (``purgectl health``, the compose healthchecks) and run the
scheduler process with its Redis broker (``purgectl scheduler``).

Each takes the process's one ``Settings`` (built at the edge, ``Settings.from_env()``).
Every error about the database names the one it looked at (its password masked), and its
advice (``purgectl init``) reads the same settings, so it targets that database.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.commands import receipts
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.reading import require_initialised
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import InfrastructureError, MessagingUnavailable, SigningKeyUnusable, ValidationError
from purgekeeper.storage import checkpoint, failpoints
from purgekeeper.workers.scheduler import Scheduler
from purgekeeper.workers.shutdown import StopSignals

log = logging.getLogger(__name__)

Announce = Callable[[str], object]


@dataclass(frozen=True)
class Initialised:
    """What ``initialise`` did: the database (redacted), the data directory, the revisions."""

    database_url: str
    data_dir: Path
    revision: str
    previous_revision: str | None
    migrated: bool


@dataclass(frozen=True)
class Health:
    ok: bool
    revision: str
    ledger_rows: int
    head_hash: str | None  # None: not walked (quick)
    verified: bool = True  # the whole chain and its copy walked (not quick)


def initialise(settings: Settings) -> Initialised:
    """Create or migrate the configured database (forward-only; safe to run again)."""
    settings.make_directories()
    db = settings.open_database(role="cli")
    try:
        result = migrate.upgrade(db)
        with db.read() as conn:
            database_id = ledger.read_head(conn).database_id
        _first_key(settings, database_id)
    finally:
        db.dispose()
    return Initialised(settings.database_name, settings.data_dir, result.after, result.before, result.changed)


def _first_key(settings: Settings, database_id: str) -> None:
    """A brand-new installation's signing key, made (``receipts.signer_for``). A key that
    cannot be used (or is missing for a log that has signed) never stops a migration: it is
    logged, and ``health`` fails until the operator fixes it."""
    try:
        receipts.signer_for(settings, database_id, first=True)
    except SigningKeyUnusable as exc:
        log.warning("%s", exc.detail)


@contextlib.contextmanager
def opened(settings: Settings, *, role: str = "cli") -> Iterator[Purgekeeper]:
    """A handle on the initialised database, with no in-process worker: a one-shot command
    only accepts, reads and wakes; the worker and scheduler processes (or ``serve``) clean up.
    It never migrates (``initialise`` does)."""
    db = settings.open_database(role=role)
    try:
        require_initialised(settings, db)
        settings.make_directories()
        pk = Purgekeeper(settings, db=db, workers="none")
    except BaseException:
        db.dispose()
        raise
    try:
        yield pk
    finally:
        pk.close()


def check_health(settings: Settings, *, quick: bool = False) -> Health:
    """The database answers, its schema is current, its ledger verifies and agrees with its
    copy, no merge is under way, a checkpoint can be written, the signed log's key can be
    used (SigningKeyUnusable names its file), no witness refused the log's newest
    checkpoint (WitnessRefused names it) and the key store can be written
    (KeyStoreUnusable names it); else the error says which.
    ``quick`` (a container's healthcheck, every few seconds) skips the walk of the chain and
    the copy: the gate's O(1) check of the head against the copy, as a content read makes it;
    the background audit of a serving process walks the chain."""
    with opened(settings) as pk:
        revision = require_initialised(settings, pk.db)
        if quick:
            state = pk.messaging_status(refresh=False)  # the O(1) check opening the handle made
            rows, head_hash = state.ledger_rows, None
        else:
            report = pk.verify_ledger()
            if not report.ok:
                raise MessagingUnavailable("the purge ledger does not verify", diagnostics=report.problems)
            state = pk.messaging_status()
            rows, head_hash = report.rows, report.head_hash
        pk.receipts.check_key()
        pk.receipts.check_witnesses()
        if not state.open:
            raise MessagingUnavailable("content reads and writes are closed", diagnostics=state.problems)
        unwritable = checkpoint.unwritable(settings.checkpoint_dir)
        if unwritable is not None:  # before the key store in it: the cause, with the system's reason
            raise InfrastructureError(f"the checkpoint directory cannot be written: {unwritable}")
        pk.key_store.check()  # KeyStoreUnusable: no ingest can seal, no purge can shred
    return Health(ok=True, revision=revision, ledger_rows=rows, head_hash=head_hash, verified=not quick)


def run_scheduler(settings: Settings, *, announce: Announce = log.info) -> None:
    """The scheduler process, until a SIGTERM (or SIGINT): while it holds the leader lease,
    every ``sweep_interval`` it takes the due retention turns, re-sends due and lease-expired
    steps to the broker, and copies the ledger out. The first SIGTERM ends the loop after its
    round, marks the process stopped and gives the lease up, so the next scheduler leads at
    once; a repeat is ignored, and a round that outlasts ``STOP_BOUND`` is ended by the
    watchdog (``purgekeeper.workers.shutdown``). Needs a broker URL: embedded mode runs it in-process."""
    if not settings.broker_url:
        raise ValidationError("purgectl scheduler needs PURGEKEEPER_BROKER_URL; embedded mode runs it in-process")
    failpoints.arm(settings.failpoints)
    with opened(settings, role="scheduler") as pk:
        loop = scheduler_of(pk, settings.broker_url)
        StopSignals(lambda _signum: loop.stop_soon()).install((signal.SIGTERM, signal.SIGINT))
        announce(f"scheduler {loop.owner}: sweeping every {settings.sweep_interval.total_seconds():g}s")
        loop.run()
        loop.release()


def scheduler_of(pk: Purgekeeper, broker_url: str) -> Scheduler:
    """The leader loop on ``pk``, sending wake-ups to the broker at ``broker_url``."""
    from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

    settings = pk.settings
    return Scheduler(
        pk.db,
        functools.partial(enqueue_or_log, broker_url, pk.database_key, db=pk.db),
        interval=settings.sweep_interval,
        resend_after=settings.step_lease,
        after_sweep=pk.scheduler_duties,
        queued=functools.partial(broker.queued_steps, broker_url, pk.database_key),
    )


def enqueue_or_log(broker_url: str, database_key: str, step_ids: Sequence[str], *, db: Database | None = None) -> None:
    """Send the wake-ups (``db`` names their purges in the log); a broker that is down is
    logged, and the next sweep sends them again."""
    from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

    try:
        broker.enqueue(broker_url, database_key, step_ids, db=db)
    except Exception as exc:
        log.warning("enqueue of %d step(s) failed (%s); the next sweep sends them again", len(step_ids), exc)
