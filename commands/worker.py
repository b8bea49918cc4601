"""The worker process, the edge the ``dramatiq`` CLI imports:

    python -m purgekeeper.commands.worker --processes 2 --threads 4 --queues purgekeeper-cleanup
    dramatiq purgekeeper.commands.worker --processes 2 --threads 4 --queues purgekeeper-cleanup

Each worker process imports this module: it reads the settings (``PURGEKEEPER_DATABASE_URL``,
``PURGEKEEPER_BROKER_URL``, the roots, the step knobs), logs in purgekeeper's format
(``purgekeeper.commands.logs``), sets up the Redis broker and the actor, serves the configured database,
warns when Redis could evict queued messages, beats as a ``worker`` process from its boot
(``purgekeeper.workers.heartbeat``, every ``PURGEKEEPER_SWEEP_INTERVAL``), and stops cleanly on
SIGTERM (below). With
``PURGEKEEPER_WORKER_METRICS_PORT`` set, dramatiq's Prometheus middleware serves the worker's
own metrics on that port.

The two commands run the same dramatiq CLI. dramatiq's main process never imports this
module, so under ``dramatiq purgekeeper.commands.worker`` its own few lines (booting up, signals sent to
the worker processes, a worker process that died) keep dramatiq's format.
``python -m purgekeeper.commands.worker`` (:func:`main`) configures the log format in the main process
first and runs the CLI with ``--skip-logging``: every line of the group, the worker processes'
included (they are forked from it, and their lines reach stderr through dramatiq's pipe), is
then in purgekeeper's format.

**Stopping.** dramatiq's main process passes a SIGTERM on to its worker processes, and a
worker process that gets a second one is killed where it stands ("Killing worker process..."),
in the middle of its shutdown. A SIGTERM to the whole process group, or to every process (honcho,
systemd, ``docker stop``, Kubernetes), is just that: the supervisor's and the one passed on.
So each worker process answers its first SIGTERM (dramatiq's own stop, and the watchdog of
``purgekeeper.workers.shutdown``) and ignores a repeat. Its stop then winds its attempts down
(``purgekeeper.workers.runner.wind_down``: each ends at a safe point between two batches and gives
its step back, one still inside a batch after ``shutdown.STOP_GRACE`` is abandoned and its step given
back for it) and marks the process stopped, before dramatiq joins its threads; under
``python -m purgekeeper.commands.worker`` that join waits ``JOIN_AFTER_WIND_DOWN_MS`` (only abandoned
attempts are left to it; the bare ``dramatiq`` command waits its own 10 minutes, unless given
``--worker-shutdown-timeout``). The process exits within ``shutdown.STOP_BOUND`` of the SIGTERM.

**A worker process that dies** (kill -9, the OOM killer) is seen by the main process of
``python -m purgekeeper.commands.worker`` within 0.2 s (``purgekeeper.workers.supervisor``): the
steps it held are made due again at once (:func:`release_steps_of`), for the scheduler's next
sweep to send, and that one process is started again while the others go on. One that cannot
start, or that dies more than 5 times in a minute, stops the group for the process manager to
see. The bare ``dramatiq`` command keeps dramatiq's own behaviour: the whole group stops when
one process dies, and the scheduler releases the dead process's steps once its heartbeat row
has missed three beats (as it does when the whole group is killed).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

import dramatiq
from dramatiq.middleware import Middleware

from purgekeeper.commands import kinds, logs, wiring
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import heartbeats, ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import PurgekeeperError
from purgekeeper.schema.states import WorkerRole
from purgekeeper.storage import failpoints
from purgekeeper.storage.blobstore import BlobStore
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.workers import broker, identity, runner, supervisor
from purgekeeper.workers.cleanup import StepContext
from purgekeeper.workers.heartbeat import Heartbeat, this_process
from purgekeeper.workers.shutdown import StopSignals

log = logging.getLogger("purgekeeper.worker")
SAFE_EVICTION_POLICIES = ("noeviction",)
METRICS_PORT_VARIABLE = "PURGEKEEPER_WORKER_METRICS_PORT"
MODULE = "purgekeeper.commands.worker"
# How long dramatiq joins a worker process's threads once its attempts are wound down: only
# abandoned ones are still running by then, and they are left to end with the process.
JOIN_AFTER_WIND_DOWN_MS = 1000


class StopAtSafePoints(Middleware):
    """A stop ends each attempt at a safe point and gives its step back, so another worker
    takes it at once; an attempt still inside a batch after the grace is abandoned, and its
    step given back for it (``purgekeeper.workers.runner.wind_down``)."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        runner.wind_down(self.ctx)


class BeatWhileRunning(Middleware):
    """The worker process's heartbeat, every ``interval`` from its boot (with the queues and
    threads dramatiq gave it) until its attempts are wound down (added after
    :class:`StopAtSafePoints`, whose shutdown hook runs first), when it is marked stopped."""

    def __init__(self, db: Database, interval: dt.timedelta) -> None:
        self.db = db
        self.interval = interval
        self.heartbeat: Heartbeat | None = None

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        queues = sorted(worker.consumer_whitelist or broker.get_declared_queues())
        process = this_process(WorkerRole.WORKER, queues=queues, threads=worker.worker_threads)
        self.heartbeat = Heartbeat(self.db, process, interval=self.interval)
        self.heartbeat.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()


def stop_once(ctx: StepContext) -> None:
    """In a dramatiq worker process: its first SIGTERM (or SIGHUP) stops the attempts at their
    next safe point at once (dramatiq's main loop looks only once a second), runs dramatiq's
    handler (the worker stops) and arms the watchdog; a repeat is ignored instead of killing
    the process mid-shutdown. Nothing is changed outside dramatiq's worker processes."""
    if threading.current_thread() is not threading.main_thread():
        return
    dramatiqs = signal.getsignal(signal.SIGTERM)
    if not callable(dramatiqs):  # not a worker process of the dramatiq CLI
        return

    def stop(signum: int) -> None:
        ctx.stopping.set()
        dramatiqs(signum, None)

    StopSignals(stop).install((signal.SIGTERM, signal.SIGHUP))


def warn_if_redis_may_evict(client: object) -> None:
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")  # type: ignore[attr-defined]
    except Exception:  # a managed Redis may refuse CONFIG; say so rather than guess
        log.warning("could not read Redis maxmemory-policy; make sure it is noeviction")
        return
    if policy not in SAFE_EVICTION_POLICIES:
        log.warning(
            "Redis maxmemory-policy is %r: queued wake-ups could be evicted (the scheduler heals "
            "that, later); set maxmemory-policy noeviction",
            policy,
        )


def add_prometheus(the_broker: dramatiq.Broker, port: int) -> None:
    """dramatiq's Prometheus middleware: message and worker metrics (``dramatiq_*``) on
    ``http://<host>:<port>/``, served by a process the dramatiq CLI forks from its main
    process, which reads ``dramatiq_prom_port`` from the command's own environment (the
    Procfile sets both). Opt-in, because two workers on one machine cannot share the port."""
    from dramatiq.middleware import prometheus

    if os.environ.get("dramatiq_prom_port") != str(port):
        log.warning(
            "%s=%s but dramatiq_prom_port is %r: start the dramatiq command with dramatiq_prom_port=%s, "
            "or its metrics server listens elsewhere",
            METRICS_PORT_VARIABLE,
            port,
            os.environ.get("dramatiq_prom_port"),
            port,
        )
    the_broker.add_middleware(prometheus.Prometheus())


def configure() -> Database:
    settings = Settings.from_env()
    logs.configure(settings, process="worker")
    if not settings.broker_url:
        raise SystemExit("the worker process needs PURGEKEEPER_BROKER_URL (redis://...)")
    failpoints.arm(settings.failpoints)
    the_broker = broker.setup(settings.broker_url)
    db = settings.open_database(role="worker")
    migrate.check_current(db)
    with db.read() as conn:
        key = ledger.read_head(conn).database_id
        key_store = wiring.open_key_store(settings, key, conn)
    ctx = StepContext(
        db=db,
        blobs=BlobStore(blob_root=settings.blob_root, file_root=settings.file_root),
        keys=ContentKeys(key_store),
        memory_roots=settings.memory_roots,
        lease=settings.step_lease,
        bodies=kinds.bodies_steps(),  # the kinds' bodies steps, given explicitly at start-up
        yield_share=settings.cleanup_yield,
    )
    broker.register(
        key, broker.Runtime(ctx, runner.Policy(lease=settings.step_lease, backoff_base=settings.backoff_base))
    )
    stop_once(ctx)
    the_broker.add_middleware(StopAtSafePoints(ctx))
    the_broker.add_middleware(BeatWhileRunning(db, settings.sweep_interval))  # after: stopped once wound down
    if settings.worker_metrics_port is not None:
        add_prometheus(the_broker, settings.worker_metrics_port)
    warn_if_redis_may_evict(getattr(the_broker, "client", None))
    return db


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m purgekeeper.commands.worker [dramatiq options]``: the dramatiq CLI's worker
    processes on this module, supervised one by one (``purgekeeper.workers.supervisor``; with
    ``--watch``, a development option, dramatiq's own main process), all logging in purgekeeper's
    format (``--skip-logging``: dramatiq sets up no format of its own, in any of its
    processes). Nothing else is set up here: the worker processes import this module and set
    themselves up."""
    from dramatiq import cli

    given = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = Settings.from_env()
        logs.configure(settings, process="worker")
    except PurgekeeperError as error:
        print(f"error: {error.detail} ({error.code})", file=sys.stderr)
        return 2
    args = cli.make_argument_parser().parse_args([MODULE, *given])
    args.skip_logging = True
    if not any(arg.startswith("--worker-shutdown-timeout") for arg in given):
        args.worker_shutdown_timeout = JOIN_AFTER_WIND_DOWN_MS
    sys.argv = [sys.executable, "-m", MODULE, *given]  # what a reload on SIGHUP runs again
    identity.new_group()  # its worker processes' tags: derived from it and their pids
    if args.watch:
        return int(cli.main(args))
    metrics = settings.worker_metrics_port is not None
    return supervisor.supervise(args, functools.partial(worker_exited, metrics=metrics))


def worker_exited(pid: int, *, metrics: bool) -> None:
    """A worker process of the group exited: its steps are released, and with metrics on, its
    Prometheus files are marked dead (dramatiq's middleware does that only at a clean stop:
    a killed process's in-progress messages would be counted for as long as the group
    lives)."""
    try:
        release_steps_of([pid])
    finally:
        if metrics:
            from dramatiq.middleware import prometheus
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, prometheus.DB_PATH)


def release_steps_of(pids: Sequence[int]) -> None:
    """Worker processes of this group exited: the steps they held are due again now
    (``heartbeats.release_dead``, by each one's tag), for the next sweep to send, rather than
    when their leases run out. After a clean stop they held none. The database is opened for
    this only (the worker processes are forked from this one: it keeps no connection)."""
    db = Settings.from_env().open_database(role="worker")
    try:
        for pid in pids:
            released = db.transact(functools.partial(heartbeats.release_dead, tag=identity.process_tag(pid)))
            if released:
                log.warning(
                    "worker process %d exited holding %d step(s); they are due again: %s",
                    pid,
                    len(released),
                    ", ".join(released[:10]),
                )
    finally:
        db.dispose()


if __name__ == "__main__":
    sys.exit(main())
elif __name__ != "__mp_main__":  # a spawned process runs the main module again: the import sets up
    database = configure()
