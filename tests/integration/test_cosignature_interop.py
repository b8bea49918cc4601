"""A checkpoint with witnesses' cosignature lines on it (C2SP tlog-cosignature) still opens
with Go's golang.org/x/mod/sumdb/note (``note.Open``) and the log's key: Go ignores a
signature by a key it was not given, as the signed-note spec says, and so do we. Through
``tests/interop/tlogcheck``; without ``go`` the test skips locally and fails on CI, as the
other interop tests do."""

from __future__ import annotations

import hashlib

from purgekeeper.tlog import note, verify
from purgekeeper.tlog.witness import Cosigner
from tests.helpers.interop import Go

ORIGIN = "purgekeeper.example/ledger/cosigned-interop"
LOG = note.Signer.generate(ORIGIN)
ROOT = hashlib.sha256(b"interop root").digest()
TIME = 1_780_000_000


def test_go_opens_a_cosigned_checkpoint_with_the_log_s_key(go: Go) -> None:
    text = note.checkpoint_text(ORIGIN, 42, ROOT, ["an extension line"])
    signed = note.sign_note(text, [LOG])
    # one witness of its own name, and one named as the log (a 0x04 key id: another key to Go)
    witnesses = [Cosigner.generate("witness.example.com/w1"), Cosigner.generate(ORIGIN)]
    cosigned = signed + "".join(w.cosign(signed, TIME) for w in witnesses)
    answers = go({"checks": [{"kind": "signed_note", "vkey": LOG.vkey, "note": cosigned}]})["checks"]
    assert answers == [{"ok": True, "text": text}]
    assert verify.open_checkpoint(cosigned, LOG.verifier).size == 42
    assert len(verify.check_quorum(cosigned, [w.vkey for w in witnesses])) == 2
