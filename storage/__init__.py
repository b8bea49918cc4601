"""What purgekeeper keeps on disk outside the database, and the file-system primitives it is
kept with: the ledger's outside copy (``ledger_copy``) and its signed Merkle log
(``signed_log``), the checkpoint and export files (``checkpoint``), the attachment blob store
(``blobstore``), bots' Memory repositories (``memory``), atomic and fsynced writes
(``files``), and the crash points fault tests arm (``failpoints``).

Synchronous and worker-free: ``workers`` (the actors) and ``commands`` (the API) call into
it; it imports ``schema`` and ``tlog`` only. Imports go commands -> workers -> storage ->
schema (docs/design.md, "Layers")."""
