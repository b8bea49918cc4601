"""Real processes under test: workers and schedulers started as commands of their own (each the
leader of its own process group, so a test can kill a whole worker at once), a Redis and a
PostgreSQL cluster of the test's own, bounded waits, and what the fault tests seed and look at
in the database. The fixtures that make these are in tests/faults/conftest.py."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import purgekeeper
from purgekeeper.workers import broker

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WAIT_S = 60.0
POLL_S = 0.05
WORKER_READY = "Worker process is ready"
SCHEDULER_READY = "sweeping every"
QUEUE = broker.QUEUE


def wait_until(check: Callable[[], T], what: str, *, timeout: float = WAIT_S, interval: float = POLL_S) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RedisServer:
    """A ``redis-server`` of the test's own (on a free port, in a temporary directory, nothing
    saved, in the foreground): a test may stop, restart or flush it. Never the machine's
    shared server."""

    binary: Path
    directory: Path
    port: int
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A client that fails at once (no reconnection backoff) while the server is down."""
        return redis.Redis(
            "127.0.0.1", self.port, socket_connect_timeout=1, socket_timeout=2, retry=Retry(NoBackoff(), 0)
        )

    def answers(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        """Start it (if it is down) on its port, and wait until it answers PING."""
        if self.running():
            return
        log = self.directory / "redis.log"
        argv = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        argv += ["--daemonize", "no", "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self._started, f"redis-server to answer PING on port {self.port}", interval=0.01)

    def _started(self) -> bool:
        if not self.running():
            log = (self.directory / "redis.log").read_text(errors="replace")
            raise AssertionError(f"redis-server exited before it answered PING:\n{log[-2000:]}")
        return self.answers()

    def stop(self) -> None:
        """SIGTERM (with nothing to save it exits at once), then wait until it no longer answers."""
        if self.popen is not None:
            self.popen.terminate()
            self.popen.wait(timeout=WAIT_S)
        wait_until(lambda: not self.answers(), "redis-server to stop answering PING")

    def kill(self) -> None:
        if self.running():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait(timeout=WAIT_S)


@dataclass
class Proc:
    """One started command, the leader of its own process group."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])


@dataclass
class Processes:
    """Starts workers and schedulers with the test's environment, and kills them all at the end."""

    env: dict[str, str]
    log_dir: Path
    started: list[Proc] = field(default_factory=list)

    def _command(self, script: str, module: str) -> list[str]:
        path = BIN / script
        return [str(path)] if path.exists() else [sys.executable, "-m", module]

    def _start(self, name: str, argv: list[str], extra_env: dict[str, str]) -> Proc:
        log = self.log_dir / f"{len(self.started):02d}-{name}.log"
        env = {**self.env, **extra_env}
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def _wait_ready(self, proc: Proc, marker: str, *, count: int = 1) -> Proc:
        def ready() -> bool:
            if proc.output().count(marker) >= count:
                return True
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited ({proc.popen.returncode}) before it was ready")
            return False

        try:
            wait_until(ready, f"{proc.name} to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{proc.tail()}") from None
        return proc

    def worker(
        self,
        failpoints: str = "",
        *,
        wait_ready: bool = True,
        env: dict[str, str] | None = None,
        worker_processes: int = 1,
    ) -> Proc:
        """``python -m purgekeeper.commands.worker --processes 1 --threads 2`` (the Procfile's worker: the
        dramatiq CLI in purgekeeper's log format), optionally with failpoints, more
        environment, and more worker processes (each one is ready before this returns)."""
        argv = [
            sys.executable,
            "-m",
            "purgekeeper.commands.worker",
            "--processes",
            str(worker_processes),
            "--threads",
            "2",
            "--queues",
            QUEUE,
        ]
        extra = {"PURGEKEEPER_FAILPOINTS": failpoints} if failpoints else {}
        proc = self._start("worker", argv, {**extra, **(env or {})})
        return self._wait_ready(proc, WORKER_READY, count=worker_processes) if wait_ready else proc

    def scheduler(self, failpoints: str = "", *, env: dict[str, str] | None = None) -> Proc:
        """``purgectl scheduler``: sweeps every 0.2 s while it leads, optionally with
        failpoints (``retention.planned=exit``, say) and more environment."""
        extra = {**({"PURGEKEEPER_FAILPOINTS": failpoints} if failpoints else {}), **(env or {})}
        proc = self._start("scheduler", [*self._command("purgectl", "purgekeeper.commands.cli"), "scheduler"], extra)
        return self._wait_ready(proc, SCHEDULER_READY)

    def serve(self, port: int) -> Proc:
        """``purgectl serve`` on 127.0.0.1 (the API only: a broker URL is set)."""
        argv = [
            *self._command("purgectl", "purgekeeper.commands.cli"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        return self._wait_ready(self._start("api", argv, {}), "Uvicorn running on")

    def honcho(self, procfile: dict[str, list[str]], *, ready: dict[str, str]) -> Proc:
        """``honcho start`` over a Procfile of ``procfile``'s lines (name: argv), as ``make
        procfile`` runs the real one, ready once each line's log says its ``ready`` marker."""
        path = self.log_dir / f"Procfile-{len(self.started):02d}"
        path.write_text("".join(f"{name}: {shlex.join(argv)}\n" for name, argv in procfile.items()))
        proc = self._start("honcho", [str(BIN / "honcho"), "start", "-f", str(path), "-d", str(REPO)], {})
        for marker in ready.values():
            self._wait_ready(proc, marker)
        return proc

    def run_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """One ``purgectl`` command with the test's environment, to its end."""
        argv = [*self._command("purgectl", "purgekeeper.commands.cli"), *args]
        return subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=WAIT_S, check=False)

    def kill(self, proc: Proc) -> int:
        """SIGKILL the whole process group and reap its leader; returns the leader's exit code."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.popen.wait(timeout=WAIT_S)

    def reap(self, proc: Proc) -> int:
        """A leader that exited on its own: reap it and kill whatever is left of its group."""
        return self.kill(proc)

    def close(self) -> None:
        for proc in self.started:
            try:
                self.kill(proc)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
                pass


@dataclass
class Cluster:
    """A PostgreSQL cluster of the test's own (``initdb`` into a temporary directory as the
    postgres user, ``pg_ctl`` on a free port): a test may restart or stop it. Never the
    machine's shared server."""

    bin: Path
    directory: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = list(argv) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)

    def ctl(self, *args: str) -> None:
        log = self.directory / "server.log"
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.directory / "data"), "-l", str(log), "-w", *args)

    def restart(self, *, down_for: float = 0.0) -> None:
        """``pg_ctl restart -m fast``; with ``down_for``, a stop, that long with no server (a
        failover takes seconds), and a start."""
        if not down_for:
            self.ctl("restart", "-m", "fast")
            return
        self.ctl("stop", "-m", "fast")
        time.sleep(down_for)
        self.ctl("start")

    def terminate_backends(self, database: str, *, application_name: str | None = None) -> int:
        """``pg_terminate_backend`` of every other session on ``database``; returns how many."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            sql = (
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()"
            )
            return int(conn.execute(sql, (database,)).fetchone()[0])  # type: ignore[index]


def postgres_bin() -> Path | None:
    """The directory of the PostgreSQL server binaries (``initdb``, ``pg_ctl``), if any."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@contextlib.contextmanager
def throwaway_cluster(prefix: str, conf: str, *, hba: str | None = None) -> Iterator[Cluster]:
    """A PostgreSQL cluster of the test's own on a free port, started (``initdb`` as the
    postgres user, ``pg_ctl``), then stopped and deleted: a test that stops, restarts or
    reconfigures a server does it to this one, never the machine's. ``conf`` is appended to
    postgresql.conf (port, addresses and socket directory are set here); ``hba`` replaces
    pg_hba.conf. A missing ``initdb`` fails the run on CI and skips locally."""
    from tests.helpers.databases import service_missing

    binaries = postgres_bin()
    if binaries is None:
        service_missing("initdb", FileNotFoundError("no PostgreSQL server binaries"))
    assert binaries is not None
    # not under pytest's tmp_path: its parents are private to root, and the server runs as postgres
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    made = Cluster(binaries, directory, free_port())
    data = directory / "data"
    try:
        made._as_postgres(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        service_missing("a throw-away PostgreSQL cluster", exc)
    with (data / "postgresql.conf").open("a") as settings:
        settings.write(
            f"port = {made.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{directory}'\n{conf}"
        )
    if hba is not None:
        (data / "pg_hba.conf").write_text(hba)
    made.ctl("start")
    try:
        yield made
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            made.ctl("stop", "-m", "immediate")
        shutil.rmtree(directory, ignore_errors=True)


def open_transactions(pk: purgekeeper.Purgekeeper) -> int:
    """Other sessions of the test database idle inside a transaction for more than half a
    second (a batch stopped mid-way; not the moment between two statements of a busy one)."""
    from sqlalchemy import text

    with pk.db.read() as conn:
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'idle in transaction' AND pid <> pg_backend_pid() "
            "AND state_change < clock_timestamp() - interval '500 milliseconds'"
        )
        return int(conn.scalar(text(sql)))


def seed_conversation(pk: purgekeeper.Purgekeeper, conversation_id: str, events: int) -> None:
    """A conversation of ``events`` events with bodies, written in two statements (the
    triggers fire): ``<conversation>-e1`` .. ``-e<events>``."""
    from sqlalchemy import text

    pk.create_conversation(conversation_id)
    with pk.db.write() as conn:
        conn.execute(
            text(
                "INSERT INTO events (id, author, occurred_at, body) "
                "SELECT :c || '-e' || g, 'ada', now(), 'SECRET ' || g FROM generate_series(1, :n) g"
            ),
            {"c": conversation_id, "n": events},
        )
        conn.execute(
            text(
                "INSERT INTO placements (event_id, conversation_id) "
                "SELECT :c || '-e' || g, :c FROM generate_series(1, :n) g"
            ),
            {"c": conversation_id, "n": events},
        )


def process_states(proc: Proc) -> dict[int, str]:
    """The state letter (R, S, T, ...) of every process in ``proc``'s group, by pid."""
    states = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == proc.pid:  # the process group
            states[int(entry.name)] = fields[0]
    return states
