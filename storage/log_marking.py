"""The signed log's rules from the signing key's mark (``purgekeeper.storage.signing_mark``):
what ``SignedLog`` asks of the mark before it signs a checkpoint or retires a directory, and
what monitoring asks of it. A refusal is SigningKeyUnusable (KeyUnusable under ``key_used``):
like a key that cannot be used, it never delays or prevents the ledger's copy. Each check and
the write it allows run under the mark's lock (``MarkFile.update``): other databases' logs
may share the key and its mark.
"""

from __future__ import annotations

from pathlib import Path

from purgekeeper.schema.errors import SigningKeyUnusable
from purgekeeper.storage.log_format import LogRefused, TreeHead
from purgekeeper.storage.log_reading import SignedLogReader
from purgekeeper.storage.signing_mark import Mark, MarkFile, Tip, refusal
from purgekeeper.tlog import note, tree

_MARK_WAY_OUT = (
    "The database or the checkpoint directory was restored from an older backup? bring the rows back with "
    "purgectl ledger merge (a copy or an export that holds them): the log signs again once its tree extends "
    "the mark. Else keep the published log as it is and set PURGEKEEPER_LOG_ORIGIN to a new origin the mark "
    "does not know (purgectl ledger key mark shows what it holds)"
)


class MarkedLog(SignedLogReader):
    """A log that asks its key's mark before it signs (``mark`` None: it signs without one)."""

    def __init__(self, directory: Path, *, origin: str, signer: note.Signer, mark: MarkFile | None = None) -> None:
        super().__init__(directory, origin=origin, signer=signer)
        self.mark = mark  # the key's memory (``signing_mark``): None signs without one (tests of the tree)

    def _retire_in_mark(self, current: TreeHead) -> None:
        """Before the directory of ``current`` (another origin's) is retired: refused when this
        log's origin is one the mark knows (retired, or in use: a deploy that dropped the newer
        origin would retire its log), else the retirement recorded in the mark, durably."""
        if self.mark is None:
            return

        def retiring(mark: Mark) -> Mark:
            if mark.knows(self.origin):
                raise SigningKeyUnusable(self._origin_known(mark, current))
            old = current.checkpoint
            known = mark.tip(old.origin)  # a restored directory's checkpoint may be older than the mark's
            retired = known if known is not None and known.size > old.size else Tip(old.origin, old.size, old.root)
            return mark.retiring(retired)

        self.mark.update(self.signer.verifier, retiring, [self.signer])

    def _origin_known(self, mark: Mark, current: TreeHead) -> str:
        assert self.mark is not None
        newest = ", ".join(tip.origin for tip in mark.origins) or "none"
        return (
            f"the signing key's mark {self.mark.path} knows the origin {self.origin} already (the log's "
            f"checkpoint is of {current.checkpoint.origin}; origins in use: {newest}): its log is not started "
            "again and the newer log is not retired. A deploy dropped PURGEKEEPER_LOG_ORIGIN? set it back"
        )

    def _advance_mark(self, current: TreeHead | None, size: int, root: bytes, read: tree.HashReader) -> None:
        """The mark moved to the tree of ``size``/``root`` once it allows signing it, under the
        mark's lock (read again there: another database's log may have moved it meanwhile)."""
        if self.mark is None:
            return

        def advanced(mark: Mark) -> Mark:
            self._mark_allows(mark, current, size, root, read)
            return mark.advanced(self.origin, size, root)

        self.mark.update(self.signer.verifier, advanced, [self.signer])

    def _mark_allows(self, mark: Mark, current: TreeHead | None, size: int, root: bytes, read: tree.HashReader) -> None:
        """Nothing when ``mark`` allows signing the tree of ``size``/``root`` (module
        ``signing_mark``); SigningKeyUnusable (the copy is still written) when it does not. O(1)
        when the mark is ``current``, which ``_grow`` has proven this tree extends."""
        assert self.mark is not None
        rotated_to = mark.key_of(self.origin)
        if rotated_to is not None and rotated_to != self.signer.vkey:
            raise SigningKeyUnusable(
                f"the signing key's mark {self.mark.path} says the key of {self.origin} was rotated to another key: "
                "this key is the old one; restart with the key the rotation made"
            )

        def hash_at(at: int) -> bytes:
            if current is not None and current.size == at:
                return current.root
            return tree.tree_hash(at, read)

        reason = refusal(mark, self.origin, size, root, hash_at)
        if reason is not None:
            raise SigningKeyUnusable(f"the signing key's mark {self.mark.path} refuses: {reason}. {_MARK_WAY_OUT}")

    def check_mark(self) -> None:
        """SigningKeyUnusable when the mark cannot be used, or refuses the log's newest checkpoint
        as the next signature would (monitoring: a read of the mark, the checkpoint's text)."""
        if self.mark is None:
            return
        mark = self.mark.current(self.signer.verifier)
        tip = mark.tip(self.origin)
        try:
            current = self.head()
        except LogRefused:
            return  # shown by the key's own check
        if current is not None and current.checkpoint.origin != self.origin:
            if mark.knows(self.origin):
                raise SigningKeyUnusable(self._origin_known(mark, current))
            return
        if current is None:
            if mark.retired_tip(self.origin) is not None or (tip is not None and tip.size > 0):
                signed = f"size {tip.size}" if tip is not None else "before, and it is retired"
                raise SigningKeyUnusable(
                    f"the signing key's mark {self.mark.path} says {self.origin} signed {signed}, and its log's "
                    f"checkpoint is not there. {_MARK_WAY_OUT}"
                )
            return
        try:
            self._mark_allows(mark, current, current.size, current.root, self.reader(current.size))
        except (tree.HashMissing, tree.TileInvalid):
            return  # the tiles are ``ledger repair``'s: the next signature checks again
