"""The witness's ``add-checkpoint`` (C2SP tlog-witness) through HTTP, against real trees
(``purgekeeper.tlog.tree``) signed with ``note.Signer``, and a real state directory (SQLite):
each of the spec's answers, and no rollback when submissions race."""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from purgekeeper.commands import witness_app
from purgekeeper.commands.witness_app import Witness, create_witness_app
from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.witness_key import create_witness_key
from purgekeeper.storage.witness_state import STATE_FILE, WitnessState, WitnessStateUnusable
from purgekeeper.tlog import note, tree, verify
from purgekeeper.tlog.witness import SIZE_CONTENT_TYPE, Cosigner, add_checkpoint_body

ORIGIN = "purgekeeper.example/ledger/witnessed"
LOG = note.Signer.generate(ORIGIN)
NOW = 1_780_000_000

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from starlette.testclient import TestClient


class Log:
    """A log's tree, its checkpoints and its consistency proofs."""

    def __init__(self, leaves: Sequence[bytes], signer: note.Signer = LOG, origin: str = ORIGIN) -> None:
        self.store = tree.HashStore()
        self.store.append([verify.leaf_hash(leaf) for leaf in leaves])
        self.signer, self.origin = signer, origin

    def root(self, size: int) -> bytes:
        return tree.tree_hash(size, self.store.read)

    def checkpoint(self, size: int) -> str:
        return note.sign_checkpoint(self.origin, size, self.root(size), self.signer)

    def body(self, old: int, size: int) -> bytes:
        proof = tree.prove_consistency(old, size, self.store.read) if 0 < old < size else []
        return add_checkpoint_body(old, proof, self.checkpoint(size))


LEAVES = [f"leaf {n}".encode() for n in range(40)]
HONEST = Log(LEAVES)
FORKED = Log([*LEAVES[:3], b"another leaf 3", *LEAVES[4:]])  # the same size prefix, one leaf changed


@pytest.fixture
def cosigner() -> Cosigner:
    return Cosigner.generate("witness.example.com/w1")


@pytest.fixture
def state(tmp_path: Path) -> WitnessState:
    return WitnessState(tmp_path / "witness-state")


@pytest.fixture
def client(cosigner: Cosigner, state: WitnessState) -> Iterator[TestClient]:
    witness = Witness(cosigner, state, {ORIGIN: (LOG.verifier,)}, clock=lambda: NOW)
    with TestClient(create_witness_app(witness)) as made:
        yield made


def add(client: TestClient, body: bytes) -> tuple[int, str, str]:
    answer = client.post("/add-checkpoint", content=body)
    return answer.status_code, answer.headers.get("content-type", ""), answer.text


def test_the_first_checkpoint_and_its_extension_are_cosigned(client: TestClient, cosigner: Cosigner) -> None:
    status, _, line = add(client, HONEST.body(0, 5))
    assert status == 200 and line.startswith(f"\u2014 {cosigner.name} ") and line.endswith("\n")
    assert verify.check_quorum(HONEST.checkpoint(5) + line, [cosigner.vkey]) == [verify.Cosignature(cosigner.name, NOW)]
    status, _, line = add(client, HONEST.body(5, 9))
    assert status == 200
    assert verify.verified_cosignatures(HONEST.checkpoint(9) + line, [cosigner.vkey])
    assert client.get("/logs").json() == [
        {"origin": ORIGIN, "size": 9, "root": base64.b64encode(HONEST.root(9)).decode(), "cosigned_at": NOW}
    ]
    assert add(client, HONEST.body(9, 9))[0] == 200, "the same checkpoint again is cosigned again"


def test_an_old_size_that_is_not_the_recorded_one_is_a_409_with_that_size(client: TestClient) -> None:
    assert add(client, HONEST.body(0, 9))[0] == 200
    for old in (0, 5, 12):
        status, content_type, body = add(client, HONEST.body(old, 20))
        assert (status, content_type, body) == (409, SIZE_CONTENT_TYPE, "9\n")


def test_a_forked_tree_is_a_422_and_changes_nothing(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    assert add(client, HONEST.body(0, 9))[0] == 200
    forked = FORKED.body(9, 12)  # its own proof: consistent with its own 9, not the cosigned one
    status, _, reason = add(client, forked)
    assert status == 422 and "does not verify" in reason
    assert FORKED.checkpoint(12) in caplog.text, "the fork's checkpoint is logged as evidence"
    assert client.get("/logs").json()[0]["size"] == 9
    assert add(client, HONEST.body(9, 12))[0] == 200


def test_the_recorded_size_with_another_root_is_a_409(client: TestClient) -> None:
    assert add(client, HONEST.body(0, 9))[0] == 200
    status, content_type, reason = add(client, FORKED.body(9, 9))
    assert status == 409 and not content_type.startswith(SIZE_CONTENT_TYPE) and "another root" in reason
    assert client.get("/logs").json()[0]["root"] == base64.b64encode(HONEST.root(9)).decode()


def test_unknown_origin_untrusted_key_and_malformed_requests(client: TestClient) -> None:
    other_log = Log(LEAVES, note.Signer.generate("purgekeeper.example/other"), "purgekeeper.example/other")
    assert add(client, other_log.body(0, 5))[0] == 404
    impostor = Log(LEAVES, note.Signer.generate(ORIGIN))  # the origin's name, another key
    assert add(client, impostor.body(0, 5))[0] == 403
    signed = HONEST.checkpoint(5)
    unsigned = signed.replace(signed.split(" ")[-1], base64.b64encode(bytes(68)).decode() + "\n")  # key id 0
    assert add(client, add_checkpoint_body(0, [], unsigned))[0] == 403
    assert add(client, HONEST.body(0, 9))[0] == 200
    assert add(client, add_checkpoint_body(12, [], HONEST.checkpoint(9)))[0] == 400, "old above the size"
    assert add(client, b"old 09\n\n" + HONEST.checkpoint(9).encode())[0] == 400
    assert add(client, b"old 9\n\nnot a note")[0] == 400
    assert add(client, b"old 9\n\n" + b"x" * 70_000)[0] == 400
    assert client.get("/logs").json()[0]["size"] == 9


def test_a_first_checkpoint_with_a_proof_is_a_422(client: TestClient) -> None:
    proof = tree.prove_consistency(3, 9, HONEST.store.read)
    assert add(client, add_checkpoint_body(0, proof, HONEST.checkpoint(9)))[0] == 422


def test_an_origin_may_trust_several_keys(cosigner: Cosigner, state: WitnessState) -> None:
    rotated = note.Signer.generate(ORIGIN)
    witness = Witness(cosigner, state, {ORIGIN: (LOG.verifier, rotated.verifier)}, clock=lambda: NOW)
    with TestClient(create_witness_app(witness)) as client:
        assert add(client, HONEST.body(0, 5))[0] == 200
        assert add(client, Log(LEAVES, rotated).body(5, 9))[0] == 200


def test_health_and_an_origin_never_cosigned(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/logs").json() == [{"origin": ORIGIN, "size": None, "root": None, "cosigned_at": None}]


def test_a_log_option_names_its_origin_or_takes_the_key_s_name() -> None:
    assert witness_app.parse_log(LOG.vkey) == (ORIGIN, LOG.verifier)
    assert witness_app.parse_log(f"example.com/a=b={LOG.vkey}") == ("example.com/a=b", LOG.verifier)
    with pytest.raises(ValidationError, match="not an Ed25519 key"):
        witness_app.parse_log(Cosigner.generate("w").vkey)
    with pytest.raises(ValidationError, match="origin before '=' is empty"):
        witness_app.parse_log(f"={LOG.vkey}")


def test_racing_submissions_never_roll_the_state_back(cosigner: Cosigner, tmp_path: Path) -> None:
    """Two witnesses (two processes' worth: their own connections) on one state directory, and
    rounds of submissions that all extend the recorded size to different sizes: in each round
    exactly one is cosigned, the others get 409, and the state is the one that was cosigned."""
    witnesses = [
        Witness(cosigner, WitnessState(tmp_path / "shared"), {ORIGIN: (LOG.verifier,)}, clock=lambda: NOW)
        for _ in range(2)
    ]
    recorded = 0
    for _ in range(8):
        sizes = range(recorded + 1, recorded + 5)
        outcomes = _race(witnesses, [HONEST.body(recorded, size) for size in sizes])
        cosigned = [size for size, outcome in zip(sizes, outcomes, strict=True) if outcome == 200]
        assert len(cosigned) == 1 and sorted(outcomes) == [200, 409, 409, 409], outcomes
        recorded = cosigned[0]
        latest = witnesses[0].state.latest(ORIGIN)
        assert latest is not None and latest.size == recorded and latest.root == HONEST.root(recorded)


def _race(witnesses: Sequence[Witness], bodies: Sequence[bytes]) -> list[int]:
    outcomes = [0] * len(bodies)
    start = threading.Barrier(len(bodies))

    def submit(n: int) -> None:
        start.wait()
        try:
            witnesses[n % len(witnesses)].add_checkpoint(bodies[n])
            outcomes[n] = 200
        except witness_app.Refusal as refusal:
            outcomes[n] = refusal.status

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_witness_key_init_makes_a_private_key_once_and_show_prints_its_vkey(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from purgekeeper.commands.cli import main, witness_commands
    from purgekeeper.storage.witness_key import read_witness_key

    key_file = tmp_path / "witness.key"
    made = CliRunner().invoke(main, ["witness", "key", "init", "--key", str(key_file), "--name", "witness.test/a"])
    assert made.exit_code == 0, made.output
    assert key_file.stat().st_mode & 0o777 == 0o600
    vkey = read_witness_key(key_file).vkey
    assert made.output.strip() == vkey and verify.parse_cosigner_key(vkey).name == "witness.test/a"
    again = CliRunner().invoke(main, ["witness", "key", "init", "--key", str(key_file), "--name", "witness.test/b"])
    assert again.exit_code == 3 and read_witness_key(key_file).vkey == vkey
    shown = CliRunner().invoke(
        main, ["witness", "key", "show", "--json"], env={"PURGEKEEPER_WITNESS_KEY_FILE": str(key_file)}
    )
    assert shown.exit_code == 0 and shown.output.strip() == f'{{"vkey": "{vkey}"}}'
    key_file.chmod(0o644)
    assert CliRunner().invoke(main, ["witness", "key", "show", "--key", str(key_file)]).exit_code == 4
    assert (witness_commands.DEFAULT_HOST, witness_commands.DEFAULT_PORT) == (
        witness_app.DEFAULT_HOST,
        witness_app.DEFAULT_PORT,
    )


def test_a_symlink_or_other_file_at_the_state_database_is_refused_and_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.sqlite3"
    (directory / STATE_FILE).symlink_to(elsewhere)  # dangling: SQLite would make it there
    with pytest.raises(WitnessStateUnusable, match=f"{directory / STATE_FILE} is a symlink"):
        WitnessState(directory)
    assert not elsewhere.exists()
    elsewhere.write_bytes(b"")
    elsewhere.chmod(0o644)
    with pytest.raises(WitnessStateUnusable, match="is a symlink: refused, not followed"):
        WitnessState(directory)
    assert elsewhere.read_bytes() == b"" and elsewhere.stat().st_mode & 0o777 == 0o644  # neither written nor chmodded
    (directory / STATE_FILE).unlink()
    os.mkfifo(directory / STATE_FILE, 0o600)
    with pytest.raises(WitnessStateUnusable, match=f"{directory / STATE_FILE} is not a regular file"):
        WitnessState(directory)


def test_a_state_directory_or_database_open_to_others_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)  # whatever the umask
    with pytest.raises(WitnessStateUnusable, match=rf"state directory {directory} is open to others \(mode 0755\)"):
        WitnessState(directory)
    assert not (directory / STATE_FILE).exists()
    directory.chmod(0o700)
    state = WitnessState(directory)
    assert (directory / STATE_FILE).stat().st_mode & 0o777 == 0o600 and state.all() == []
    (directory / STATE_FILE).chmod(0o640)
    with pytest.raises(WitnessStateUnusable, match=r"state database .* is open to others \(mode 0640\): chmod 600"):
        WitnessState(directory)
    linked = tmp_path / "linked"
    linked.symlink_to(directory)  # the directory may be the operator's symlink; its database never
    (directory / STATE_FILE).chmod(0o600)
    assert WitnessState(linked).all() == []


def test_a_state_database_that_vanished_is_an_error_not_a_fresh_start(state: WitnessState) -> None:
    state.path.unlink()
    with pytest.raises(sqlite3.OperationalError):
        state.latest(ORIGIN)
    assert not state.path.exists()


def test_witness_serve_refuses_a_planted_state_database_without_a_traceback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from purgekeeper.commands.cli import main

    key_file = tmp_path / "witness.key"
    create_witness_key(key_file, name="witness.test/a")
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    (directory / STATE_FILE).symlink_to(tmp_path / "elsewhere")
    args = ["witness", "serve", "--key", str(key_file), "--state", str(directory), "--log", LOG.vkey]
    served = CliRunner().invoke(main, args)
    assert served.exit_code == 4, served.output
    assert f"{directory / STATE_FILE} is a symlink" in served.output and "Traceback" not in served.output
    assert not (tmp_path / "elsewhere").exists()
