"""The Merkle tree's stored hashes, its proofs, and their layout in C2SP tlog-tiles.

The tree is RFC 6962's (RFC 9162 §2.1): the root of the tree of ``size`` leaves is built
from **stored hashes**, one per complete subtree. ``(level, n)`` names the hash of the
2**level leaves from ``n * 2**level`` on; leaf ``i`` is ``(0, i)``. Appending a leaf stores
its hash and the hash of every subtree it completes (``append_hashes``), so an append costs
O(log n) hashes read and written, and a root (``tree_hash``), an inclusion proof
(``prove_inclusion``, RFC 9162 §2.1.3.1) or a consistency proof (``prove_consistency``,
§2.1.4.1) asks its reader once for O(log n) stored hashes. This is the scheme of Go's
``golang.org/x/mod/sumdb/tlog`` (``StoredHashes``, ``TreeHash``, ``ProveRecord``,
``ProveTree``); ``stored_hash_index`` gives its dense storage order. One difference: the
empty tree's root is SHA-256 of nothing, as the RFCs say, where that package returns zeros.

A reader is any callable taking a sequence of positions and returning their hashes in the
same order: a dict (``HashStore``), a database table, or tiles (``TileHashReader``).

**Tiles** (C2SP tlog-tiles, height 8): tile ``(L, N)`` holds the up to 256 stored hashes
of tree level ``8 * L`` from ``N * 256`` on, 32 bytes each, concatenated; the levels in
between are hashed again from them on reading. Its path is ``tile/<L>/<N>``, where ``N``
is written in 3-digit elements, all but the last prefixed with ``x`` (1234067 is
``x001/x234/067``), and a partial tile of ``W`` < 256 hashes has ``.p/<W>`` appended. A
full tile never changes; a partial one is replaced by a wider one as the tree grows.
``tiles_for_growth`` says which tiles growing the tree writes, and ``append_to_tiles``
computes them, with the new root, from the new leaves' hashes and the existing tiles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from purgekeeper.tlog.verify import EMPTY_ROOT, HASH_SIZE, node_hash

__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "HashMissing",
    "HashReader",
    "HashStore",
    "Position",
    "Tile",
    "TileAppend",
    "TileHashReader",
    "TileInvalid",
    "append_hashes",
    "append_to_tiles",
    "prove_consistency",
    "prove_inclusion",
    "stored_hash_index",
    "tile_data",
    "tiles_for_growth",
    "tree_hash",
]

Position = tuple[int, int]
HashReader = Callable[[Sequence[Position]], Sequence[bytes]]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT


class HashMissing(LookupError):
    """A stored hash that the tree of this size holds could not be read."""


class TileInvalid(ValueError):
    """A tile's bytes are not the width its path says, or its path is not a tile path."""


# -- stored hashes --


def stored_hash_index(level: int, n: int) -> int:
    """Where ``(level, n)`` sits in Go's sumdb/tlog dense storage order."""
    n = ((n + 1) << level) - 1  # level L's n-th hash follows level 0's hash of its last leaf
    index = 0
    while n > 0:
        index += n
        n >>= 1
    return index + level


def _split(lo: int, hi: int) -> int:
    """The largest power of two below ``hi - lo`` (RFC 6962's k), for ``hi - lo`` >= 2."""
    return 1 << ((hi - lo - 1).bit_length() - 1)


def _subtrees(lo: int, hi: int) -> list[Position]:
    """The complete subtrees that make up leaves [lo, hi), largest first."""
    positions = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        positions.append((level, lo >> level))
        lo += 1 << level
    return positions


def _fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a subtree from its complete subtrees, largest (leftmost) first."""
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


def _read(read: HashReader, positions: Sequence[Position]) -> dict[Position, bytes]:
    wanted = list(dict.fromkeys(positions))
    hashes = list(read(wanted)) if wanted else []
    if len(hashes) != len(wanted) or any(len(h) != HASH_SIZE for h in hashes):
        raise HashMissing(f"the reader returned {len(hashes)} hashes for {len(wanted)} positions")
    return dict(zip(wanted, hashes, strict=True))


def _completed(index: int) -> Iterable[tuple[Position, Position, Position]]:
    """The subtrees leaf ``index`` completes: (node, left child, right child), lowest first."""
    level = 1
    while (index >> (level - 1)) & 1:
        right = index >> (level - 1)
        yield (level, index >> level), (level - 1, right - 1), (level - 1, right)
        level += 1


def append_hashes(size: int, leaf_hashes: Sequence[bytes], read: HashReader) -> dict[Position, bytes]:
    """The stored hashes that appending ``leaf_hashes`` to the tree of ``size`` adds, in
    append order; it reads at most one existing hash per level."""
    end = size + len(leaf_hashes)
    needed = [left for i in range(size, end) for _, left, _ in _completed(i) if (left[1] + 1) << left[0] <= size]
    known = _read(read, needed)
    added: dict[Position, bytes] = {}
    for i, leaf in enumerate(leaf_hashes, start=size):
        added[(0, i)] = leaf
        for node, left, right in _completed(i):
            added[node] = node_hash(known.get(left) or added[left], added[right])
    return added


# -- roots and proofs --


def tree_hash(size: int, read: HashReader) -> bytes:
    """The root of the tree of ``size`` leaves (SHA-256 of nothing for the empty tree)."""
    if size < 0:
        raise ValueError(f"a tree cannot have {size} leaves")
    if size == 0:
        return EMPTY_ROOT
    positions = _subtrees(0, size)
    known = _read(read, positions)
    return _fold([known[p] for p in positions])


def _inclusion_plan(lo: int, hi: int, index: int) -> list[list[Position]]:
    """Per proof element, leaf first: the subtrees whose hash it is (RFC 9162 §2.1.3.1)."""
    if hi - lo == 1:
        return []
    k = _split(lo, hi)
    if index < lo + k:
        return [*_inclusion_plan(lo, lo + k, index), _subtrees(lo + k, hi)]
    return [*_inclusion_plan(lo + k, hi, index), _subtrees(lo, lo + k)]


def _consistency_plan(lo: int, hi: int, old_size: int) -> list[list[Position]]:
    """Per proof element: the subtrees whose hash it is (RFC 9162 §2.1.4.1, SUBPROOF; the
    old tree itself, [0, old_size), is left out as the verifier holds its root)."""
    if old_size == hi:
        return [] if lo == 0 else [_subtrees(lo, hi)]
    k = _split(lo, hi)
    if old_size <= lo + k:
        return [*_consistency_plan(lo, lo + k, old_size), _subtrees(lo + k, hi)]
    return [*_consistency_plan(lo + k, hi, old_size), _subtrees(lo, lo + k)]


def _resolve(plan: list[list[Position]], read: HashReader) -> list[bytes]:
    known = _read(read, [p for element in plan for p in element])
    return [_fold([known[p] for p in element]) for element in plan]


def prove_inclusion(size: int, index: int, read: HashReader) -> list[bytes]:
    """The inclusion proof of leaf ``index`` in the tree of ``size``, from the leaf up."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    return _resolve(_inclusion_plan(0, size, index), read)


def prove_consistency(old_size: int, new_size: int, read: HashReader) -> list[bytes]:
    """The proof that the tree of ``new_size`` extends the tree of ``old_size`` (empty when
    either is 0 or they are equal)."""
    if not 0 <= old_size <= new_size:
        raise ValueError(f"a tree of {new_size} leaves does not extend one of {old_size}")
    if old_size in (0, new_size):
        return []
    return _resolve(_consistency_plan(0, new_size, old_size), read)


class HashStore:
    """Stored hashes held in a dict, grown by ``append``; ``read`` is its reader."""

    def __init__(self) -> None:
        self.hashes: dict[Position, bytes] = {}
        self.size = 0

    def append(self, leaf_hashes: Sequence[bytes]) -> dict[Position, bytes]:
        added = append_hashes(self.size, leaf_hashes, self.read)
        self.hashes.update(added)
        self.size += len(leaf_hashes)
        return added

    def read(self, positions: Sequence[Position]) -> list[bytes]:
        try:
            return [self.hashes[p] for p in positions]
        except KeyError as exc:
            raise HashMissing(f"no stored hash at {exc.args[0]}") from exc


# -- C2SP tlog-tiles --

_TILE_PATH = re.compile(
    r"tile/(?P<level>0|[1-9][0-9]?)/(?P<index>(?:x[0-9]{3}/)*[0-9]{3})(?:\.p/(?P<width>[1-9][0-9]*))?"
)


@dataclass(frozen=True, order=True)
class Tile:
    """Tile ``index`` of tile level ``level``, holding ``width`` hashes of tree level 8·level."""

    level: int
    index: int
    width: int = TILE_WIDTH

    @property
    def path(self) -> str:
        digits = f"{self.index:03d}"
        digits = "0" * (-len(digits) % 3) + digits
        groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
        encoded = "/".join([*(f"x{g}" for g in groups[:-1]), groups[-1]])
        partial = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"tile/{self.level}/{encoded}{partial}"

    @classmethod
    def parse(cls, path: str) -> Tile:
        match = _TILE_PATH.fullmatch(path)
        width = int(match["width"] or TILE_WIDTH) if match else 0
        if match is None or not 0 < width <= TILE_WIDTH or (match["width"] and width == TILE_WIDTH):
            raise TileInvalid(f"{path!r} is not a tile path")
        groups = match["index"].replace("x", "").split("/")
        if len(groups) > 1 and groups[0] == "000":
            raise TileInvalid(f"{path!r} is not a tile path")
        return cls(level=int(match["level"]), index=int("".join(groups)), width=width)

    def positions(self) -> list[Position]:
        first = self.index * TILE_WIDTH
        return [(self.level * TILE_HEIGHT, first + i) for i in range(self.width)]


def tile_width(level: int, index: int, size: int) -> int:
    """How many hashes tile ``(level, index)`` holds in the tree of ``size`` (0: none yet)."""
    return max(0, min(TILE_WIDTH, (size >> (TILE_HEIGHT * level)) - index * TILE_WIDTH))


def tiles_for_growth(old_size: int, new_size: int) -> list[Tile]:
    """The tiles to write when the tree grows from ``old_size`` to ``new_size``: each tile
    completed, and the new partial tile of each level whose last tile changed."""
    if not 0 <= old_size <= new_size:
        raise ValueError(f"a tree does not shrink from {old_size} to {new_size} leaves")
    tiles = []
    level = 0
    while new_size >> (TILE_HEIGHT * level):
        old_n, new_n = old_size >> (TILE_HEIGHT * level), new_size >> (TILE_HEIGHT * level)
        tiles += [Tile(level, i) for i in range(old_n // TILE_WIDTH, new_n // TILE_WIDTH)]
        if new_n % TILE_WIDTH and new_n != old_n:
            tiles.append(Tile(level, new_n // TILE_WIDTH, new_n % TILE_WIDTH))
        level += 1
    return tiles


def tile_data(tile: Tile, read: HashReader) -> bytes:
    """The bytes of ``tile``: its hashes, concatenated."""
    positions = tile.positions()
    known = _read(read, positions)
    return b"".join(known[p] for p in positions)


def _subtree_from_tile(entries: Sequence[bytes]) -> bytes:
    while len(entries) > 1:
        entries = [node_hash(entries[i], entries[i + 1]) for i in range(0, len(entries), 2)]
    return entries[0]


class TileHashReader:
    """Reads stored hashes of the tree of ``size`` from its tiles, fetching each tile it
    needs once per call with ``fetch`` (which returns the tile's bytes)."""

    def __init__(self, size: int, fetch: Callable[[Tile], bytes]) -> None:
        self.size = size
        self.fetch = fetch

    def locate(self, position: Position) -> tuple[Tile, int, int]:
        """The tile holding ``position`` at this size, and the slice of its entries to hash."""
        level, n = position
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = n << height
        index, start = divmod(first, TILE_WIDTH)
        width = tile_width(tile_level, index, self.size)
        if start + (1 << height) > width:
            raise HashMissing(f"the tree of size {self.size} has no complete subtree at {position}")
        return Tile(tile_level, index, width), start, start + (1 << height)

    def __call__(self, positions: Sequence[Position]) -> list[bytes]:
        fetched: dict[Tile, list[bytes]] = {}
        hashes = []
        for position in positions:
            tile, start, end = self.locate(position)
            if tile not in fetched:
                fetched[tile] = self._entries(tile)
            hashes.append(_subtree_from_tile(fetched[tile][start:end]))
        return hashes

    def _entries(self, tile: Tile) -> list[bytes]:
        return tile_entries(tile, self.fetch(tile))


def tile_entries(tile: Tile, data: bytes) -> list[bytes]:
    """A tile's hashes; TileInvalid when ``data`` is not ``tile.width`` hashes long."""
    if len(data) != tile.width * HASH_SIZE:
        raise TileInvalid(f"{tile.path} is {len(data)} bytes, not {tile.width * HASH_SIZE}")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def edge_tiles(size: int, last_leaves: Sequence[bytes], fetch: Callable[[Tile], bytes]) -> dict[Tile, bytes]:
    """The partial tile of each level of the tree of ``size`` (its right edge), computed
    again: level 0's from ``last_leaves`` (the leaf hashes after the last full tile of level
    0), each higher level's from the full tiles of the level below, which ``fetch`` returns.
    Reads at most 255 tiles per level."""
    tiles: dict[Tile, bytes] = {}
    level = 0
    while n := size >> (TILE_HEIGHT * level):
        index, width = divmod(n, TILE_WIDTH)
        if width and level == 0:
            if len(last_leaves) != width:
                raise ValueError(f"the tree of size {size} ends with {width} leaves, not {len(last_leaves)}")
            tiles[Tile(0, index, width)] = b"".join(last_leaves)
        elif width:
            below = [Tile(level - 1, index * TILE_WIDTH + j) for j in range(width)]
            tiles[Tile(level, index, width)] = b"".join(
                _subtree_from_tile(tile_entries(tile, fetch(tile))) for tile in below
            )
        level += 1
    return tiles


@dataclass(frozen=True)
class TileAppend:
    """What an append writes: the new size and root, the stored hashes it adds, the tiles."""

    size: int
    root: bytes
    hashes: Mapping[Position, bytes]
    tiles: Mapping[Tile, bytes]


def append_to_tiles(
    size: int,
    leaf_hashes: Sequence[bytes],
    fetch: Callable[[Tile], bytes],
    read: HashReader | None = None,
) -> TileAppend:
    """Append ``leaf_hashes`` to the tree of ``size`` whose tiles ``fetch`` returns: the
    tiles to write (``tiles_for_growth``) with their bytes, and the new root. ``read`` reads
    the old tree's stored hashes (by default from its tiles, with ``fetch``). A tile that grows
    is the old tile's bytes with the new hashes after them: its old hashes are not read one
    by one."""
    old = read or TileHashReader(size, fetch)
    added = append_hashes(size, leaf_hashes, old)

    def read_new(positions: Sequence[Position]) -> list[bytes]:
        missing = [p for p in positions if p not in added]
        known = _read(old, missing) if missing else {}
        return [added.get(p) or known[p] for p in positions]

    new_size = size + len(leaf_hashes)
    tiles: dict[Tile, bytes] = {}
    for tile in tiles_for_growth(size, new_size):
        kept = tile_width(tile.level, tile.index, size)
        data = fetch(Tile(tile.level, tile.index, kept)) if kept else b""
        if len(data) != kept * HASH_SIZE:
            raise TileInvalid(f"{Tile(tile.level, tile.index, kept).path} is {len(data)} bytes, not {kept * HASH_SIZE}")
        level, first = tile.level * TILE_HEIGHT, tile.index * TILE_WIDTH
        try:
            tiles[tile] = data + b"".join(added[(level, first + i)] for i in range(kept, tile.width))
        except KeyError as exc:
            raise HashMissing(f"the append computed no stored hash at {exc.args[0]}") from None
    return TileAppend(size=new_size, root=tree_hash(new_size, read_new), hashes=added, tiles=tiles)
