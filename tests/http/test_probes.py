"""The probes and the root URL: ``GET /healthz`` (the process answers), ``GET /readyz`` (content
reads are served: the database answers and the gate is open) and ``GET /`` (a redirect to the
operator console). The probes need no token and say nothing but a status and a fixed reason.

In process on both backends, and on a real ``purgectl serve``: the gate closed by a restore
merge left under way (the durable flag another process sets), and on PostgreSQL the database
refusing every connection (``ALLOW_CONNECTIONS false`` and its sessions ended), then both
undone, with no restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

import purgekeeper
from purgekeeper.commands.http import models
from purgekeeper.schema import ledger
from tests.helpers import served
from tests.helpers.databases import admin_connect, terminate_sessions
from tests.helpers.http import AS_HOST, HOST, make_client

Pk = purgekeeper.Purgekeeper
CRASHED_MERGE = "a restore merge is under way (started 2026-01-01T00:00:00.000000Z); rerun it if it stopped"
OK = {"status": "ok"}
GATE_CLOSED = {"status": "unavailable", "reason": "messaging_unavailable"}
NO_DATABASE = {"status": "unavailable", "reason": "database_unreachable"}
SETTLE_S = 15.0


def close_gate(pk: Pk, reason: str | None = CRASHED_MERGE) -> None:
    """The durable flag a restore merge sets in the database (None lifts it), as another
    process would leave it."""
    pk.db.transact(lambda conn: ledger.set_gate(conn, reason))


def probe(get: httpx.Client | str, path: str) -> tuple[int, dict[str, str]]:
    """A probe's status and body, without a token; the body is exactly its documented model."""
    response = get.get(path) if isinstance(get, httpx.Client) else httpx.get(get + path, timeout=10)
    body = response.json()
    model = models.NotReadyOut if response.status_code == 503 else models.ProbeOut
    assert model.model_validate(body).model_dump(mode="json") == body, body
    assert response.headers["cache-control"] == "no-store"
    return response.status_code, body


def settles(url: str, path: str, expected: tuple[int, dict[str, str]]) -> None:
    """The probe answers ``expected`` within SETTLE_S (a pool finds its lost connections at
    its next checkout)."""
    deadline = time.monotonic() + SETTLE_S
    while (found := probe(url, path)) != expected:
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


# -- in process ---------------------------------------------------------------------------------


@pytest.fixture
def client(pk: Pk) -> Iterator[httpx.Client]:
    with make_client(pk) as test_client:  # no token: the probes need none
        yield test_client


def test_both_probes_answer_ok_without_a_token(client: httpx.Client) -> None:
    assert probe(client, "/healthz") == probe(client, "/readyz") == (200, OK)
    wrong = {"Authorization": "Bearer not-the-token"}
    assert client.get("/readyz", headers=wrong).json() == client.get("/healthz", headers=wrong).json() == OK


def test_readyz_is_503_while_the_gate_is_closed_and_healthz_stays_200(pk: Pk, client: httpx.Client) -> None:
    close_gate(pk)
    assert probe(client, "/readyz") == (503, GATE_CLOSED)  # the reason's code, never its text
    assert probe(client, "/healthz") == (200, OK)
    assert client.get("/v1/conversations", headers=AS_HOST).json()["error"] == "messaging_unavailable"
    close_gate(pk, None)
    assert probe(client, "/readyz") == (200, OK)


@pytest.mark.parametrize("root_path", ["", "/pk"])
def test_the_root_redirects_to_the_operator_console(pk: Pk, root_path: str) -> None:
    with make_client(pk, root_path=root_path) as client:
        moved = client.get(f"{root_path}/", follow_redirects=False)
        assert (moved.status_code, moved.headers["location"]) == (307, f"{root_path}/status")
        assert_the_console_s_sign_in(client.get(f"{root_path}/"))  # followed


def assert_the_console_s_sign_in(response: httpx.Response) -> None:
    """The console asks a browser without a session to sign in (401, its form), not a 404."""
    assert response.status_code == 401 and response.headers["content-type"].startswith("text/html")
    assert 'action="' in response.text and "/status/login" in response.text


# -- a real purgectl serve ------------------------------------------------------------------------


@pytest.fixture
def server(pk: Pk, database_url: str, roots: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    """``purgectl serve`` on the test's database and roots (``pk`` migrated it), with a token."""
    env = served.clean_environment(
        PURGEKEEPER_DATABASE_URL=database_url,
        PURGEKEEPER_DATA_DIR=str(tmp_path / "data"),
        PURGEKEEPER_BLOB_ROOT=str(roots["blob_root"]),
        PURGEKEEPER_FILE_ROOT=str(roots["file_root"]),
        PURGEKEEPER_MEMORY_ROOTS=str(roots["memory_root"]),
        PURGEKEEPER_CHECKPOINT_DIR=str(roots["checkpoint_dir"]),
        PURGEKEEPER_API_TOKEN=HOST,
    )
    with served.serving(env, tmp_path) as running:
        yield running.url


def test_a_served_process_answers_the_probes_and_the_root(server: str) -> None:
    assert probe(server, "/healthz") == probe(server, "/readyz") == (200, OK)
    moved = httpx.get(f"{server}/", timeout=10, follow_redirects=True)
    assert [r.status_code for r in moved.history] == [307] and moved.url.path == "/status"
    assert_the_console_s_sign_in(moved)
    assert httpx.get(f"{server}/v1/conversations", timeout=10).status_code == 401  # the API still asks


def test_a_served_process_is_not_ready_while_another_closes_the_gate(pk: Pk, server: str) -> None:
    close_gate(pk)
    settles(server, "/readyz", (503, GATE_CLOSED))
    assert probe(server, "/healthz") == (200, OK)
    close_gate(pk, None)
    settles(server, "/readyz", (200, OK))


@pytest.mark.postgres_only
def test_a_served_process_is_not_ready_while_its_database_refuses_connections(database_url: str, server: str) -> None:
    name = make_url(database_url).database
    try:
        with admin_connect() as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        terminate_sessions(str(name))
        settles(server, "/readyz", (503, NO_DATABASE))
        assert probe(server, "/healthz") == (200, OK)  # a restart would not bring the database back
    finally:
        with admin_connect() as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    settles(server, "/readyz", (200, OK))
