"""A rebuild of the signed log verifies before it signs (issue 35 item 3), both backends.

- A row of the ledger's copy edited with its ``row_hash`` kept (``ledger verify`` exits 4),
  then the log's checkpoint or its tiles lost: the next acceptance, catch-up or repair
  rebuilds nothing from the copy before every row it reads verifies. The forged row is
  refused by its seq (``RowUnverified``), and no checkpoint is signed over it.
- A full tile missing or damaged (its 256 rows' receipts fail): ``purgectl ledger repair``
  rebuilds it from the copy's verified rows, checks that the tree gives the signed root, and
  only then reports success; over a forged row it refuses (exit 4) and writes nothing.

After each case no two signed checkpoints disagree: the newest extends every one seen.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.schema import ledger
from purgekeeper.storage import ledger_copy, signed_log
from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import verify_receipt
from tests.helpers.receipts import SECRET, WHO, accept, checkpoint_of, extends, log_dir

Pk = purgekeeper.Purgekeeper
FULL = tree.TILE_WIDTH + 2  # rows: one full tile of leaves, and a partial one after it
FIRST_TILE = tree.Tile(0, 0).path


def forge(pk: Pk, seq: int) -> None:
    """Row ``seq`` of the copy's first segment edited (its reason, same length), its row_hash kept."""
    segment = pk.copy.directory / ledger_copy.segment_name(1)
    lines = segment.read_bytes().split(b"\n")
    row = json.loads(lines[seq - 1])
    assert row["seq"] == seq and row["reason"] == WHO["reason"]
    row["reason"] = "forged! test"
    assert len(row["reason"]) == len(WHO["reason"])
    lines[seq - 1] = ledger.canonical_json(row).encode()
    segment.write_bytes(b"\n".join(lines))


def lose(pk: Pk, what: str) -> None:
    if what == "checkpoint":
        (log_dir(pk) / signed_log.CHECKPOINT_FILE).unlink()
    else:
        shutil.rmtree(log_dir(pk) / "tile")


def no_fork(pk: Pk, *seen: str) -> None:
    """The newest signed checkpoint extends every other checkpoint seen (a consistency proof
    checked offline); none signed, or the same one, is nothing to check."""
    path = log_dir(pk) / signed_log.CHECKPOINT_FILE
    newest = path.read_text() if path.exists() else None
    for before in seen:
        if newest not in (None, before):
            extends(pk, before)


def purgectl(pk: Pk, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PURGEKEEPER_DATABASE_URL": pk.settings.database_url,
        "PURGEKEEPER_CHECKPOINT_DIR": str(pk.settings.checkpoint_dir),
        "PURGEKEEPER_DATA_DIR": str(pk.settings.data_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "purgekeeper.commands.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def bounded(said: str, pk: Pk) -> str:
    assert SECRET not in said and str(pk.settings.checkpoint_dir) not in said, said
    return said


# -- a forged row of the copy, then the checkpoint or the tiles lost -------------------------------


@pytest.mark.parametrize("what", ["checkpoint", "tiles"])
def test_a_lost_log_is_not_signed_again_over_a_forged_row(open_pk: Callable[..., Pk], what: str) -> None:
    pk = open_pk()
    accept(pk, 3)
    before = checkpoint_of(pk)
    forge(pk, 2)
    assert not open_pk().messaging_status().open  # what `ledger verify` reports (exit 4)
    lose(pk, what)
    fresh = open_pk()
    with pytest.raises(purgekeeper.LedgerNotCopied) as copied:
        fresh.purge_conversation("after-the-loss", **WHO)
    assert "row at seq 2 does not match its row_hash" in bounded(str(copied.value), fresh)
    with pytest.raises(purgekeeper.MessagingUnavailable) as repaired:
        fresh.repair_ledger_copy()
    assert "seq 2" in bounded(str(repaired.value), fresh)
    checkpoint = log_dir(pk) / signed_log.CHECKPOINT_FILE
    assert (checkpoint.read_text() if checkpoint.exists() else None) == (None if what == "checkpoint" else before)
    no_fork(fresh, before)


def test_a_copy_written_unsigned_is_not_signed_over_a_forged_row(open_pk: Callable[..., Pk]) -> None:
    """Rows the tree does not hold yet (a handle that does not sign) are verified when signed later."""
    pk = open_pk()
    accept(pk, 2)
    before = checkpoint_of(pk)
    accept(open_pk(sign_checkpoints=False), 2, prefix="unsigned")
    forge(pk, 3)
    with pytest.raises(purgekeeper.LedgerNotCopied) as copied:
        open_pk().copy_ledger()
    assert "row at seq 3" in bounded(str(copied.value), pk)
    assert checkpoint_of(pk) == before


# -- a damaged full tile ---------------------------------------------------------------------------


def damage(path: Path, how: str) -> None:
    if how == "gone":
        path.unlink()
    elif how == "short":
        path.write_bytes(path.read_bytes()[:-1])
    else:
        data = bytearray(path.read_bytes())
        data[40] ^= 0x01
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["gone", "short", "flipped"])
def test_repair_rebuilds_a_damaged_full_tile(open_pk: Callable[..., Pk], how: str) -> None:
    pk = open_pk()
    accepted = accept(pk, FULL)
    before = checkpoint_of(pk)
    tile = log_dir(pk) / FIRST_TILE
    sound = tile.read_bytes()
    damage(tile, how)
    with pytest.raises(purgekeeper.MessagingUnavailable):  # a receipt of any of its 256 rows fails
        open_pk().receipt(accepted[1].purge_id)
    done = purgectl(pk, "ledger", "repair", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tiles_rebuilt"] == [FIRST_TILE]
    assert tile.read_bytes() == sound and checkpoint_of(pk) == before
    fresh = open_pk()
    assert verify_receipt(fresh.receipt(accepted[1].purge_id), fresh.log_key()).checkpoint.size == FULL
    assert fresh.repair_ledger_copy().tiles_rebuilt == ()  # sound now: nothing written again
    accept(fresh, 1, prefix="after")
    no_fork(fresh, before)


def test_repair_refuses_a_full_tile_over_a_forged_row(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, FULL)
    before = checkpoint_of(pk)
    forge(pk, 5)
    (log_dir(pk) / FIRST_TILE).unlink()
    done = purgectl(pk, "ledger", "repair")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "row at seq 5 does not match its row_hash" in bounded(done.stdout + done.stderr, pk)
    assert not (log_dir(pk) / FIRST_TILE).exists() and checkpoint_of(pk) == before
    no_fork(open_pk(), before)
