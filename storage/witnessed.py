"""What the signed log's witnesses said, kept beside the log's directory.

For the database whose id is ``D``, in the checkpoint directory, ``D.witness/`` (never inside
``D.log/``, which may be published as it is: these files name the witnesses and their
errors). Three files, each written whole through a temporary file and a rename, under an
flock (``.lock``) that the processes of one log share:

- ``gathering``: the newest checkpoint that a witness cosigned, as a signed note: the log's
  own signature line, then one cosignature line per witness gathered for that same checkpoint
  (C2SP tlog-cosignature). It only ever moves forward: a note of a smaller tree never
  replaces it, and a note of the same checkpoint adds the lines of witnesses it lacks.
- ``published``: the newest checkpoint that holds the quorum of cosignatures. It moves
  forward only to a checkpoint that holds the quorum too, so a witness missing one round
  never takes the published checkpoint away.
- ``witnesses.json``: each witness's latest state as this log's processes saw it: the size
  it last cosigned, when, and its refusal or the error that kept it from answering, if any.
  Monitoring reads it (a small file, read whole), so a process that serves ``/metrics``
  shows what another process's witnessing found.

None is part of the log's proof: losing them loses cosignatures already gathered (the next
checkpoint gathers new ones), never a leaf or a checkpoint. So they take an fsync of their
own but no directory fsync.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from purgekeeper.storage.directories import open_regular_file
from purgekeeper.storage.files import atomic_write_at, flocked, reason_of
from purgekeeper.tlog.verify import SIGNATURE_PREFIX, ReceiptInvalid, parse_checkpoint, split_note

SUFFIX = ".witness"
GATHERING_FILE = "gathering"
PUBLISHED_FILE = "published"
STATUS_FILE = "witnesses.json"
LOCK_FILE = ".lock"
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


def _size(note: str) -> int:
    return parse_checkpoint(split_note(note)[0]).size


def merged(current: str | None, new: str) -> str | None:
    """The note to keep when ``new`` (a cosigned checkpoint) arrives and ``current`` is kept:
    ``new`` when its tree is larger (or nothing is kept), ``current`` with the lines of the
    signers it lacks when both sign the same checkpoint, None (keep ``current``) otherwise.
    A signer keeps one line (the first kept)."""
    if current is None:
        return _one_line_each(new)
    try:
        old_body, new_body = split_note(current)[0], split_note(new)[0]
        old_size, new_size = parse_checkpoint(old_body).size, parse_checkpoint(new_body).size
    except ReceiptInvalid:
        return _one_line_each(new)  # what is kept does not parse: the new note replaces it
    if new_size > old_size:
        return _one_line_each(new)
    if new_body != old_body:
        return None
    signers = {_signer(line) for line in _signature_lines(current)}
    added = [line for line in _signature_lines(new) if _signer(line) not in signers]
    return _one_line_each(current + "".join(added)) if added else None


def _signature_lines(note: str) -> list[str]:
    body_end = note.index("\n\n") + 2
    return [line + "\n" for line in note[body_end:].splitlines() if line.startswith(SIGNATURE_PREFIX)]


def _signer(line: str) -> str:
    return line[len(SIGNATURE_PREFIX) :].split(" ", 1)[0]


def _one_line_each(note: str) -> str:
    body_end = note.index("\n\n") + 2
    seen: set[str] = set()
    lines = []
    for line in _signature_lines(note):
        if _signer(line) not in seen:
            seen.add(_signer(line))
            lines.append(line)
    return note[:body_end] + "".join(lines)


class Witnessed:
    """The files of one log's witnessing (``directory``: ``<database id>.witness``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @classmethod
    def beside(cls, log_directory: Path) -> Witnessed:
        """The witnessing of the log in ``log_directory`` (``<database id>.log``)."""
        name = log_directory.name.removesuffix(".log")
        return cls(log_directory.with_name(f"{name}{SUFFIX}"))

    def note(self) -> str | None:
        """The newest cosigned checkpoint gathered, None when there is none (or it cannot be read)."""
        return self._text(GATHERING_FILE)

    def published(self) -> str | None:
        """The newest checkpoint kept with the quorum, None when there is none."""
        return self._text(PUBLISHED_FILE)

    def statuses(self) -> dict[str, WitnessStatus]:
        """Each witness's status by name; empty when nothing was recorded (or it cannot be read)."""
        data = self._read(STATUS_FILE)
        try:
            found = json.loads(data) if data else {}
            return {name: WitnessStatus.from_json(value) for name, value in found.items()}
        except (ValueError, TypeError, AttributeError):
            return {}

    def keep(self, note: str, holds_quorum: Callable[[str], bool]) -> bool:
        """``note`` gathered when it is newer (or adds witnesses); the gathered note published
        too when it holds the quorum and is newer than the published one. Returns whether
        anything was written."""
        with self._locked() as base:
            wanted = merged(self.note(), note)
            if wanted is None:
                return False
            atomic_write_at(base, GATHERING_FILE, wanted.encode(), sync_directory=False)
            published = self.published()
            if holds_quorum(wanted) and (published is None or _newer_tree(wanted, published)):
                atomic_write_at(base, PUBLISHED_FILE, wanted.encode(), sync_directory=False)
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
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o700)
        base = os.open(self.directory, _DIRECTORY | os.O_NOFOLLOW)
        try:
            with flocked(LOCK_FILE, dir_fd=base):
                yield base
        finally:
            os.close(base)

    def _text(self, name: str) -> str | None:
        data = self._read(name)
        return data.decode("utf-8", "replace") if data is not None else None

    def _read(self, name: str) -> bytes | None:
        try:
            base = os.open(self.directory, _DIRECTORY | os.O_NOFOLLOW)
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


def _newer_tree(note: str, than: str) -> bool:
    """``note`` signs a larger tree than ``than``, or the same checkpoint (with more lines)."""
    try:
        return _size(note) > _size(than) or split_note(note)[0] == split_note(than)[0]
    except ReceiptInvalid:
        return True  # what is published does not parse: a note that does replaces it


__all__ = [
    "GATHERING_FILE",
    "PUBLISHED_FILE",
    "STATUS_FILE",
    "SUFFIX",
    "WitnessStatus",
    "Witnessed",
    "merged",
]
