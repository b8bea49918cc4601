"""The worker group's main process: dramatiq's worker processes, each restarted alone when it
dies.

dramatiq's own main process (``dramatiq.cli.main``) stops the whole group when one worker
process exits unexpectedly, and leaves the restart to the process manager: a kill -9 of one
process (the OOM killer, a crash in a C extension) then stops every other process's attempts,
and the group is down for its stop and its start (6 to 11 s measured by ``bench/soak.py``).
:func:`supervise` runs the same worker processes (``dramatiq.cli.worker_process``, with the
same arguments, logging pipe and boot event) and the same forks, and handles the same signals
the same way, with one difference: a worker process that dies is started again on its own,
while the others go on.

- Before the restart, ``on_exit(pid)`` is called (the worker makes the dead process's steps due
  again, ``purgekeeper.commands.worker.release_steps_of``), so its steps wait for the next
  sweep, not for their leases.
- Only a process killed by a signal (kill -9, the OOM killer, a segmentation fault), or one
  that stopped cleanly on its own (exit code 0: a SIGTERM sent to it alone), is restarted. A
  positive exit code is a process that could not start (an exception while importing or
  configuring, a broker it cannot reach: dramatiq's codes 1 to 3), which a restart would not
  cure: the group stops, as dramatiq's main process would, with that code, for the process
  manager to see. So does a process's exit beyond ``max_restarts`` restarts within
  ``restart_window_s`` (a crash loop).
- SIGTERM, SIGINT and SIGHUP are passed on to every process (SIGINT as SIGTERM), and no process
  is restarted from then on; SIGHUP then runs the command again (a reload), as dramatiq does.
  A process still booting gets the signal once it is ready (its stop handler is set then:
  before, dramatiq's would kill it at a second signal, killpg's and ours), or after
  ``BOOT_GRACE_S``. The signals stay blocked while processes are forked, so a stop that comes
  during a restart also reaches the new process.

This uses dramatiq's CLI functions by name (``worker_process``, ``fork_process``,
``StreamablePipe``, the canteen): they are not a documented API, so ``pyproject.toml`` bounds
dramatiq's major version, and ``tests/faults/test_worker_supervision.py`` runs the real
command. ``dramatiq purgekeeper.commands.worker`` (the bare CLI) keeps dramatiq's own
whole-group behaviour.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import dramatiq
from dramatiq import cli

log = logging.getLogger("purgekeeper.worker")

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
POLL_S = 0.2
# How long a stop waits for a booting process to be ready before passing the signal on anyway
# (until its boot is done, dramatiq's handler kills it at a second signal: killpg's and ours).
BOOT_GRACE_S = 10.0
FAILURE_JOIN_S = 30.0  # how long the main process, failing, waits for each process to stop


@dataclass
class _Child:
    """One worker process slot: dramatiq's ``worker_id`` and the process now in it."""

    worker_id: int
    process: Any  # multiprocessing.Process
    ready: Any  # multiprocessing.Event, set once the process booted (or failed to)
    reported: bool = False  # its exit was handled
    signalled: bool = False  # the group's stop was passed on to it


@dataclass
class _Pump:
    """The log lines of every process, to stderr (or ``--log-file``): dramatiq's ``watch_logs``
    over a list of pipes that grows when a process is restarted. It writes holding ``lock``,
    which a restart holds across its fork, so a new process never inherits a half-taken lock
    of the stream."""

    log_file: str | None
    pipes: list[multiprocessing.connection.Connection] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, pipe: multiprocessing.connection.Connection) -> None:
        with self.lock:
            self.pipes.append(pipe)

    def run(self) -> None:
        with cli.file_or_stderr(self.log_file, mode="a", encoding="utf-8") as out:
            while True:
                with self.lock:
                    self.pipes = [p for p in self.pipes if not p.closed]
                    pipes = list(self.pipes)
                stopping = self.stop.is_set()
                try:
                    ready = multiprocessing.connection.wait(pipes, timeout=0 if stopping else POLL_S) if pipes else []
                except OSError:
                    ready = []  # a closed handle: dropped at the next turn
                for pipe in ready:
                    with self.lock:
                        _copy(pipe, out)
                if stopping and not ready:
                    return  # what the processes wrote before they exited is out
                if not pipes:
                    self.stop.wait(POLL_S)


def _copy(pipe: Any, out: Any) -> None:
    """What a process wrote, to ``out``; a process that ended leaves its pipe closed."""
    try:
        while pipe.poll():
            out.write(pipe.recv_bytes().decode("utf-8", errors="replace"))
            out.flush()
    except (EOFError, OSError):
        pipe.close()


class _Restarts:
    """The restarts of the last ``window_s`` seconds, at most ``limit`` of them."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self.times: collections.deque[float] = collections.deque()

    def allow(self) -> bool:
        now = time.monotonic()
        while self.times and now - self.times[0] > self.window_s:
            self.times.popleft()
        if len(self.times) >= self.limit:
            return False
        self.times.append(now)
        return True


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """The handled signals held back in this thread (they stay pending, and are handled once
    the previous mask is restored): threads started meanwhile, and processes forked, start
    with them blocked (dramatiq's worker process unblocks them once its handlers are set)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, cli.HANDLED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Supervisor:
    """The group of ``args.processes`` worker processes and ``args``'s forks (see the module)."""

    def __init__(
        self,
        args: Any,
        on_exit: Callable[[int], object],
        *,
        max_restarts: int = MAX_RESTARTS,
        restart_window_s: float = RESTART_WINDOW_S,
    ) -> None:
        self.args = args
        self.on_exit = on_exit
        self.restarts = _Restarts(max_restarts, restart_window_s)
        self.canteen = multiprocessing.Value(cli.Canteen)
        self.children: list[_Child] = []
        self.forks: list[Any] = []
        self.pump = _Pump(args.log_file)
        self.pumping = threading.Thread(target=self.pump.run, name="purgekeeper-worker-logs")
        self.running = True
        self.stopped_at = 0.0
        self.stop_signal = signal.SIGTERM
        self.reload = False
        self.retcode = cli.RET_OK

    def _start_child(self, worker_id: int) -> _Child:
        """A worker process in slot ``worker_id``, forked with the signals blocked (the caller
        blocks them) and with the log pump paused."""
        read_pipe, write_pipe = multiprocessing.Pipe(duplex=False)
        ready = multiprocessing.Event()
        process = multiprocessing.Process(
            target=cli.worker_process,
            args=(self.args, worker_id, cli.StreamablePipe(write_pipe), self.canteen, ready),
            daemon=False,
        )
        with self.pump.lock:
            process.start()
            self.pump.pipes.append(read_pipe)
        write_pipe.close()
        return _Child(worker_id, process, ready)

    def _start_forks(self) -> None:
        for fork_id, fork_path in enumerate(chain(self.args.forks, cli.canteen_get(self.canteen))):
            read_pipe, write_pipe = multiprocessing.Pipe(duplex=False)
            process = multiprocessing.Process(
                target=cli.fork_process,
                args=(self.args, fork_id, fork_path, cli.StreamablePipe(write_pipe)),
                daemon=True,
            )
            process.start()
            write_pipe.close()
            self.pump.add(read_pipe)
            self.forks.append(process)

    def _signal_all(self, signum: signal.Signals) -> None:
        """The group stops: ``signum`` to the forks and to every worker process that is ready
        (one still booting gets it once ready: :meth:`_pass_on`)."""
        if self.running:
            self.running, self.stopped_at, self.stop_signal = False, time.monotonic(), signum
        for fork in self.forks:
            _kill(fork, signum)
        self._pass_on()

    def _pass_on(self) -> None:
        booting_too = time.monotonic() - self.stopped_at > BOOT_GRACE_S
        for child in self.children:
            if not child.signalled and (child.ready.is_set() or booting_too):
                child.signalled = True
                _kill(child.process, self.stop_signal)

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        received = signal.Signals(signum)
        self.reload = received == getattr(signal, "SIGHUP", None)
        passed = signal.SIGTERM if received == signal.SIGINT else received
        log.info("sending %s to the worker processes", passed.name)
        self._signal_all(passed)

    def _exited(self, child: _Child) -> None:
        """``child``'s process has exited: release its steps, then restart it or stop the group."""
        pid, code = child.process.pid, child.process.exitcode
        try:
            self.on_exit(pid)
        except Exception:  # the database is down: the heartbeat sweep or the lease covers it
            log.warning("could not release the steps of worker process %d", pid, exc_info=True)
        if not self.running:
            # A process still booting when the stop came may meet it before its own handler is
            # set (dramatiq's kills it at a second SIGTERM): it held nothing; not a failure.
            self.retcode = self.retcode or (code if child.ready.is_set() else cli.RET_OK)
            return
        if code is None or code > 0:
            log.critical("worker process %d exited with code %s; stopping the group", pid, code)
            self.retcode = code if code is not None else cli.RET_KILLED
        elif not self.restarts.allow():
            log.critical(
                "worker process %d exited (%s), more than %d restarts in %.0f s; stopping the group",
                pid,
                _how(code),
                self.restarts.limit,
                self.restarts.window_s,
            )
            self.retcode = cli.RET_KILLED  # a failure, whatever the last code: the process manager restarts
        else:
            with _signals_blocked():  # a stop now is handled once the new process is in the group
                if self.running:
                    log.warning("worker process %d exited unexpectedly (%s); starting another", pid, _how(code))
                    self.children[self.children.index(child)] = self._start_child(child.worker_id)
            return
        self._signal_all(signal.SIGTERM)

    def _handle(self, child: _Child) -> None:
        if child.process.exitcode is not None and not child.reported:
            child.reported = True
            self._exited(child)

    def _boot(self) -> None:
        """Every process started and the handlers set, the signals blocked until then (a
        signal that came meanwhile is handled as the mask is restored)."""
        with _signals_blocked():
            for worker_id in range(self.args.processes):
                self.children.append(self._start_child(worker_id))
            for child in self.children:
                if child.process.is_alive() and not child.ready.wait(self.args.worker_fork_timeout / 1000):
                    break
            self._start_forks()
            self.pumping.start()
            for handled in cli.HANDLED_SIGNALS:
                signal.signal(handled, self._on_signal)
            log.info(
                "Dramatiq %s is booting up: %d worker processes, each started again alone if it dies",
                dramatiq.__version__,
                self.args.processes,
            )

    def _watch(self) -> None:
        """Until every process has exited and its exit was handled (a restart adds one)."""
        while not all(c.reported for c in self.children):
            if not self.running:
                self._pass_on()
            for child in list(self.children):
                child.process.join(timeout=POLL_S / len(self.children))
                self._handle(child)

    def run(self) -> int:
        self._boot()
        try:
            self._watch()
        except Exception:  # a bug, or a fork that failed (no memory): never leave the group unwatched
            log.critical("the worker group's main process failed; stopping the group", exc_info=True)
            self._signal_all(signal.SIGTERM)
            for child in self.children:
                child.process.join(timeout=FAILURE_JOIN_S)
                if child.process.exitcode is None:
                    child.process.kill()
            self.retcode = cli.RET_KILLED
        finally:
            self.pump.stop.set()
            self.pumping.join(timeout=5)  # the processes' last lines are out before an exit or a reload
        if self.reload:  # SIGHUP: the same command again, as dramatiq's main process does
            for fork in self.forks:
                fork.join(timeout=5)
            os.execvp(sys.argv[0], sys.argv)
        return cli.RET_KILLED if self.retcode < 0 else self.retcode


def _kill(process: Any, signum: signal.Signals) -> None:
    if process.exitcode is None:
        try:
            os.kill(process.pid, signum.value)
        except OSError:  # it exited meanwhile
            pass


def _how(code: int) -> str:
    try:
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    except ValueError:  # a real-time signal has no name
        return f"killed by signal {-code}"


def supervise(args: Any, on_exit: Callable[[int], object]) -> int:
    """Run the worker group of ``args`` (dramatiq's parsed command line) until it is stopped;
    returns its exit code (see the module). ``--path``, ``--pid-file`` and ``--use-spawn`` are
    taken as dramatiq's main process takes them."""
    for path in args.path:
        sys.path.insert(0, path)
    if args.use_spawn:
        multiprocessing.set_start_method("spawn")
    if args.pid_file:
        try:
            cli.setup_pidfile(args.pid_file)
        except RuntimeError as error:
            log.critical("%s", error)
            return cli.RET_PIDFILE
        atexit.register(cli.remove_pidfile, args.pid_file, log)
    return Supervisor(args, on_exit).run()
