"""What each purge kind accepts in a ledger row, checked before a merge writes anything.

A checkpoint file whose hashes verify can still carry a row that no acceptance would have
written: an unknown kind, selectors that lack what the kind needs, an id longer than its
column. Appending such a row and then failing to re-apply it would leave reads closed for
good (every later merge walks the same row). ``check`` says what is wrong with a row, in ids
and field names only, or returns quietly. The rules of each kind's selectors live in its
module (``purgekeeper.commands.kinds``, the ``check_selectors`` stage).
"""

from __future__ import annotations

from purgekeeper.commands import kinds
from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.schema.ledger import LedgerEntry
from purgekeeper.schema.tables import ID_LENGTH

MAX_PURGE_ID_LENGTH = 64  # the lengths of purge_ledger's String(64) columns
MAX_DIGEST_LENGTH = 64

__all__ = ["MAX_PURGE_ID_LENGTH", "RowInvalid", "check"]


def check(entry: LedgerEntry) -> None:
    """Raise RowInvalid unless every field of the row is one its kind accepts."""
    selector_fields.text(entry.purge_id, "purge_id", MAX_PURGE_ID_LENGTH)
    selector_fields.text(entry.scope_digest, "scope_digest", MAX_DIGEST_LENGTH, empty=True)
    for name in ("request_id", "idempotency_key"):
        value = getattr(entry, name)
        if value is not None:
            selector_fields.text(value, name, ID_LENGTH)
    kinds.kind_of(entry.kind).check_selectors(entry.selectors)
