"""Verifiable purge receipts: the ledger as an RFC 6962 Merkle tree, signed checkpoints.

A pure library that imports nothing else of purgekeeper:

- ``purgekeeper.tlog.verify``: the offline verifier a host can vendor (standard library and
  ``cryptography`` only): leaf and node hashes, inclusion and consistency proofs (RFC 9162),
  C2SP signed notes and checkpoints, receipts, and ``python -m purgekeeper.tlog.verify``.
- ``purgekeeper.tlog.tree``: the stored hashes of the tree, its roots and proofs, and their layout in
  C2SP tlog-tiles.
- ``purgekeeper.tlog.note``: Ed25519 keys and the signing of notes and checkpoints.

Nothing is re-exported here, so that ``python -m purgekeeper.tlog.verify`` runs the module once.
"""
