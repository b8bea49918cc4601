"""The keys a handle seals content with, from its key store (crypto-shredding, issue 36).

Every event's content (its body, its attachments' names, its admissions' payloads) is sealed
under a key of its own, and so are every blob's bytes; the row names its key by a random id
(``events.key_id``, ``blobs.key_id``), and a purge destroys the keys of what it purged.

**Keys are made ahead, in batches.** Making a key is a durable write of the key store (an
fsync): paid by every ingest, it would cost more than the rest of the ingest's own work. So
:meth:`ContentKeys.take` hands out keys this process made ``POOL`` at a time in one write of
the store, each to one item only (a key is never given twice, so destroying one item's key
never touches another's). A key is in the store, durably, before any row names it. Keys made
and not handed out before the process ends stay in the store, sealing nothing: a few dozen
per process start, 32 bytes each, wrapped.

**Ids, not content.** A key's id is random (``k`` and 32 hex digits); it says nothing about
what it seals, and it never changes: the row's ``key_id`` survives a purge (the NULLed body
keeps it), so a restore of an old backup finds the id, asks the store, and gets None.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from purgekeeper.storage.keystore import CACHE_KEYS, KeyStore
from purgekeeper.storage.sealing import cipher

__all__ = ["POOL", "ContentKeys"]

POOL = 64  # keys made per write of the key store: one fsync for this many ingests


class ContentKeys:
    """``take`` a new key, ``lookup`` existing ones, ``destroy`` them: over ``store``."""

    def __init__(self, store: KeyStore, *, pool: int = POOL) -> None:
        self.store = store
        self._pool: deque[tuple[str, bytes]] = deque()
        self._ciphers: dict[str, AESGCM] = {}  # by key id, in the order built
        self._generation: int | None = None  # the store's, when the AEADs kept were built
        # the store's counter of destructions; None (a key server's client): no AEAD is kept
        self._generation_of: Callable[[], int] | None = getattr(store, "generation", None)
        self._size = pool
        self._lock = threading.Lock()

    def take(self) -> tuple[str, bytes]:
        """A key no item was given before, and its id; durably in the store already."""
        with self._lock:
            if not self._pool:
                made = self.store.create(f"k{uuid.uuid4().hex}" for _ in range(self._size))
                self._pool.extend(made.items())
            return self._pool.popleft()

    def take_many(self, count: int) -> list[tuple[str, bytes]]:
        """``count`` keys, as ``take`` gives them: what the pool lacks made in one write of
        the store (a batch of a thousand events pays one fsync, not one per ``POOL`` keys)."""
        with self._lock:
            lacking = count - len(self._pool)
            if lacking > 0:
                made = self.store.create(f"k{uuid.uuid4().hex}" for _ in range(lacking + self._size))
                self._pool.extend(made.items())
            return [self._pool.popleft() for _ in range(count)]

    def ciphers(self, key_ids: Iterable[str]) -> dict[str, AESGCM | None]:
        """Each id's AEAD (``sealing.cipher``), or None when its key was destroyed (or never
        made). The AEADs this process built are kept, up to ``CACHE_KEYS``, while the store's
        generation (``FileKeyStore.generation``: every destruction, in any process, moves it)
        stays where it was when they were built: a warm read costs one read of that counter,
        not a lookup per key, and no AEAD outlives its key's destruction. A store without a
        generation (a key server's client) is asked for every key, every time."""
        wanted = [key_id for key_id in dict.fromkeys(key_ids) if key_id]
        built: dict[str, AESGCM | None] = {}
        if self._generation_of is not None and wanted:
            now = self._generation_of()
            with self._lock:
                if now != self._generation:
                    self._ciphers.clear()
                    self._generation = now
                cache = self._ciphers
                built = {key_id: cache[key_id] for key_id in wanted if key_id in cache}
        missing = [key_id for key_id in wanted if key_id not in built]
        if missing:
            found = self.store.get(missing)
            with self._lock:
                for key_id, key in found.items():
                    built[key_id] = None if key is None else self._remember(key_id, key)
        return built

    def _remember(self, key_id: str, key: bytes) -> AESGCM:
        if self._generation_of is None:
            return cipher(key)
        made = self._ciphers[key_id] = cipher(key)
        while len(self._ciphers) > CACHE_KEYS:
            del self._ciphers[next(iter(self._ciphers))]  # the oldest first
        return made

    def lookup(self, key_ids: Iterable[str]) -> dict[str, bytes | None]:
        """Each id's key, or None when it was destroyed (or the store never held it); one
        read of the store for the lot."""
        wanted = [key_id for key_id in dict.fromkeys(key_ids) if key_id]
        return self.store.get(wanted) if wanted else {}

    def destroyed(self, key_ids: Iterable[str]) -> set[str]:
        return self.store.destroyed(list(key_ids))

    def destroy(self, key_ids: Iterable[str]) -> int:
        """Destroy these keys, durably before it returns (idempotent); how many were there.
        KeyStoreUnusable, with nothing destroyed, when the store never held one of them: a
        purge's step then fails rather than finish against the wrong store."""
        wanted = [key_id for key_id in dict.fromkeys(key_ids) if key_id]
        with self._lock:
            for key_id in wanted:
                self._ciphers.pop(key_id, None)
        return self.store.destroy(wanted, held_only=True) if wanted else 0
