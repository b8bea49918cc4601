"""What purgekeeper keeps on disk outside the database, and the file-system primitives it is
kept with: the ledger's outside copy (``ledger_copy``, which names all of it: its layout in
``copy_layout``, reading and writing it in ``copy_reading`` and ``copy_writing``, keeping it
up to the database in ``copy_sync``, the version 2 export in ``copy_export``) and its signed
Merkle log (``signed_log``, with ``log_format`` and ``log_reading``), the checkpoint and
export files (``checkpoint``), the attachment blob store (``blobstore``), content sealed at
rest (``sealing``, files in chunks in ``sealed_files``) under keys from the key store
(``keystore``, its files in ``keystore_files``, its rotation in ``keystore_rotation``, handed
out by ``content_keys``), bots' Memory repositories (``memory``), atomic and fsynced writes
(``files``), and the crash points fault tests arm (``failpoints``).

Synchronous and worker-free: ``workers`` (the actors) and ``commands`` (the API) call into
it; it imports ``schema`` and ``tlog`` only. Imports go commands -> workers -> storage ->
schema (docs/design.md, "Layers")."""
