"""Asking the signed log's witnesses to cosign its checkpoints (C2SP tlog-witness).

A log configured with witnesses (``PURGEKEEPER_WITNESSES``) asks each of them, after it signs
a checkpoint, to cosign it: ``POST <witness>/add-checkpoint`` with the size the witness last
cosigned and the consistency proof from there. The witness answers with its cosignature
(``cosignature/v1``), which joins the checkpoint in the log's ``witnessed`` note
(``purgekeeper.storage.witnessed``), or refuses one that does not extend what it cosigned
before: a restored or forked log. A refusal is recorded with its reason for monitoring
(``health``, the console, ``/metrics``, the alerts), and the witness is asked again at the
next checkpoint, never cosigning a fork.

**Off the acceptance's path.** An acceptance returns once its row is copied and the log has
signed its checkpoint: its receipt exists, signed by the log. The witnesses are asked by a
thread of the handle (``Witnessing``), woken by each acceptance's copy and, failing that,
every ``WITNESS_INTERVAL``; it asks about the newest checkpoint only, and waits
``WITNESS_BATCH`` after each round, so one round covers every acceptance of the second
before it: a busy log costs its witnesses (and itself) a round a second, not one a purge.
The cosignatures join the receipt as they arrive: a later ``receipt`` call returns the
newest checkpoint that holds the quorum (and the row).

**The 409 dance.** A witness that has cosigned size S answers an ``old`` other than S with
409 and S. The log then proves consistency from S to its checkpoint and asks again. S above
the log's size, or a proof from S that the witness rejects (422), means the witness saw
another history of this origin: that is a refusal, never retried with another story.

**Published.** With witnesses configured, ``/log/checkpoint`` is the newest checkpoint that
holds a quorum of cosignatures (``PURGEKEEPER_WITNESS_QUORUM``, default all of them).

httpx is the HTTP client (maintained, already what the tests use against the app), with a
short timeout: a slow witness delays only the next round, never an acceptance.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.signed_log import LogRefused, SignedLog, TreeHead
from purgekeeper.storage.witnessed import Witnessed, WitnessStatus
from purgekeeper.tlog import verify

log = logging.getLogger(__name__)

WITNESS_INTERVAL = 5.0  # seconds between rounds when no acceptance wakes the thread
WITNESS_BATCH = 1.0  # at least this long between two rounds: the acceptances meanwhile share the next
WITNESS_TIMEOUT = 5.0  # seconds a witness has to answer one request
SIZE_CONTENT_TYPE = "text/x.tlog.size"


@dataclass(frozen=True)
class Witness:
    """A witness the log asks: its submission prefix (``url``) and its cosigner key."""

    url: str
    key: verify.CosignerKey

    @property
    def name(self) -> str:
        return self.key.name


def parse_witnesses(text: str | None) -> tuple[Witness, ...]:
    """``PURGEKEEPER_WITNESSES``: entries separated by commas or newlines, each a URL and the
    witness's verification key (a cosignature/v1 vkey) separated by spaces. ValidationError
    naming the entry otherwise."""
    found: list[Witness] = []
    for entry in (part.strip() for part in (text or "").replace("\n", ",").split(",")):
        if not entry:
            continue
        url, _, vkey = entry.partition(" ")
        if not url.startswith(("http://", "https://")) or not vkey.strip():
            raise ValidationError(f"a witness is '<http(s) URL> <vkey>', not {entry[:120]!r}")
        _check_url(url)
        try:
            key = verify.parse_cosigner_key(vkey.strip())
        except verify.ReceiptInvalid as exc:
            raise ValidationError(f"the witness {url} has no cosigner key: {exc.reason}") from None
        found.append(Witness(url.rstrip("/"), key))
    if len({w.name for w in found}) != len(found):
        raise ValidationError("two witnesses share a name: each witness has its own key and name")
    return tuple(found)


def _check_url(url: str) -> None:
    """A witness's URL is its submission prefix: ``/add-checkpoint`` is appended to it, and it
    is shown in monitoring, so it holds no query, fragment or credentials (the protocol has no
    authentication)."""
    parts = urllib.parse.urlsplit(url)
    if parts.query or parts.fragment or "#" in url or "?" in url:
        raise ValidationError(f"a witness's URL is its submission prefix, with no query or fragment: {url[:120]!r}")
    if parts.username is not None or parts.password is not None or not parts.hostname:
        raise ValidationError("a witness's URL names a host and holds no credentials (C2SP tlog-witness has none)")


def check_quorum_setting(quorum: int | None, witnesses: Sequence[Witness]) -> int | None:
    """The quorum, checked against the witnesses configured (None: all of them)."""
    if quorum is None or not witnesses:
        return quorum
    if not 1 <= quorum <= len(witnesses):
        raise ValidationError(f"PURGEKEEPER_WITNESS_QUORUM must be from 1 to {len(witnesses)}, not {quorum}")
    return quorum


class Refused(Exception):
    """The witness refused the checkpoint: it holds another history of this log."""


class Unreachable(Exception):
    """The witness could not be asked, or gave an answer that is not the protocol's."""


@dataclass(frozen=True)
class Round:
    """What asking every witness about one checkpoint gave."""

    statuses: dict[str, WitnessStatus]
    cosignatures: list[str]


class Witnesses:
    """The witnesses of one log, the files where their answers are kept, and the quorum."""

    def __init__(self, log: SignedLog, witnesses: Sequence[Witness], *, quorum: int | None = None) -> None:
        self.log = log
        self.witnesses = tuple(witnesses)
        self.quorum = quorum
        self.files = Witnessed.beside(log.directory)
        self._known_sizes: dict[str, int] = {}  # the size each witness last told us it cosigned

    @property
    def keys(self) -> list[verify.CosignerKey]:
        return [w.key for w in self.witnesses]

    def ask(self, client: Callable[..., object]) -> Round | None:
        """Ask every witness to cosign the newest checkpoint; keep what they gave and record
        their statuses. None when there is no checkpoint (or it cannot be read)."""
        try:
            current = self.log.head()
        except LogRefused:
            return None
        if current is None:
            return None
        known = self.files.statuses()
        statuses: dict[str, WitnessStatus] = {}
        lines: list[str] = []
        for witness in self.witnesses:
            before = known.get(witness.name) or WitnessStatus(witness.name, witness.url)
            status, line = self._ask_one(client, witness, current, before)
            statuses[witness.name] = status
            lines.extend(line)
        if lines:
            self.files.keep(current.note + "".join(lines), self.holds_quorum)
        self.files.record(statuses)
        return Round(statuses, lines)

    def _ask_one(
        self, client: Callable[..., object], witness: Witness, current: TreeHead, before: WitnessStatus
    ) -> tuple[WitnessStatus, list[str]]:
        if before.cosigned_size == current.size and before.refused is None and self._holds(witness, current):
            return replace(before, url=witness.url, error=None), []
        try:
            lines = self._cosign(client, witness, current)
        except Refused as exc:
            log.error(
                "the witness %s refused checkpoint %d of %s: %s", witness.name, current.size, self.log.origin, exc
            )
            return replace(before, url=witness.url, refused=str(exc), refused_at=time.time(), error=None), []
        except Unreachable as exc:
            log.warning("the witness %s could not be asked: %s", witness.name, exc)
            return replace(before, url=witness.url, error=str(exc)), []
        cosigned = WitnessStatus(witness.name, witness.url, current.size, time.time())
        return cosigned, lines

    def _holds(self, witness: Witness, current: TreeHead) -> bool:
        """The kept note is ``current`` with this witness's cosignature on it."""
        note = self.files.note()
        if note is None or verify.split_note(note)[0] != verify.split_note(current.note)[0]:
            return False
        try:
            return bool(verify.verified_cosignatures(note, [witness.key]))
        except verify.ReceiptInvalid:
            return False

    def _cosign(self, client: Callable[..., object], witness: Witness, current: TreeHead) -> list[str]:
        """The witness's cosignature lines on ``current`` (one 409 answered with a proof from
        the size the witness names)."""
        old = self._known_sizes.get(witness.name, 0)
        for _ in range(3):
            if old > current.size:
                current = self._newer(current, old)
            proof = self.log.consistency(old, current) if 0 < old < current.size else []
            answer = _post(client, witness, verify_body(old, proof, current.note))
            if answer.status == 200:
                self._known_sizes[witness.name] = current.size
                return self._checked_lines(witness, current, answer.body)
            if answer.status == 409 and answer.size is not None and answer.size != old:
                old = answer.size
                self._known_sizes[witness.name] = old
                continue
            raise Refused(_refusal(answer.status, old, current.size, answer.body))
        raise Unreachable(f"it named another size at each of three requests (the last {old})")

    def _newer(self, current: TreeHead, cosigned: int) -> TreeHead:
        """The log's newest checkpoint once more, when the witness has cosigned a larger tree
        than ``current``: another process of this log may have signed it since this round
        read its head. Refused when even the newest is smaller: the log was restored."""
        try:
            newest = self.log.head()
        except LogRefused:
            newest = None
        if newest is None or newest.size < cosigned:
            size = current.size if newest is None else newest.size
            raise Refused(
                f"it has cosigned size {cosigned} of this log, larger than its newest checkpoint ({size}): "
                "the log was restored from an old backup, or forked"
            )
        return newest

    @staticmethod
    def _checked_lines(witness: Witness, current: TreeHead, body: str) -> list[str]:
        """The one cosignature line of the answer that verifies with the witness's key (the
        latest, if several do); lines of other keys are ignored, as the protocol says."""
        found: list[tuple[int, str]] = []
        for line in body.splitlines()[: verify.MAX_SIGNATURES]:
            if not line.startswith(f"{verify.SIGNATURE_PREFIX}{witness.name} "):
                continue
            try:
                cosigned = verify.verified_cosignatures(f"{current.note}{line}\n", [witness.key])
            except verify.ReceiptInvalid:
                continue
            found.extend((c.timestamp, f"{line}\n") for c in cosigned)
        if not found:
            raise Unreachable("it answered 200 with no cosignature that verifies with its key")
        return [max(found)[1]]

    def holds_quorum(self, note: str) -> bool:
        """``note`` carries the quorum of the witnesses' cosignatures."""
        try:
            verify.check_quorum(note, self.keys, self.quorum)
        except verify.ReceiptInvalid:
            return False
        return True

    def published(self) -> str | None:
        """The newest kept note that holds the quorum of cosignatures (None when none does),
        checked again with the witnesses configured now."""
        note = self.files.published()
        return note if note is not None and self.holds_quorum(note) else None


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    size: int | None  # a 409's size (text/x.tlog.size), else None


def verify_body(old: int, proof: Sequence[bytes], note: str) -> bytes:
    """The add-checkpoint request body (``purgekeeper.tlog.witness.add_checkpoint_body``)."""
    from purgekeeper.tlog import witness  # lazy: the module that also signs, which a log never needs

    return witness.add_checkpoint_body(old, proof, note)


def _post(client: Callable[..., object], witness: Witness, body: bytes) -> Answer:
    import httpx  # lazy: a handle without witnesses never loads it

    try:
        response = client(f"{witness.url}/add-checkpoint", content=body, timeout=WITNESS_TIMEOUT)
    except httpx.HTTPError as exc:
        raise Unreachable(f"{witness.url} cannot be reached ({type(exc).__name__}: {exc})") from None
    assert isinstance(response, httpx.Response)
    text = response.text[:4096]
    size = None
    if response.status_code == 409 and response.headers.get("content-type", "").startswith(SIZE_CONTENT_TYPE):
        try:
            size = verify.decimal(text.strip(), "the witness's size")
        except verify.ReceiptInvalid as exc:
            raise Unreachable(f"its 409 names no size ({exc.reason})") from None
    if response.status_code >= 500:
        raise Unreachable(f"{witness.url} answered {response.status_code}")
    return Answer(response.status_code, text, size)


_REFUSALS = {
    400: "it found the request malformed",
    403: "it does not trust this log's key (add the log's verification key to the witness)",
    404: "it does not follow this log's origin (add the origin and key to the witness)",
    409: "it has cosigned another tree of this size",
    422: "the consistency proof from the size it cosigned does not verify: it holds another history of this log",
}


def _refusal(status: int, old: int, size: int, body: str) -> str:
    reason = _REFUSALS.get(status, f"it answered {status}")
    detail = body.strip().splitlines()[0][:200] if body.strip() else ""
    return f"{reason} (status {status}, from size {old} to {size}{': ' + detail if detail else ''})"


class Witnessing:
    """The handle's thread that asks the witnesses (``Witnesses.ask``) after each signing."""

    def __init__(
        self, witnesses: Witnesses, *, interval: float = WITNESS_INTERVAL, batch: float = WITNESS_BATCH
    ) -> None:
        self.witnesses = witnesses
        self.interval = interval
        self.batch = batch
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="purgekeeper-witnessing", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=WITNESS_TIMEOUT + 1)

    def _run(self) -> None:
        import httpx  # lazy: only a handle with witnesses runs this

        with httpx.Client() as client:
            while not self._stopped.is_set():
                self._wake.wait(self.interval)
                self._wake.clear()
                if self._stopped.is_set():
                    return
                self.round(client.post)
                self._stopped.wait(self.batch)

    def round(self, post: Callable[..., object]) -> Round | None:
        """One round now (the thread's, or a caller's who wants the answers at once)."""
        try:
            return self.witnesses.ask(post)
        except Exception:  # a round that fails is retried at the next one; the reason is logged
            log.exception("asking the witnesses failed")
            return None


__all__ = [
    "WITNESS_INTERVAL",
    "Round",
    "Witness",
    "Witnesses",
    "Witnessing",
    "check_quorum_setting",
    "parse_witnesses",
]
