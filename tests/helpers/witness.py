"""A witness (``purgectl witness serve``) run as its own process for a test, on a free port,
with its own key and state directory."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.served import BIN, clean_environment, free_port, running


@dataclass(frozen=True)
class WitnessProcess:
    url: str
    vkey: str
    key_file: Path
    state_dir: Path


def witness_key(directory: Path, name: str) -> tuple[Path, str]:
    """A new witness key in ``directory`` (``purgectl witness key init``) and its vkey."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / f"{name.replace('/', '_')}.key"
    env = clean_environment()
    subprocess.run(
        [str(BIN / "purgectl"), "witness", "key", "init", "--key", str(key_file), "--name", name],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    shown = subprocess.run(
        [str(BIN / "purgectl"), "witness", "key", "show", "--key", str(key_file)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return key_file, shown.stdout.strip().splitlines()[-1].strip()


@contextmanager
def running_witness(directory: Path, logs: Sequence[str], *, name: str = "witness.test/w1") -> Iterator[WitnessProcess]:
    """``purgectl witness serve`` following ``logs`` (each ``ORIGIN=VKEY``), until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file, vkey = witness_key(directory, name)
    state_dir = directory / f"state-{name.replace('/', '_')}"
    port = free_port()
    command = [str(BIN / "purgectl"), "witness", "serve", "--key", str(key_file), "--state", str(state_dir)]
    command += [arg for log in logs for arg in ("--log", log)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with running(command, clean_environment(), directory / f"witness-{port}.log", port) as served:
        yield WitnessProcess(served.url, vkey, key_file, state_dir)
