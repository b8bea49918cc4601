"""A witness's signing key in its file: made once (0600, never over anything), read strictly.

The file holds one line, the cosigner's signing key (``purgekeeper.tlog.witness.Cosigner.skey``).
Errors name the file, never what it holds.
"""

from __future__ import annotations

from pathlib import Path

from purgekeeper.schema.errors import Conflict, InfrastructureError, ValidationError
from purgekeeper.storage.files import PrivateFileUnusable, create_private, read_private
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
    try:
        create_private(path, (cosigner.skey + "\n").encode())
    except FileExistsError:
        raise WitnessKeyExists(f"{path} exists already: witness key init never replaces a key") from None
    return cosigner


def read_witness_key(path: Path) -> witness.Cosigner:
    """The cosigner key in ``path``; WitnessKeyUnusable, naming the file, when it cannot be
    (a symlink is refused too)."""
    named = f"the witness key {path}"
    try:
        data = read_private(path, MAX_KEY_BYTES, follow=False)
    except FileNotFoundError:
        raise WitnessKeyUnusable(f"{named} is missing (witness key init makes one)") from None
    except PrivateFileUnusable as exc:
        raise WitnessKeyUnusable(f"{named} {exc.reason}") from None
    try:
        return witness.Cosigner.from_skey(data.decode("ascii"))
    except (UnicodeDecodeError, witness.CosignerKeyInvalid):
        raise WitnessKeyUnusable(f"{named} is not a cosigner signing key (witness key init)") from None
