"""The log's side of witnessing (issue 35 item 1), both backends, against a witness run as its
own process (``purgectl witness serve``): each new checkpoint is offered to the witness with a
consistency proof, its cosignature joins the receipt and the published checkpoint, and a log
restored from an old backup (database, checkpoint directory and key alike) is refused by the
witness, which the operator sees in ``health``, ``/metrics`` and the console."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

import purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.storage.witnessed import Witnessed
from purgekeeper.tlog.verify import ReceiptInvalid, open_checkpoint, split_note, verify_receipt
from purgekeeper.tlog.witness import Cosigner
from tests.helpers.backups import Backups
from tests.helpers.receipts import accept, log_dir
from tests.helpers.served import BIN, clean_environment
from tests.helpers.witness import running_witness

Pk = purgekeeper.Purgekeeper


def origin_and_key(pk: Pk) -> tuple[str, str]:
    """The log's origin and verification key, once it has signed."""
    accept(pk, 1, prefix="first")
    head = pk.receipts.head()
    return head.checkpoint.origin, pk.log_key()


def witnessed(open_pk: Callable[..., Pk], pk: Pk, url: str, vkey: str) -> Pk:
    return open_pk(settings=replace(pk.settings, witnesses=f"{url} {vkey}"))


def ask_now(pk: Pk) -> None:
    """One round of the handle's witnessing, now (its thread does the same after acceptances)."""
    assert pk.receipts.witnessing is not None
    with httpx.Client() as client:
        pk.receipts.witnessing.round(client.post)


def test_a_receipt_carries_the_witness_cosignature(open_pk: Callable[..., Pk], tmp_path: Path) -> None:
    first = open_pk()
    origin, log_vkey = origin_and_key(first)
    with running_witness(tmp_path / "witness", [f"{origin}={log_vkey}"]) as witness:
        pk = witnessed(open_pk, first, witness.url, witness.vkey)
        purges = accept(pk, 3)
        verify_receipt(pk.receipt(purges[-1].purge_id), log_vkey)  # signed by the log when confirm returns
        ask_now(pk)
        receipt = pk.receipt(purges[-1].purge_id)  # a later call: the cosignature has joined it
        verified = verify_receipt(receipt, log_vkey, witnesses=[witness.vkey])
        assert [c.name for c in verified.cosignatures] == ["witness.test/w1"]
        with pytest.raises(ReceiptInvalid, match=r"quorum|cosign"):  # another witness's key: no quorum
            verify_receipt(receipt, log_vkey, witnesses=[witness_of_another()])
        published = pk.receipts.published_checkpoint()
        assert open_checkpoint(published, pk.receipts.log.signer.verifier).size == 4
        state = pk.receipts.log_state()
        assert state.witnessed_size == 4 and [w.cosigned_size for w in state.witnesses] == [4]
        exposition = generate_latest(metrics.registry_for(pk)).decode()
        assert 'purgekeeper_witness_cosigned_size{witness="witness.test/w1"} 4.0' in exposition
        assert 'purgekeeper_witness_refusing{witness="witness.test/w1"} 0.0' in exposition
        assert "purgekeeper_log_witnessed_size 4.0" in exposition
        pk.receipts.check_witnesses()  # nothing refused
        verified_by_purgectl(tmp_path, receipt, log_vkey, witness.vkey)


def verified_by_purgectl(tmp_path: Path, receipt: dict[str, object], log_vkey: str, witness_vkey: str) -> None:
    """``purgectl receipt verify --witness``: exit 0 with the witness named, exit 1 for a
    witness that did not cosign (a quorum of 2 of the two keys given)."""
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    verify = [str(BIN / "purgectl"), "receipt", "verify", str(path), "--key", log_vkey, "--witness", witness_vkey]
    done = subprocess.run([*verify, "--json"], env=clean_environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["name"] for c in json.loads(done.stdout)["cosigned_by"]] == ["witness.test/w1"]
    short = [*verify, "--witness", witness_of_another(), "--quorum", "2"]
    done = subprocess.run(short, env=clean_environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "1 of 2 witnesses cosigned" in done.stdout + done.stderr


def witness_of_another() -> str:
    return Cosigner.generate("witness.test/other").vkey


def test_the_witness_asked_from_an_older_size_gets_a_consistency_proof(
    open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    """The 409 dance: a new handle knows nothing of what the witness cosigned, asks from 0, is
    told the size, and proves consistency from there."""
    first = open_pk()
    origin, log_vkey = origin_and_key(first)
    with running_witness(tmp_path / "witness", [f"{origin}={log_vkey}"]) as witness:
        pk = witnessed(open_pk, first, witness.url, witness.vkey)
        accept(pk, 2)
        ask_now(pk)
        later = witnessed(open_pk, first, witness.url, witness.vkey)
        accept(later, 3, prefix="later")
        ask_now(later)
        state = later.receipts.log_state()
        assert [(w.cosigned_size, w.refused) for w in state.witnesses] == [(6, None)]
        assert state.witnessed_size == 6


def test_a_log_restored_from_an_old_backup_is_refused_by_its_witness(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path
) -> None:
    """Everything restored at once (database, checkpoint directory, key directory) after a
    newer checkpoint was cosigned: the log alone cannot tell, the witness does."""
    first = open_pk()
    origin, log_vkey = origin_and_key(first)
    with running_witness(tmp_path / "witness", [f"{origin}={log_vkey}"]) as witness:
        pk = witnessed(open_pk, first, witness.url, witness.vkey)
        backups.handles.extend([first, pk])
        backup, saved = backups.take(), tmp_path / "saved"
        shutil.copytree(pk.settings.checkpoint_dir, saved / "ledger")
        shutil.copytree(pk.settings.data_dir, saved / "data")
        accept(pk, 4, prefix="handed-out")
        ask_now(pk)
        cosigned = pk.receipts.published_checkpoint()
        for handle in (first, pk):
            handle.close()
        backups.restore(backup)
        for name, target in (("ledger", pk.settings.checkpoint_dir), ("data", pk.settings.data_dir)):
            shutil.rmtree(target)
            shutil.copytree(saved / name, target)
        restored = witnessed(open_pk, first, witness.url, witness.vkey)
        accept(restored, 2, prefix="other-history")  # sizes 2 and 3, under the same origin and key
        ask_now(restored)
        with pytest.raises(purgekeeper.InfrastructureError, match=r"witness\.test/w1 refused"):
            restored.receipts.check_witnesses()
        state = restored.receipts.log_state()
        assert state.witnesses[0].refused and "larger than its newest checkpoint" in state.witnesses[0].refused
        accept(restored, 3, prefix="past-it")  # size 6, beyond what the witness saw: a proof from 5 fails
        ask_now(restored)
        refused = restored.receipts.log_state().witnesses[0].refused
        assert refused is not None and "another history" in refused
        exposition = generate_latest(metrics.registry_for(restored)).decode()
        assert 'purgekeeper_witness_refusing{witness="witness.test/w1"} 1.0' in exposition
        assert Witnessed.beside(log_dir(restored)).note() is None  # none restored; no fork was cosigned
        assert split_note(cosigned)[0].split("\n")[1] == "5"  # what the witness cosigned before the restore


def test_a_round_that_read_an_older_head_than_the_witness_cosigned_is_no_refusal(
    open_pk: Callable[..., Pk], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes of one log: one reads its head, the other signs a larger tree and has it
    cosigned, then the first asks with its older head. The witness's larger size is this
    log's own newest tree, not a restore: the round reads the head again and is cosigned,
    and the recorded size never moves back."""
    first = open_pk()
    origin, log_vkey = origin_and_key(first)
    with running_witness(tmp_path / "witness", [f"{origin}={log_vkey}"]) as witness:
        one = witnessed(open_pk, first, witness.url, witness.vkey)
        accept(one, 1, prefix="one")
        ask_now(one)
        stale = one.receipts.head()
        other = witnessed(open_pk, first, witness.url, witness.vkey)
        accept(other, 2, prefix="other")
        ask_now(other)
        log = one.receipts.log
        heads, newest = iter([stale]), log.head
        monkeypatch.setattr(log, "head", lambda: next(heads, None) or newest())
        ask_now(one)
        assert [(w.cosigned_size, w.refused) for w in one.receipts.log_state().witnesses] == [(4, None)]


def test_a_witness_missing_a_round_never_takes_the_published_checkpoint_away(
    open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    """Two witnesses, a quorum of both: once both cosigned size 4, a round that only one
    answers gathers size 6 with one cosignature, and /log/checkpoint stays at size 4 with
    both (it used to fall to nothing); receipts of rows up to 4 keep the quorum."""
    first = open_pk()
    origin, log_vkey = origin_and_key(first)
    logs = [f"{origin}={log_vkey}"]
    with running_witness(tmp_path / "w1", logs, name="witness.test/w1") as one:
        with running_witness(tmp_path / "w2", logs, name="witness.test/w2") as two:
            both = f"{one.url} {one.vkey}, {two.url} {two.vkey}"
            pk = open_pk(settings=replace(first.settings, witnesses=both))
            early = accept(pk, 3)
            ask_now(pk)
        accept(pk, 2, prefix="after-w2-stopped")
        ask_now(pk)
        state = pk.receipts.log_state()
        assert [(w.name, w.cosigned_size, w.error is not None) for w in state.witnesses] == [
            ("witness.test/w1", 6, False),
            ("witness.test/w2", 4, True),
        ]
        published = pk.receipts.published_checkpoint()
        assert open_checkpoint(published, pk.receipts.log.signer.verifier).size == 4
        receipt = pk.receipt(early[-1].purge_id)
        assert len(verify_receipt(receipt, log_vkey, witnesses=[one.vkey, two.vkey]).cosignatures) == 2
