"""The witness: C2SP tlog-witness's ``add-checkpoint`` as a small ASGI app (Starlette).

A witness follows a few logs (each origin with the Ed25519 key or keys it trusts for it) and
cosigns a checkpoint only when it extends the latest one it cosigned for that origin, so a
log cannot show it two histories. Its state is ``purgekeeper.storage.witness_state``; its key
a ``purgekeeper.tlog.witness.Cosigner``.

``POST /add-checkpoint`` applies the spec's rules in its order, each with its status:

- 400: the body is not ``old <size>``, proof lines, an empty line and a signed checkpoint
  (at most 64 KiB), or the old size is above the checkpoint's;
- 404: the witness does not follow the checkpoint's origin;
- 403: no signature on it verifies with a key trusted for that origin (signatures by other
  keys are ignored);
- 409 with ``text/x.tlog.size`` body ``<size>\\n``: the old size is not the size the witness
  cosigned last (0 before the first);
- 409: the checkpoint has that size and another root;
- 422: the consistency proof from the recorded checkpoint does not verify;
- 200: the cosignature line, once the new checkpoint is recorded durably.

The size check, the proof check and the record are one transaction of the state
(``WitnessState.advance``): two requests never roll the state back. A 409 or a 422 is logged
with the checkpoint that caused it: evidence of a fork, or of a log restored from a backup.

``GET /healthz`` answers ``ok``; ``GET /logs`` lists, for monitoring, each origin followed with
the size, root and time of the checkpoint cosigned last (null before the first).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from purgekeeper.commands import logs
from purgekeeper.commands.serving import BoundServer, bind_listener, quiet_signals, url_of
from purgekeeper.schema.errors import InfrastructureError, ValidationError
from purgekeeper.storage import witness_key
from purgekeeper.storage.witness_state import Cosigned, WitnessState
from purgekeeper.tlog import verify, witness
from purgekeeper.workers.shutdown import Watchdog

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Refusal",
    "Witness",
    "create_witness_app",
    "open_witness",
    "parse_log",
    "serve",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
# After a SIGTERM, a request in flight gets this long to finish (one is a few milliseconds),
# well within purgekeeper.workers.shutdown.STOP_BOUND, after which the watchdog ends the process.
REQUEST_GRACE = dt.timedelta(seconds=3)


class Refusal(Exception):
    """The witness does not cosign this checkpoint."""

    status = 400

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(self.reason)

    def response(self) -> Response:
        return PlainTextResponse(self.reason + "\n", status_code=self.status)


class BadRequest(Refusal):
    """The request is malformed."""


class UnknownOrigin(Refusal):
    """The witness does not follow this log."""

    status = 404


class Untrusted(Refusal):
    """No signature on the checkpoint verifies with a key the witness trusts for its origin."""

    status = 403


class OldSizeMismatch(Refusal):
    """The old size is not the size of the checkpoint the witness cosigned last."""

    status = 409

    def __init__(self, recorded: int) -> None:
        super().__init__()
        self.recorded = recorded

    def response(self) -> Response:
        body = f"{self.recorded}\n"
        return Response(body, status_code=self.status, headers={"Content-Type": witness.SIZE_CONTENT_TYPE})


class RootConflict(Refusal):
    """The checkpoint has the size of the one cosigned last, and another root."""

    status = 409


class ProofInvalid(Refusal):
    """The consistency proof from the checkpoint cosigned last does not verify."""

    status = 422


def parse_log(value: str) -> tuple[str, verify.Verifier]:
    """``[ORIGIN=]VKEY``: a log the witness follows and a key it trusts for it (the origin
    defaults to the key's name). An Ed25519 key's base64 (33 bytes) has no padding, so the
    last ``=`` ends the origin. ValidationError, naming the value, otherwise."""
    origin, sep, vkey = value.strip().rpartition("=")
    try:
        verifier = verify.Verifier.from_vkey(vkey)
    except verify.ReceiptInvalid as exc:
        raise ValidationError(f"--log {value!r}: {exc.reason}") from None
    if sep and not origin:
        raise ValidationError(f"--log {value!r}: the origin before '=' is empty")
    return (origin if sep else verifier.name), verifier


def open_witness(key_file: Path, state_dir: Path, log_specs: Sequence[str]) -> Witness:
    """The witness of ``purgectl witness serve``: its key's file, its state directory and the
    ``[ORIGIN=]VKEY`` of each log it follows (at least one; an origin may have several keys)."""
    if not log_specs:
        raise ValidationError("a witness follows at least one log: --log [ORIGIN=]VKEY (or PURGEKEEPER_WITNESS_LOGS)")
    followed: dict[str, list[verify.Verifier]] = {}
    for spec in log_specs:
        origin, key = parse_log(spec)
        followed.setdefault(origin, []).append(key)
    cosigner = witness_key.read_witness_key(key_file)
    try:
        state = WitnessState(state_dir)
    except (OSError, sqlite3.Error) as exc:
        raise InfrastructureError(f"the witness's state directory {state_dir} cannot be used ({exc})") from None
    return Witness(cosigner, state, {origin: tuple(keys) for origin, keys in followed.items()})


@dataclass(frozen=True)
class Witness:
    """What ``add-checkpoint`` decides, with the cosigner, the state and the logs followed
    (origin to the keys trusted for it). ``clock``: POSIX seconds, the cosignatures' time."""

    cosigner: witness.Cosigner
    state: WitnessState
    logs: Mapping[str, Sequence[verify.Verifier]]
    clock: Callable[[], float] = field(default=time.time)

    def add_checkpoint(self, body: bytes) -> str:
        """The cosignature line of the request's checkpoint; a Refusal (logged) otherwise."""
        try:
            return self._cosign(body)
        except Refusal as refusal:
            _log_refusal(refusal, body)
            raise

    def _cosign(self, body: bytes) -> str:
        request = _parse(body)
        text, checkpoint = _checkpoint(request.note)
        if checkpoint.origin not in self.logs:
            raise UnknownOrigin(f"the witness does not follow {checkpoint.origin!r}")
        if not any(_opens(request.note, key) for key in self.logs[checkpoint.origin]):
            raise Untrusted()
        if request.old_size > checkpoint.size:
            raise BadRequest(f"the old size {request.old_size} is above the checkpoint's size {checkpoint.size}")
        recorded = self.state.advance(checkpoint.origin, _Decision(request, checkpoint, int(self.clock())))
        return self.cosigner.cosign(text, recorded.cosigned_at)

    def followed(self) -> list[dict[str, object]]:
        """Each origin followed, with the checkpoint cosigned last (nulls before the first)."""
        recorded = {cosigned.origin: cosigned for cosigned in self.state.all()}
        return [_followed(origin, recorded.get(origin)) for origin in sorted(self.logs)]


def _parse(body: bytes) -> witness.AddCheckpoint:
    try:
        return witness.parse_add_checkpoint(body)
    except witness.RequestInvalid as exc:
        raise BadRequest(exc.reason) from None


def _checkpoint(note: str) -> tuple[str, verify.Checkpoint]:
    """The note's text and the checkpoint it holds, before any signature is checked."""
    try:
        text, _ = verify.split_note(note)
        checkpoint = verify.parse_checkpoint(text)
    except verify.ReceiptInvalid as exc:
        raise BadRequest(exc.reason) from None
    if checkpoint.size > witness.MAX_SIZE:
        raise BadRequest("the checkpoint's size is above 2^63-1")
    return text, checkpoint


def _opens(note: str, key: verify.Verifier) -> bool:
    try:
        verify.open_note(note, key)
    except verify.ReceiptInvalid:
        return False
    return True


@dataclass(frozen=True)
class _Decision:
    """The spec's checks against the recorded checkpoint, run inside the state's transaction."""

    request: witness.AddCheckpoint
    checkpoint: verify.Checkpoint
    now: int

    def __call__(self, recorded: Cosigned | None) -> Cosigned:
        old_size, new = self.request.old_size, self.checkpoint
        recorded_size = 0 if recorded is None else recorded.size
        if old_size != recorded_size:
            raise OldSizeMismatch(recorded_size)
        old_root = verify.EMPTY_ROOT if recorded is None else recorded.root
        if recorded is not None and recorded.size == new.size and recorded.root != new.root:
            raise RootConflict(f"the witness cosigned size {new.size} of {new.origin!r} with another root")
        try:
            verify.verify_consistency(old_size, new.size, self.request.proof, old_root, new.root)
        except verify.ReceiptInvalid as exc:
            raise ProofInvalid(f"the consistency proof from size {old_size} does not verify: {exc.reason}") from None
        return Cosigned(new.origin, new.size, new.root, self.request.note, self.now)


def _log_refusal(refusal: Refusal, body: bytes) -> None:
    """Every refusal is logged; a 409 or a 422 with the request whole, as evidence: another
    root or a proof that does not verify may be a fork (warning), an old size that is not
    the recorded one a log catching up, or a log restored from an old backup (info)."""
    if refusal.status not in (409, 422):
        log.info("refused a checkpoint (%d): %s", refusal.status, refusal.reason)
        return
    level = logging.INFO if isinstance(refusal, OldSizeMismatch) else logging.WARNING
    evidence = body.decode("utf-8", errors="replace")
    log.log(level, "refused a checkpoint (%d): %s; the request:\n%s", refusal.status, refusal.reason, evidence)


def _followed(origin: str, cosigned: Cosigned | None) -> dict[str, object]:
    if cosigned is None:
        return {"origin": origin, "size": None, "root": None, "cosigned_at": None}
    root = base64.b64encode(cosigned.root).decode()
    return {"origin": origin, "size": cosigned.size, "root": root, "cosigned_at": cosigned.cosigned_at}


# -- HTTP --


def create_witness_app(witness_: Witness) -> Starlette:
    """The witness's routes: ``POST /add-checkpoint``, ``GET /healthz``, ``GET /logs``."""

    async def add_checkpoint(request: Request) -> Response:
        try:
            body = await _bounded_body(request)
            line = await run_in_threadpool(witness_.add_checkpoint, body)
        except Refusal as refusal:
            return refusal.response()
        return PlainTextResponse(line)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def logs(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(witness_.followed))

    return Starlette(
        routes=[
            Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/logs", logs, methods=["GET"]),
        ]
    )


async def _bounded_body(request: Request) -> bytes:
    """The body, refused past ``MAX_BODY`` without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > witness.MAX_BODY:
        raise BadRequest(f"the request body is over {witness.MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > witness.MAX_BODY:
            raise BadRequest(f"the request body is over {witness.MAX_BODY} bytes")
    return bytes(body)


# -- serving --


def serve(
    witness_: Witness, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, echo: Callable[[str], object] = print
) -> None:
    """Serve until SIGTERM or SIGINT, then let the requests in flight finish and return. The
    port is bound first: one that cannot be is an InfrastructureError naming it."""
    watchdog = Watchdog()
    config = uvicorn.Config(
        create_witness_app(witness_),
        host=host,  # for the readiness line it logs: the socket is bound beforehand
        port=port,
        timeout_graceful_shutdown=int(REQUEST_GRACE.total_seconds()),
        **logs.uvicorn_options(),
    )
    with bind_listener(host, port, command="purgectl witness serve") as listener, quiet_signals(watchdog):
        echo(f"witness {witness_.cosigner.name} serving on {url_of(host, port)} (POST /add-checkpoint, GET /logs)")
        BoundServer(config, watchdog).run(sockets=[listener])
