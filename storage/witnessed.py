"""What the signed log's witnesses said, kept in the log's directory beside its checkpoint.

Two files, both written whole through a temporary file and a rename, under an flock
(``.witness.lock``) that the processes of one log share:

- ``witnessed``: the newest checkpoint that a witness cosigned, as a signed note: the log's
  own signature line, then every cosignature line gathered for that same checkpoint (C2SP
  tlog-cosignature). It only ever moves forward: a note of a smaller tree never replaces it,
  and a note of the same checkpoint adds the signature lines it lacks. Whether it holds a
  quorum is the reader's check (``purgekeeper.tlog.verify.check_quorum``), with the witness
  keys configured then.
- ``witnesses.json``: each witness's latest state as this log's processes saw it: the size
  it last cosigned, when, and its refusal or the error that kept it from answering, if any.
  Monitoring reads it (it is a small file, read whole), so a process that serves ``/metrics``
  shows what another process's witnessing found.

Neither is part of the log's proof: losing them loses cosignatures already gathered (the
next checkpoint gathers new ones), never a leaf or a checkpoint. So they take an fsync of
their own but no directory fsync.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from purgekeeper.storage.directories import open_regular_file
from purgekeeper.storage.files import atomic_write_at, reason_of
from purgekeeper.tlog.verify import SIGNATURE_PREFIX, ReceiptInvalid, parse_checkpoint, split_note

WITNESSED_FILE = "witnessed"
STATUS_FILE = "witnesses.json"
LOCK_FILE = ".witness.lock"
FILE_BYTES_MAX = 1 << 16  # a note with a hundred signatures is under 16 KiB
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class WitnessStatus:
    """One witness as the log last saw it. ``cosigned_size``: the size of the newest
    checkpoint it cosigned for this log (None before the first); ``refused``: why it refused
    the last checkpoint offered (None when it did not); ``error``: why it could not be asked
    (unreachable, a malformed answer), None when it answered."""

    name: str
    url: str
    cosigned_size: int | None = None
    cosigned_at: float | None = None
    refused: str | None = None
    refused_at: float | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> WitnessStatus:
        fields = {name: value.get(name) for name in cls.__dataclass_fields__}
        return cls(**fields)  # type: ignore[arg-type]


def _newer(kept: WitnessStatus | None, new: WitnessStatus) -> WitnessStatus:
    """``new``, unless it is a cosignature of a smaller tree than ``kept``'s."""
    if kept is None or new.refused is not None or new.cosigned_size is None or kept.cosigned_size is None:
        return new
    return kept if kept.cosigned_size > new.cosigned_size and kept.refused is None else new


def _note_body(note: str) -> str:
    return split_note(note)[0]


def merged(current: str | None, new: str) -> str | None:
    """The note to keep when ``new`` (a cosigned checkpoint) arrives and ``current`` is kept:
    ``new`` when its tree is larger (or nothing is kept), the union of both signature lines
    when they sign the same checkpoint, None (keep ``current``) otherwise."""
    if current is None:
        return new
    try:
        old_body, new_body = _note_body(current), _note_body(new)
        old_size, new_size = parse_checkpoint(old_body).size, parse_checkpoint(new_body).size
    except ReceiptInvalid:
        return new  # what is kept does not parse: the new note replaces it
    if new_size > old_size:
        return new
    if new_body != old_body:
        return None
    lines = _signature_lines(current)
    added = [line for line in _signature_lines(new) if line not in lines]
    return current + "".join(added) if added else None


def _signature_lines(note: str) -> list[str]:
    body_end = note.index("\n\n") + 2
    return [line + "\n" for line in note[body_end:].splitlines() if line.startswith(SIGNATURE_PREFIX)]


class Witnessed:
    """The two files of one log's directory (``directory``: ``<database id>.log``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def note(self) -> str | None:
        """The newest cosigned checkpoint kept, None when there is none (or it cannot be read)."""
        data = self._read(WITNESSED_FILE)
        return data.decode("utf-8", "replace") if data is not None else None

    def statuses(self) -> dict[str, WitnessStatus]:
        """Each witness's status by name; empty when nothing was recorded (or it cannot be read)."""
        data = self._read(STATUS_FILE)
        try:
            found = json.loads(data) if data else {}
            return {name: WitnessStatus.from_json(value) for name, value in found.items()}
        except (ValueError, TypeError, AttributeError):
            return {}

    def keep(self, note: str) -> bool:
        """``note`` kept as the newest cosigned checkpoint when it is newer (or adds lines).
        Returns whether anything was written."""
        with self._locked() as base:
            wanted = merged(self.note(), note)
            if wanted is None:
                return False
            atomic_write_at(base, WITNESSED_FILE, wanted.encode(), sync_directory=False)
            return True

    def record(self, statuses: Mapping[str, WitnessStatus]) -> None:
        """The witnesses' statuses, replacing those recorded for the same names; a cosigned
        size never moves back (another process's round, which read an older head, may end
        after a newer one), a refusal always replaces."""
        with self._locked() as base:
            kept = self.statuses()
            kept.update((name, _newer(kept.get(name), status)) for name, status in statuses.items())
            document = {name: asdict(status) for name, status in sorted(kept.items())}
            atomic_write_at(base, STATUS_FILE, json.dumps(document, indent=1).encode(), sync_directory=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        base = os.open(self.directory, _DIRECTORY)
        try:
            lock = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=base)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield base
            finally:
                os.close(lock)
        finally:
            os.close(base)

    def _read(self, name: str) -> bytes | None:
        try:
            base = os.open(self.directory, _DIRECTORY)
        except OSError:
            return None
        try:
            fd = open_regular_file(base, name)
        except OSError:
            return None
        finally:
            os.close(base)
        try:
            return os.read(fd, FILE_BYTES_MAX)
        except OSError as exc:
            raise OSError(exc.errno, f"{name} cannot be read ({reason_of(exc)})") from None
        finally:
            os.close(fd)


__all__ = ["STATUS_FILE", "WITNESSED_FILE", "WitnessStatus", "Witnessed", "merged"]
