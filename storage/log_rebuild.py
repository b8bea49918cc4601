"""Building the signed log again from the ledger copy's rows (a lost checkpoint, rows written
unsigned, the right edge after a crash, ``ledger repair``'s tiles): each row is verified before
any hash of it is used (``verified``: its seq, its link to the row before it and its
``row_hash`` recomputed), so a copy row edited with its hash kept is refused by its seq
(``RowUnverified``) and never signed over; and the tiles of a tree are computed from its
leaf hashes as they come (``TileBuilder``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from purgekeeper.schema import ledger
from purgekeeper.storage.log_format import LogRefused
from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import node_hash


class RowUnverified(LogRefused):
    """A row of the copy the signed log would be built from does not verify (its row_hash,
    its link to the row before it, its seq, or the database's row at its seq): nothing was
    signed. The message names the seq, never the row's content."""

    def __init__(self, seq: int, what: str) -> None:
        self.seq = seq
        super().__init__(
            f"the ledger copy's row at seq {seq} {what}: the signed log is not built from it "
            "(run purgectl ledger verify)"
        )


def verified(rows: Iterable[ledger.LedgerEntry], *, after: int, prev_hash: str | None) -> Iterator[ledger.LedgerEntry]:
    """``rows`` (seq ``after + 1`` on), each checked before it is given: its seq, its link to
    the row before it (``prev_hash``, that row's hash; None: the first row's link is not
    known here) and its ``row_hash`` recomputed. RowUnverified names the first that fails."""
    seq, prev = after, prev_hash
    for row in rows:
        if row.seq != seq + 1:
            raise RowUnverified(seq + 1, "is missing")
        if prev is not None and row.prev_hash != prev:
            raise RowUnverified(row.seq, "does not link to the row before it")
        if row.expected_hash() != row.row_hash:
            raise RowUnverified(row.seq, "does not match its row_hash")
        seq, prev = row.seq, row.row_hash
        yield row


def verified_between(
    rows_of: Callable[[int, int], Iterable[ledger.LedgerEntry]], after: int, upto: int
) -> list[ledger.LedgerEntry]:
    """The rows ``after < seq <= upto``, verified from the row at ``after`` (read too: its own
    hash checked, and the link of the first row asked for) or from the genesis hash."""
    start = max(after - 1, 0)
    anchor = ledger.GENESIS_HASH if start == 0 else None
    return list(verified(rows_of(start, upto), after=start, prev_hash=anchor))[after - start :]


class TileBuilder:
    """The tiles of a tree, computed from its leaf hashes as they come: each full tile as it
    fills (its subtree hash goes on to the level above), then the partial ones (``edge``)."""

    def __init__(self) -> None:
        self.count = 0
        self._pending: list[list[bytes]] = []  # per tile level: the entries of its open tile
        self._full: list[int] = []  # per tile level: the full tiles given so far

    def build(self, leaves: Iterable[bytes]) -> Iterator[tuple[tree.Tile, bytes]]:
        for leaf in leaves:
            self.count += 1
            yield from self._add(0, leaf)

    def _add(self, level: int, entry: bytes) -> Iterator[tuple[tree.Tile, bytes]]:
        if level == len(self._pending):
            self._pending.append([])
            self._full.append(0)
        entries = self._pending[level]
        entries.append(entry)
        if len(entries) == tree.TILE_WIDTH:
            self._pending[level], self._full[level] = [], self._full[level] + 1
            yield tree.Tile(level, self._full[level] - 1), b"".join(entries)
            yield from self._add(level + 1, subtree_hash(entries))

    def edge(self) -> Iterator[tuple[tree.Tile, bytes]]:
        for level, entries in enumerate(self._pending):
            if entries:
                yield tree.Tile(level, self._full[level], len(entries)), b"".join(entries)


def subtree_hash(entries: Sequence[bytes]) -> bytes:
    """The hash of the complete subtree whose bottom row is ``entries`` (a full tile's)."""
    while len(entries) > 1:
        entries = [node_hash(entries[i], entries[i + 1]) for i in range(0, len(entries), 2)]
    return entries[0]
