"""A real ``purgectl serve`` for tests: a subprocess on a free port, in a process group of its
own (stopping it stops its in-process worker too), with the environment the test gives."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

BIN = Path(sys.executable).parent
START_S = 30.0
STOP_S = 15.0


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any PURGEKEEPER_* variable, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PURGEKEEPER_")}
    return env | extra


@contextmanager
def serving(env: Mapping[str, str], cwd: Path, *flags: str, purgectl: Path = BIN / "purgectl") -> Iterator[Served]:
    """``purgectl serve --port <free> <flags>``, answering, until the block ends; ``purgectl``
    is this venv's unless another (an installed wheel's) is named."""
    port = free_port()
    command = [str(purgectl), "serve", "--port", str(port), *flags]
    with running(command, env, cwd / f"serve-{port}.log", port, cwd=cwd) as served:
        yield served


@contextmanager
def running(
    command: Sequence[str], env: Mapping[str, str], log: Path, port: int, *, cwd: Path | None = None
) -> Iterator[Served]:
    """``command`` (a server listening on ``port``) in a process group of its own, its output
    appended to ``log``, once ``/healthz`` answers; stopped (SIGTERM to its group) at the end."""
    with log.open("ab") as sink:
        process = subprocess.Popen(
            list(command), env=dict(env), cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    served = Served(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_until_answering(served)
        yield served
    finally:
        stop(process)


def wait_until_answering(served: Served) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            pytest.fail(f"purgectl serve exited with {served.process.returncode}:\n{served.output()}")
        try:
            if httpx.get(f"{served.url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"purgectl serve did not answer within {START_S} s:\n{served.output()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_S)


def run(command: Sequence[str], env: Mapping[str, str], cwd: Path, *, timeout: float = 90) -> str:
    """Run ``command`` to its end; its output, or the test fails with it."""
    done = subprocess.run(list(command), env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command[0]} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout
