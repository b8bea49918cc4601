"""The C2SP tlog-tiles layout (``purgekeeper.tlog.tree``): tile paths, which tiles an append writes, and
reading stored hashes back from tiles gives the same roots and proofs as the hashes."""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import strategies as st

from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import leaf_hash


def leaf_hashes(count: int, *, start: int = 0) -> list[bytes]:
    return [leaf_hash(f'{{"seq":{i + 1}}}'.encode()) for i in range(start, start + count)]


@pytest.mark.parametrize(
    ("path", "tile"),
    [
        ("tile/0/000", tree.Tile(0, 0)),
        ("tile/0/001", tree.Tile(0, 1)),
        ("tile/0/001.p/5", tree.Tile(0, 1, 5)),
        ("tile/5/x123/x456/078", tree.Tile(5, 123456078)),
        ("tile/5/x123/x456/078.p/2", tree.Tile(5, 123456078, 2)),
        ("tile/0/x003/x057/500", tree.Tile(0, 3057500)),
        ("tile/4/x001/x234/067.p/1", tree.Tile(4, 1234067, 1)),
        ("tile/1/x001/000", tree.Tile(1, 1000)),
    ],
)
def test_tile_paths_follow_c2sp(path: str, tile: tree.Tile) -> None:
    assert tile.path == path
    assert tree.Tile.parse(path) == tile


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/1",
        "tile/0/x001",
        "tile/0/001/002",
        "tile/0/x000/001",
        "tile/0/001.p/0",
        "tile/0/001.p/256",
        "tile/0/001.p/300",
        "tile/-1/001",
        "tile/8/0/001",
        "tile/data/001",
        "tile/0/001.p/05",
    ],
)
def test_what_is_not_a_tile_path_is_refused(path: str) -> None:
    with pytest.raises(tree.TileInvalid):
        tree.Tile.parse(path)


def test_growth_writes_completed_tiles_and_the_new_partial_ones() -> None:
    assert tree.tiles_for_growth(0, 0) == []
    assert tree.tiles_for_growth(0, 3) == [tree.Tile(0, 0, 3)]
    assert tree.tiles_for_growth(3, 3) == []
    assert tree.tiles_for_growth(3, 256) == [tree.Tile(0, 0), tree.Tile(1, 0, 1)]
    assert tree.tiles_for_growth(256, 300) == [tree.Tile(0, 1, 44)]
    assert tree.tiles_for_growth(300, 70000) == [
        *(tree.Tile(0, n) for n in range(1, 273)),
        tree.Tile(0, 273, 112),
        tree.Tile(1, 0),
        tree.Tile(1, 1, 17),
        tree.Tile(2, 0, 1),
    ]


def tiles_of(store: tree.HashStore) -> dict[tree.Tile, bytes]:
    return {tile: tree.tile_data(tile, store.read) for tile in tree.tiles_for_growth(0, store.size)}


def test_tile_bytes_are_the_stored_hashes_of_their_level() -> None:
    store = tree.HashStore()
    store.append(leaf_hashes(600))
    tiles = tiles_of(store)
    assert tiles[tree.Tile(0, 2, 88)] == b"".join(store.hashes[(0, i)] for i in range(512, 600))
    assert tiles[tree.Tile(1, 0, 2)] == store.hashes[(8, 0)] + store.hashes[(8, 1)]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=5))
def test_appending_to_tiles_gives_the_roots_and_proofs_of_the_stored_hashes(sizes: list[int]) -> None:
    store, published = tree.HashStore(), dict[tree.Tile, bytes]()
    for count in sizes:
        result = tree.append_to_tiles(store.size, leaf_hashes(count, start=store.size), published.__getitem__)
        store.append(leaf_hashes(count, start=store.size))
        published.update(result.tiles)
        assert result.size == store.size
        assert result.root == tree.tree_hash(store.size, store.read)
    assert {t: published[t] for t in tiles_of(store)} == tiles_of(store), "each tile written is the stored hashes"
    reader = tree.TileHashReader(store.size, published.__getitem__)
    for index in {0, store.size // 3, store.size - 1} if store.size else ():
        assert tree.prove_inclusion(store.size, index, reader) == tree.prove_inclusion(store.size, index, store.read)
    if store.size:
        old = max(1, store.size // 2)
        assert tree.prove_consistency(old, store.size, reader) == tree.prove_consistency(old, store.size, store.read)


def test_a_proof_from_tiles_fetches_few_tiles() -> None:
    store = tree.HashStore()
    store.append(leaf_hashes(70000))
    tiles = tiles_of(store)
    fetched: list[tree.Tile] = []

    def fetch(tile: tree.Tile) -> bytes:
        fetched.append(tile)
        return tiles[tile]

    reader = tree.TileHashReader(store.size, fetch)
    assert tree.prove_inclusion(store.size, 12345, reader) == tree.prove_inclusion(store.size, 12345, store.read)
    assert len(fetched) == len(set(fetched)) <= 6


def test_a_tile_of_the_wrong_length_or_a_hash_past_the_tree_is_refused() -> None:
    store = tree.HashStore()
    store.append(leaf_hashes(10))
    tiles = tiles_of(store)
    short = tree.TileHashReader(10, lambda tile: tiles[tile][:-1])
    with pytest.raises(tree.TileInvalid, match=r"tile/0/000\.p/10 is 319 bytes"):
        short([(0, 3)])
    with pytest.raises(tree.HashMissing):
        tree.TileHashReader(10, tiles.__getitem__)([(4, 0)])
