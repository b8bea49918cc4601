"""Completion statements (issue 24 item 6) through the Python API, both backends.

Once a purge's cleanup completes, ``pk.completion`` signs a statement with the log's key:
each step's counts and the time its last step finished, bound to the acceptance's leaf. It
verifies offline (``purgekeeper.tlog.verify.verify_completion``), alone or with the purge's receipt; a
byte changed fails, and so does another purge's receipt. Before completion there is none
(``CleanupNotComplete``); after a restore re-arms cleanup there is none until the re-armed
steps finish, and the statement then is the later one."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

import purgekeeper
from purgekeeper.tlog.verify import (
    COMPLETION_FORMAT,
    ReceiptInvalid,
    Verifier,
    later_completion,
    leaf_hash,
    open_note,
    parse_completion,
    verify_completion,
    verify_receipt,
)
from tests.helpers.backups import Backups
from tests.helpers.factories import conversation
from tests.helpers.restore import clean

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "completion test"}


def conversation_purge(pk: Pk, name: str, events: int = 2) -> str:
    conversation(pk, name, events=events)
    return pk.purge_conversation(name, **WHO).purge_id


def flip_text(note: str, old: str, new: str) -> str:
    assert old in note
    return note.replace(old, new, 1)


def test_a_completed_purge_has_a_statement_that_verifies_offline(pk: Pk) -> None:
    purge_id = conversation_purge(pk, "c1")
    other_id = conversation_purge(pk, "c2", events=1)
    clean(pk)
    status = pk.status(purge_id)
    document = pk.completion(purge_id)
    vkey = pk.log_key()
    receipt = pk.receipt(purge_id)
    completion = verify_completion(document["statement"], vkey, receipt)
    assert completion == verify_completion(document, vkey)  # the JSON document holds the statement
    assert (completion.purge_id, completion.ledger_seq) == (purge_id, status.ledger_seq)
    assert completion.origin == verify_receipt(receipt, vkey).checkpoint.origin
    assert completion.leaf_hash == pk.receipts.leaf_hash(purge_id)
    assert status.completed_at is not None
    assert completion.completed_at == status.completed_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert completion.attempts == sum(step.attempts for step in status.steps) >= 1
    counts = {s.kind: (s.removed, s.retained_shared, s.held) for s in completion.steps}
    assert counts == {s.kind: (s.progress.removed, s.progress.retained_shared, s.progress.held) for s in status.steps}
    assert counts["bodies"][0] > 0
    assert document["steps"] == [
        {"kind": k, "removed": r, "retained_shared": s, "held": h} for k, (r, s, h) in sorted(counts.items())
    ]
    assert (document["completed_at"], document["attempts"]) == (completion.completed_at, completion.attempts)
    text = open_note(document["statement"], Verifier.from_vkey(vkey))
    assert text.startswith(COMPLETION_FORMAT + "\n") and parse_completion(text) == completion
    assert pk.completion(purge_id)["statement"] == document["statement"]  # signed again, the same

    other_receipt = pk.receipt(other_id)
    with pytest.raises(ReceiptInvalid, match="another purge"):
        verify_completion(document["statement"], vkey, other_receipt)
    forged = {**other_receipt, "purge_id": purge_id}
    with pytest.raises(ReceiptInvalid):
        verify_completion(document["statement"], vkey, forged)


@pytest.mark.parametrize("what", ["format", "purge", "time", "count", "signature"])
def test_one_byte_changed_fails_the_statement(pk: Pk, what: str) -> None:
    purge_id = conversation_purge(pk, "c1")
    clean(pk)
    statement = pk.completion(purge_id)["statement"]
    completion = verify_completion(statement, pk.log_key())
    removed = completion.steps[0].removed
    other_digit = "8" if completion.completed_at[-2] == "9" else "9"  # the time's last digit, changed
    changed = {
        "format": lambda s: flip_text(s, "completion/v1", "completion/v2"),
        "purge": lambda s: flip_text(s, purge_id, purge_id[:-1] + ("0" if purge_id[-1] != "0" else "1")),
        "time": lambda s: flip_text(s, completion.completed_at, completion.completed_at[:-2] + other_digit + "Z"),
        "count": lambda s: flip_text(s, f"removed={removed}", f"removed={removed + 1}"),
        "signature": lambda s: s[:-6] + ("A" if s[-6] != "A" else "B") + s[-5:],
    }[what](statement)
    assert changed != statement
    with pytest.raises(ReceiptInvalid):
        verify_completion(changed, pk.log_key())


def test_no_statement_before_completion_nor_for_an_unknown_purge(pk: Pk) -> None:
    purge_id = conversation_purge(pk, "c1")
    with pytest.raises(purgekeeper.CleanupNotComplete, match=r"has not completed: .*bodies pending"):
        pk.completion(purge_id)
    with pytest.raises(purgekeeper.NotFound):
        pk.completion("no-such-purge")
    clean(pk)
    assert verify_completion(pk.completion(purge_id), pk.log_key()).purge_id == purge_id


def test_a_purge_without_cleanup_completes_at_its_acceptance(pk: Pk) -> None:
    purge_id = pk.purge_conversation("never-held", **WHO).purge_id
    clean(pk)
    completion = verify_completion(pk.completion(purge_id), pk.log_key(), pk.receipt(purge_id))
    assert completion.purge_id == purge_id


def test_after_a_restore_re_arms_cleanup_the_later_completion_counts(
    open_pk: Callable[[], Pk], backups: Backups
) -> None:
    pk = open_pk()
    backups.handles.append(pk)
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="restored body", event_id="e1")
    backup = backups.take()
    purge_id = pk.purge_conversation("c1", **WHO).purge_id
    clean(pk)
    first_receipt = pk.receipt(purge_id)
    first = verify_completion(pk.completion(purge_id), pk.log_key(), first_receipt)
    pk.close()

    backups.restore(backup)
    restored = open_pk()
    backups.handles.append(restored)
    report = restored.merge_ledger(restored.settings.checkpoint_dir)
    assert report.appended == (purge_id,) and report.steps_rearmed
    with pytest.raises(purgekeeper.CleanupNotComplete):
        restored.completion(purge_id)
    clean(restored)
    second = verify_completion(restored.completion(purge_id), restored.log_key(), restored.receipt(purge_id))
    assert second.leaf_hash == first.leaf_hash == leaf_hash(base64.b64decode(first_receipt["leaf"]))
    assert second.completed_at > first.completed_at
    assert later_completion(first, second) is second and later_completion(second, first) is second
    assert verify_completion(restored.completion(purge_id), restored.log_key(), first_receipt) == second
