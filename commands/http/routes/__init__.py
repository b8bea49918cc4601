"""The API's routes, one module per area: ``content`` (tag ``content``), ``purges`` (the
acceptances and the purges' status), ``ledger`` (receipts, completion statements and the
consistency proof; and the signed log's public part under ``/log``, outside ``/v1`` like the
probes), ``operator`` (re-arming, re-sending and the ledger itself), ``retention``
(retention policies and legal holds), ``probes`` (``/healthz`` and ``/readyz``); ``common`` holds
what they share. ``host_routers``, ``operator_routers``, ``log_routes`` and ``probe_routes``
build them for ``purgekeeper.commands.http.app.create_app``.

Acceptances (``202``): every route that accepts a purge, a deletion, a retention policy or
a legal hold answers ``202 Accepted`` with a ``Location: /v1/purges/{purge_id}`` header and
the ``Acceptance``; an idempotent replay (``"outcome": "already_purged"``) answers the same,
with the purge that covers it. Poll the Location (or ``.../wait``) for the cleanup.

=======  ==========================================  ========================  ======  ========
method   path                                        command (operationId)     status  who
=======  ==========================================  ========================  ======  ========
POST     /v1/conversations                           create_conversation       200     host
GET      /v1/conversations                           list_conversations        200     host
GET      /v1/conversations/{id}                      get_conversation          200     host
GET      /v1/conversations/{id}/events               read_conversation         200     host
POST     /v1/conversations/{id}/events               ingest_event              200     host
POST     /v1/conversations/{id}/events/upload        upload_event (multipart)  200     host
POST     /v1/conversations/{id}/events:batch         ingest_events             200     host
POST     /v1/conversations/{id}/placements           place_event               200     host
POST     /v1/conversations/{id}/derivatives          add_derivative            200     host
POST     /v1/conversations/{id}/purge                purge_conversation        202     host
POST     /v1/channels/{id}/delete                    delete_channel            202     host
POST     /v1/bots                                    register_bot              200     host
GET      /v1/bots/{id}/deletion-preview              preview_bot_deletion      200     host
POST     /v1/bots/{id}/delete                        delete_bot                202     host
POST     /v1/authors/erasure-preview                 preview_author_erasure    200     host
POST     /v1/authors/erase                           erase_author              202     host
POST     /v1/runs                                    start_run                 200     host
POST     /v1/runs/{id}/finish                        finish_run                200     host
POST     /v1/runs/{id}/admissions                    admit                     200     host
GET      /v1/attachments/{id}                        open_attachment (bytes)   200     host
POST     /v1/purges/preview                          preview_purge             200     host
POST     /v1/purges/confirm                          confirm_purge             202     host
GET      /v1/purges                                  list_purges               200     host
GET      /v1/purges/{id}                             status                    200     host
GET      /v1/purges/{id}/wait                        wait                      200     host
GET      /v1/purges/{id}/receipt                     receipt                   200     host
GET      /v1/purges/{id}/completion                  completion                200     host
GET      /v1/ledger/consistency?from=N               consistency               200     host
POST     /v1/purges/{id}/retry                       retry                     200     operator
POST     /v1/resume                                  resume                    200     operator
GET      /v1/ledger/verify                           verify_ledger             200     operator
GET      /v1/ledger/checkpoint                       checkpoint_ledger (file)  200     operator
POST     /v1/ledger/merge                            merge_ledger (upload)     200     operator
POST     /v1/retention/preview                       preview_retention         200     operator
PUT      /v1/retention/{id}                          set_retention             202     operator
POST     /v1/retention/{id}/remove                   remove_retention          202     operator
GET      /v1/retention                               list_retention            200     operator
PUT      /v1/holds/{id}                              place_hold                202     operator
POST     /v1/holds/{id}/release                      release_hold              202     operator
GET      /v1/holds                                   list_holds                200     operator
GET      /healthz                                    healthz                   200     anyone
GET      /readyz                                     readyz (503: not ready)   200     anyone
=======  ==========================================  ========================  ======  ========

Hosts poll status, so ``status``, ``list_purges`` and ``wait`` are host endpoints; the
commands that change or reveal the machinery as a whole (re-arming, re-sending, the ledger
itself, retention policies and legal holds) are operator endpoints. ``GET /v1/purges``
filters by ``status``, ``kind``, ``conversation_id`` and acceptance time (``since`` <=
accepted_at < ``until``, ISO 8601 with an offset: a naive or malformed time is a 400),
newest first, a page of ``limit`` at a time (``after``: the previous page's ``next_after``).
A policy's ``max_age`` is sent as ``max_age_seconds`` and returned as ``max_age`` in
seconds; the lists come back as ``{"policies": [...]}`` and ``{"holds": [...]}``. ``/status``
and ``/metrics`` come from ``purgekeeper.commands.web.status`` and ``purgekeeper.commands.web.metrics`` and do their
own authentication. The probes, ``GET /healthz`` and ``GET /readyz`` (``probes``, tag ``probes``),
need no token and say nothing but a status.

Authentication (``purgekeeper.commands.web.auth``): every ``/v1`` request needs ``Authorization: Bearer
<token>``, checked before the body is read. Host endpoints take the host or the operator
token; operator endpoints take the operator token when one is configured, else the host
token. A missing or wrong token is ``401 {"error": "unauthorized"}``. ``/openapi.json`` and
``/docs`` hold no data and need no token, and neither does the signed log's public part:
``GET /log/checkpoint`` (the newest signed checkpoint, ``text/plain``), ``GET
/log/tile/<L>/<N>[.p/<W>]`` (C2SP tlog-tiles of hashes, ``application/octet-stream``) and
``GET /log/consistency?from=N`` (a consistency proof to the newest checkpoint), which hold
hashes only; any other path under ``/log`` is a 404.

"""

from __future__ import annotations

from fastapi import APIRouter

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http.routes.content_routes import content_routes
from purgekeeper.commands.http.routes.ledger_routes import log_routes, proof_routes
from purgekeeper.commands.http.routes.operator import operator_routes
from purgekeeper.commands.http.routes.probes import probe_routes
from purgekeeper.commands.http.routes.purge_routes import purge_routes, status_routes
from purgekeeper.commands.http.routes.retention_routes import hold_routes, retention_routes

__all__ = ["host_routers", "log_routes", "operator_routers", "probe_routes"]


def host_routers(pk: Purgekeeper, max_attachment_bytes: int) -> tuple[APIRouter, ...]:
    """The host routes (the host or the operator token), in the document's order."""
    status = status_routes(pk)
    proof_routes(status, pk)
    return content_routes(pk, max_attachment_bytes), purge_routes(pk), status


def operator_routers(pk: Purgekeeper) -> tuple[APIRouter, ...]:
    """The operator routes (the operator token when one is configured), in the document's order."""
    return operator_routes(pk), retention_routes(pk), hold_routes(pk)
