"""``purgectl witness serve`` as its own process: it cosigns real checkpoints over HTTP,
refuses a fork, remembers what it cosigned across a SIGKILL and a restart on the same state
directory, and stops on SIGTERM with exit 0."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from purgekeeper.tlog import note, tree, verify
from purgekeeper.tlog.witness import SIZE_CONTENT_TYPE, add_checkpoint_body
from tests.helpers.served import BIN, STOP_S, Served, clean_environment, free_port, running
from tests.helpers.witness import witness_key

ORIGIN = "purgekeeper.example/ledger/process"
LOG = note.Signer.generate(ORIGIN)


def store_of(leaves: list[bytes]) -> tree.HashStore:
    store = tree.HashStore()
    store.append([verify.leaf_hash(leaf) for leaf in leaves])
    return store


LEAVES = [f"row {n}".encode() for n in range(30)]
HONEST = store_of(LEAVES)
FORKED = store_of([*LEAVES[:2], b"a rewritten row 2", *LEAVES[3:]])


def body(store: tree.HashStore, old: int, size: int) -> bytes:
    proof = tree.prove_consistency(old, size, store.read) if 0 < old < size else []
    checkpoint = note.sign_checkpoint(ORIGIN, size, tree.tree_hash(size, store.read), LOG)
    return add_checkpoint_body(old, proof, checkpoint)


@contextmanager
def serving(key_file: Path, state_dir: Path, log: Path) -> Iterator[Served]:
    port = free_port()
    command = [str(BIN / "purgectl"), "witness", "serve", "--key", str(key_file), "--port", str(port)]
    env = clean_environment(PURGEKEEPER_WITNESS_STATE_DIR=str(state_dir), PURGEKEEPER_WITNESS_LOGS=LOG.vkey)
    with running(command, env, log, port) as served:
        yield served


def add(served: Served, request: bytes) -> httpx.Response:
    return httpx.post(f"{served.url}/add-checkpoint", content=request, timeout=10)


def test_a_witness_process_refuses_forks_across_a_kill_and_stops_cleanly(tmp_path: Path) -> None:
    key_file, vkey = witness_key(tmp_path, "witness.test/process")
    state_dir, log = tmp_path / "state", tmp_path / "witness.log"
    with serving(key_file, state_dir, log) as served:
        first = add(served, body(HONEST, 0, 8))
        assert first.status_code == 200, first.text
        signed = note.sign_checkpoint(ORIGIN, 8, tree.tree_hash(8, HONEST.read), LOG)
        assert verify.check_quorum(signed + first.text, [vkey])
        assert add(served, body(HONEST, 8, 12)).status_code == 200
        assert add(served, body(FORKED, 12, 15)).status_code == 422
        assert add(served, body(FORKED, 12, 12)).status_code == 409
        os.killpg(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=STOP_S)
    with serving(key_file, state_dir, log) as served:
        again = add(served, body(FORKED, 0, 15))
        assert (again.status_code, again.headers["content-type"], again.text) == (409, SIZE_CONTENT_TYPE, "12\n")
        assert add(served, body(FORKED, 12, 15)).status_code == 422
        assert add(served, body(HONEST, 12, 20)).status_code == 200
        assert httpx.get(f"{served.url}/logs", timeout=10).json()[0]["size"] == 20
        os.killpg(served.process.pid, signal.SIGTERM)
        assert served.process.wait(timeout=STOP_S) == 0, served.output()
    assert "refused a checkpoint (422)" in log.read_text()
