"""``purgectl serve`` on a port another process listens on: the port is bound before anything is
served or printed as served, and the refusal names the port and how to pick another, with the
documented exit code of an unavailable resource (4, ``InfrastructureError``), not 3 (a conflict)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from purgekeeper.tlog.note import Signer
from tests.helpers import served

INFRASTRUCTURE_EXIT = 4  # purgekeeper.commands.surface.ERROR_TABLE: InfrastructureError


def test_serve_on_a_busy_port_says_so_before_serving_and_exits_4(tmp_path: Path) -> None:
    env = served.clean_environment(PURGEKEEPER_DATA_DIR=str(tmp_path / "data"), PURGEKEEPER_API_TOKEN="busy-port-token")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        done = subprocess.run(
            [str(served.BIN / "purgectl"), "serve", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    output = done.stdout + done.stderr
    assert done.returncode == INFRASTRUCTURE_EXIT, (done.returncode, output)
    assert "serving on" not in output, output
    assert "Traceback" not in output, output
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr, output
    assert f"purgectl serve --port {port + 1}" in done.stderr, output
    assert f'make run SERVE_FLAGS="--port {port + 1}"' in done.stderr, output
    assert "infrastructure_error" in done.stderr, output


def test_a_witness_on_a_busy_port_names_its_own_command(tmp_path: Path) -> None:
    """``purgectl witness serve`` binds the same way, and says how to run itself again."""
    key = tmp_path / "witness.key"
    env = served.clean_environment()
    purgectl = str(served.BIN / "purgectl")
    subprocess.run(
        [purgectl, "witness", "key", "init", "--key", str(key), "--name", "w.test/busy"], env=env, check=True
    )
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        command = [purgectl, "witness", "serve", "--key", str(key), "--state", str(tmp_path / "state")]
        done = subprocess.run(
            [*command, "--log", Signer(name="log.test", seed=bytes(32)).vkey, "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    output = done.stdout + done.stderr
    assert done.returncode == INFRASTRUCTURE_EXIT and "Traceback" not in output, output
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr, output
    assert f"purgectl witness serve --port {port + 1}" in done.stderr and "make run" not in done.stderr, output
