"""The operator console under test: a tiny app of its router and its client, signing in, reading a
page with a small tree builder on the standard library's ``html.parser``, and purges in every
state (new, incomplete with a hostile message, stalled, a tampered ledger)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from fastapi import FastAPI
from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.web import status as status_page
from purgekeeper.commands.web.auth import SessionSigner, Tokens
from purgekeeper.schema import steps
from purgekeeper.schema.tables import UtcDateTime
from purgekeeper.workers import runner
from tests.helpers import POLICY
from tests.helpers.cleanup import postpone
from tests.helpers.steps import FailingStore, settle

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper


OPERATOR = "operator-token-7f3a"
HOST = "host-token-91c2"
TOKENS = Tokens(api=HOST, operator=OPERATOR)
OPERATOR_NAME = "Grace Oncall"
SECRET = "S3CR3T-content"
WHO = {"actor": "actor-not-shown@example.org", "reason": "reason-not-shown"}
HOSTILE = "<script>alert('pwned')</script> & \"quoted\""
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


# -- reading a page ---------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text inside, whitespace collapsed (as a reader sees it)."""
        return " ".join(self._raw_text().split())

    def _raw_text(self) -> str:
        return "".join(child if isinstance(child, str) else child._raw_text() for child in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[Element]:
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.walk()

    def find_all(self, tag: str | None = None, *, cls: str | None = None, **attrs: str) -> list[Element]:
        """Elements inside, by tag, class and attributes (``data_kind`` is ``data-kind``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [
            element
            for element in self.walk()
            if (tag is None or element.tag == tag)
            and (cls is None or cls in element.classes)
            and all(element.attrs.get(name) == value for name, value in wanted.items())
        ]

    def find(self, tag: str | None = None, *, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls=cls, **attrs)
        assert len(found) == 1, f"{len(found)} elements match {tag} {cls} {attrs}"
        return found[0]

    def by_id(self, element_id: str) -> Element:
        return self.find(id=element_id)

    def has_id(self, element_id: str) -> bool:
        return bool(self.find_all(id=element_id))

    def cells(self) -> list[str]:
        """A table row's cells, as text."""
        return [cell.text for cell in self.find_all("td")]


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert tag in [element.tag for element in self.open], f"</{tag}> closes nothing"
        while self.open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.open == [builder.root], "unclosed elements"
    return builder.root


# -- the app and its client -------------------------------------------------------------------------


def app_of(pk: Pk, tokens: Tokens = TOKENS, **options: Any) -> TestClient:
    app = FastAPI()
    app.include_router(status_page.router(pk, tokens, **options))
    return TestClient(app)


def sign_in(client: TestClient, token: str = OPERATOR, name: str = OPERATOR_NAME, **fields: str) -> Any:
    return client.post("/status/login", data={"token": token, "name": name, **fields}, follow_redirects=False)


def page(client: TestClient, path: str = "/status", **params: str) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.text


def article(html: str, purge_id: str) -> Element:
    return parse(html).by_id(f"purge-{purge_id}")


def section(html: str, name: str) -> Element:
    return parse(html).find("section", id=name)


def step_row(within: Element, kind: str) -> list[str]:
    return within.find("tr", cls="step", data_kind=kind).cells()


def signer(token: str = OPERATOR, **options: Any) -> SessionSigner:
    return SessionSigner(token, **options)


# -- purges in every state ----------------------------------------------------------------------------


def purge_new_event(pk: Pk, conversation_id: str, *, attachment: bool = False, name: str = "doc.txt") -> str:
    pk.create_conversation(conversation_id)
    files = [NewAttachment.file(f"{SECRET} bytes".encode(), name=name)] if attachment else []
    event = pk.ingest_event(conversation_id, author="ada", body=f"{SECRET} body", attachments=files)
    scope = EventScope(event_ids=[event.id])
    acceptance = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)
    return acceptance.purge_id


def incomplete_purge(pk: Pk, conversation_id: str, message: str = HOSTILE) -> str:
    """A purge whose attachments step fails on its only attempt with ``message``."""
    purge_id = purge_new_event(pk, conversation_id, attachment=True)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": purge_id})
    store = FailingStore(pk.blobs.blob_root, pk.blobs.file_root, message=message)
    status = settle(pk, purge_id, dataclasses.replace(pk.step_context(), blobs=store))
    assert status.status == "incomplete"
    return purge_id


def retrying_purge(pk: Pk, conversation_id: str, message: str = HOSTILE) -> str:
    """A purge whose attachments step failed its first attempt with ``message`` and waits,
    ``retrying``, for its next one an hour away."""
    purge_id = purge_new_event(pk, conversation_id, attachment=True)
    [step] = [s for s in pk.status(purge_id).steps if s.kind == "attachments"]
    store = FailingStore(pk.blobs.blob_root, pk.blobs.file_root, message=message)
    context = dataclasses.replace(pk.step_context(), blobs=store)
    assert runner.run_step(context, step.id, policy=POLICY).status == "retrying"
    postpone(pk, step.id)
    return purge_id


def stall(pk: Pk, purge_id: str) -> None:
    """Raw SQL: the purge's waiting steps have been due since long ago (no worker runs)."""
    statement = text("UPDATE cleanup_steps SET next_attempt_at = :past WHERE purge_id = :p").bindparams(
        bindparam("past", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        assert conn.execute(statement, {"past": LONG_AGO, "p": purge_id}).rowcount >= 1
    assert pk.status(purge_id).stalled


def tamper_ledger(pk: Pk, sql: str) -> None:
    """Committed SQL with the ledger's append-only triggers out of the way (an attacker with the
    database password). The test database is thrown away."""
    with pk.db.engine.connect() as conn, conn.begin():
        if pk.db.is_sqlite:
            for trigger in ("pk_purge_ledger_no_update", "pk_purge_ledger_no_delete", "pk_purge_ledger_chain"):
                conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
        else:
            conn.execute(text("ALTER TABLE purge_ledger DISABLE TRIGGER USER"))
        conn.execute(text(sql))
        if not pk.db.is_sqlite:
            conn.execute(text("ALTER TABLE purge_ledger ENABLE TRIGGER USER"))


def positions(html: str, needles: Sequence[str]) -> list[int]:
    found = [html.find(needle) for needle in needles]
    assert -1 not in found, dict(zip(needles, found, strict=True))
    return found


def claim(pk: Pk, step_id: str, owner: str) -> None:
    """A worker takes the step and holds it (a five-minute lease it never gives back)."""
    held = pk.db.transact(lambda conn: steps.claim(conn, step_id, owner=owner, lease=dt.timedelta(minutes=5)))
    assert held is not None
