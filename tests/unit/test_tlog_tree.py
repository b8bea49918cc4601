"""The Merkle tree (``purgekeeper.tlog.tree``) against RFC 6962's reference tree, and its proofs against
the verifier (``purgekeeper.tlog.verify``) for many sizes: every proof verifies, one changed byte fails."""

from __future__ import annotations

from collections.abc import Sequence

import hypothesis
import pytest
from hypothesis import strategies as st

from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import EMPTY_ROOT, ReceiptInvalid, leaf_hash, verify_consistency, verify_inclusion

# The Certificate Transparency reference tree (RFC 6962's test data, as the C++ and Go
# implementations and transparency-dev/merkle carry it): leaves, and the root at each size.
REFERENCE_LEAVES = [
    bytes.fromhex(h)
    for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
]
REFERENCE_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (leaf index, tree size, path), and (old size, new size, path), from the same test data.
REFERENCE_INCLUSION = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
REFERENCE_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]


def store_of(leaves: Sequence[bytes]) -> tree.HashStore:
    store = tree.HashStore()
    store.append([leaf_hash(leaf) for leaf in leaves])
    return store


def numbered_leaves(count: int) -> list[bytes]:
    return [f'{{"seq":{i + 1}}}'.encode() for i in range(count)]


BIG = store_of(numbered_leaves(3000))


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_the_empty_tree_hash_is_sha256_of_nothing() -> None:
    assert tree.tree_hash(0, tree.HashStore().read) == EMPTY_ROOT
    assert EMPTY_ROOT.hex() == REFERENCE_ROOTS[0]


def test_the_roots_of_the_reference_tree_at_every_size() -> None:
    store = store_of(REFERENCE_LEAVES)
    assert [tree.tree_hash(n, store.read).hex() for n in range(9)] == REFERENCE_ROOTS


@pytest.mark.parametrize(("index", "size", "path"), REFERENCE_INCLUSION)
def test_reference_inclusion_proofs_are_generated_and_verify(index: int, size: int, path: list[str]) -> None:
    store = store_of(REFERENCE_LEAVES)
    proof = tree.prove_inclusion(size, index, store.read)
    assert [h.hex() for h in proof] == path
    verify_inclusion(leaf_hash(REFERENCE_LEAVES[index]), index, size, proof, bytes.fromhex(REFERENCE_ROOTS[size]))


@pytest.mark.parametrize(("old", "new", "path"), REFERENCE_CONSISTENCY)
def test_reference_consistency_proofs_are_generated_and_verify(old: int, new: int, path: list[str]) -> None:
    store = store_of(REFERENCE_LEAVES)
    proof = tree.prove_consistency(old, new, store.read)
    assert [h.hex() for h in proof] == path
    verify_consistency(old, new, proof, bytes.fromhex(REFERENCE_ROOTS[old]), bytes.fromhex(REFERENCE_ROOTS[new]))


def test_appending_in_batches_stores_what_appending_one_by_one_does() -> None:
    hashes = [leaf_hash(leaf) for leaf in numbered_leaves(700)]
    one_by_one, batched = tree.HashStore(), tree.HashStore()
    for h in hashes:
        one_by_one.append([h])
    for start, end in ((0, 3), (3, 256), (256, 257), (257, 700)):
        batched.append(hashes[start:end])
    assert batched.hashes == one_by_one.hashes
    assert list(one_by_one.hashes)[:5] == [(0, 0), (0, 1), (1, 0), (0, 2), (0, 3)], "Go's storage order"


def test_the_stored_hash_index_is_gos_dense_order() -> None:
    order = [position for position in store_of(numbered_leaves(300)).hashes]
    assert [tree.stored_hash_index(*p) for p in order] == list(range(len(order)))


class CountingReader:
    def __init__(self, store: tree.HashStore) -> None:
        self.store, self.calls, self.positions = store, 0, 0

    def __call__(self, positions: Sequence[tree.Position]) -> list[bytes]:
        self.calls += 1
        self.positions += len(positions)
        return self.store.read(positions)


def test_a_root_a_proof_and_an_append_read_once_and_o_log_n_hashes() -> None:
    for operation in (
        lambda read: tree.tree_hash(2999, read),
        lambda read: tree.prove_inclusion(2999, 1234, read),
        lambda read: tree.prove_consistency(1001, 2999, read),
        lambda read: tree.append_hashes(2047, [b"\x00" * 32], read),
    ):
        reader = CountingReader(BIG)
        operation(reader)
        assert reader.calls == 1
        assert reader.positions <= 2 * 12, "2 log2(3000) at most"


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(size=st.integers(1, 3000), data=st.data())
def test_every_inclusion_proof_verifies_and_one_changed_byte_fails(size: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, size - 1))
    root, leaf = tree.tree_hash(size, BIG.read), leaf_hash(numbered_leaves(index + 1)[index])
    proof = tree.prove_inclusion(size, index, BIG.read)
    verify_inclusion(leaf, index, size, proof, root)
    at = data.draw(st.integers(0, 31))
    with pytest.raises(ReceiptInvalid):
        verify_inclusion(flip(leaf, at), index, size, proof, root)
    with pytest.raises(ReceiptInvalid):
        verify_inclusion(leaf, index, size, proof, flip(root, at))
    if proof:
        which = data.draw(st.integers(0, len(proof) - 1))
        changed = [*proof[:which], flip(proof[which], at), *proof[which + 1 :]]
        with pytest.raises(ReceiptInvalid):
            verify_inclusion(leaf, index, size, changed, root)
        with pytest.raises(ReceiptInvalid):
            verify_inclusion(leaf, index, size, proof[:-1], root)
    with pytest.raises(ReceiptInvalid):
        verify_inclusion(leaf, index, size, [*proof, root], root)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(new=st.integers(1, 3000), data=st.data())
def test_every_consistency_proof_verifies_and_one_changed_byte_fails(new: int, data: st.DataObject) -> None:
    old = data.draw(st.integers(1, new))
    old_root, new_root = tree.tree_hash(old, BIG.read), tree.tree_hash(new, BIG.read)
    proof = tree.prove_consistency(old, new, BIG.read)
    verify_consistency(old, new, proof, old_root, new_root)
    at = data.draw(st.integers(0, 31))
    with pytest.raises(ReceiptInvalid):
        verify_consistency(old, new, proof, flip(old_root, at), new_root)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(old, new, proof, old_root, flip(new_root, at))
    if proof:
        which = data.draw(st.integers(0, len(proof) - 1))
        changed = [*proof[:which], flip(proof[which], at), *proof[which + 1 :]]
        with pytest.raises(ReceiptInvalid):
            verify_consistency(old, new, changed, old_root, new_root)
        with pytest.raises(ReceiptInvalid):
            verify_consistency(old, new, proof[:-1], old_root, new_root)


def test_proofs_refuse_wrong_sizes_and_indexes() -> None:
    root8, leaf5 = bytes.fromhex(REFERENCE_ROOTS[8]), leaf_hash(REFERENCE_LEAVES[5])
    proof = tree.prove_inclusion(8, 5, store_of(REFERENCE_LEAVES).read)
    for index, size in ((4, 8), (6, 8), (7, 8), (5, 16), (5, 4), (5, 5), (8, 8), (-1, 8)):
        with pytest.raises(ReceiptInvalid):
            verify_inclusion(leaf5, index, size, proof, root8)
    with pytest.raises(ReceiptInvalid, match="bytes"):
        verify_inclusion(leaf5, 5, 8, [*proof[:2], b"short"], root8)
    old, new = bytes.fromhex(REFERENCE_ROOTS[6]), root8
    consistency = tree.prove_consistency(6, 8, store_of(REFERENCE_LEAVES).read)
    for old_size, new_size in ((5, 8), (7, 8), (6, 16), (6, 4), (0, 8)):
        with pytest.raises(ReceiptInvalid):
            verify_consistency(old_size, new_size, consistency, old, new)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(6, 8, consistency, new, old)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(6, 8, [], old, new)


def test_trivial_consistency_needs_an_empty_proof_and_matching_roots() -> None:
    root = bytes.fromhex(REFERENCE_ROOTS[3])
    verify_consistency(3, 3, [], root, root)
    verify_consistency(0, 3, [], EMPTY_ROOT, root)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(3, 3, [root], root, root)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(3, 3, [], root, EMPTY_ROOT)
    with pytest.raises(ReceiptInvalid):
        verify_consistency(4, 3, [], root, root)
    with pytest.raises(ValueError):
        tree.prove_consistency(4, 3, BIG.read)
    with pytest.raises(ValueError):
        tree.prove_inclusion(3, 3, BIG.read)


def test_a_missing_stored_hash_is_named() -> None:
    with pytest.raises(tree.HashMissing, match=r"\(0, 10\)"):
        tree.prove_inclusion(11, 0, store_of(numbered_leaves(10)).read)
