"""A witness's signing key in its file: made once (0600, never over anything), read strictly.

The file holds one line, the cosigner's signing key (``purgekeeper.tlog.witness.Cosigner.skey``).
Errors name the file, never what it holds.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from purgekeeper.schema.errors import Conflict, InfrastructureError, ValidationError
from purgekeeper.storage.files import fsync_directory
from purgekeeper.tlog import witness

__all__ = ["WitnessKeyExists", "WitnessKeyUnusable", "create_witness_key", "read_witness_key"]

MAX_KEY_BYTES = 4096  # a signing key is one line of about 100 bytes


class WitnessKeyExists(Conflict):
    """The witness's key file exists already: witness key init never replaces a key."""


class WitnessKeyUnusable(InfrastructureError):
    """The witness's key file cannot be used: it is missing, not a regular file, open to
    others, or not a cosigner signing key."""


def create_witness_key(path: Path, *, name: str) -> witness.Cosigner:
    """A new cosigner key in ``path`` (0600, fsynced), written aside and linked into place so
    that nothing is ever replaced and a reader never finds it empty."""
    try:
        cosigner = witness.Cosigner.generate(name)
    except witness.CosignerKeyInvalid as exc:
        raise ValidationError(f"the witness's name: {exc}") from None
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, (cosigner.skey + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(aside, path)
    except FileExistsError:
        raise WitnessKeyExists(f"{path} exists already: witness key init never replaces a key") from None
    finally:
        os.unlink(aside)
    fsync_directory(path.parent)
    return cosigner


def read_witness_key(path: Path) -> witness.Cosigner:
    """The cosigner key in ``path``; WitnessKeyUnusable, naming the file, when it cannot be."""
    data = _key_bytes(path)
    try:
        return witness.Cosigner.from_skey(data.decode("ascii"))
    except (UnicodeDecodeError, witness.CosignerKeyInvalid):
        raise WitnessKeyUnusable(f"the witness key {path} is not a cosigner signing key (witness key init)") from None


def _key_bytes(path: Path) -> bytes:
    try:  # O_NOFOLLOW and O_NONBLOCK: no symlink followed, no FIFO waited on
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise WitnessKeyUnusable(f"the witness key {path} cannot be opened ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise WitnessKeyUnusable(f"the witness key {path} is not a regular file")
        if mode & 0o077:
            raise WitnessKeyUnusable(f"the witness key {path} is open to others: chmod 600 it")
        return os.read(fd, MAX_KEY_BYTES)
    finally:
        os.close(fd)
