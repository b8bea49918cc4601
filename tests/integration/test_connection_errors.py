"""A database that cannot be reached says why, on real servers: a database that does not
exist, a connection refused, a failed authentication (a role the server does not know, a
wrong password, no ``pg_hba.conf`` line), and for SQLite a file that cannot be opened. Each
names the database (its URL, password masked) and gives the step that fixes it; none repeats
the driver's message (it names the server's host, the user and the server's own wording).

The shared server trusts every local connection, so a password is never checked there: the
wrong password and the missing ``pg_hba.conf`` line are tried on a throw-away cluster of the
test's own that asks for one (``scram-sha-256``). The shared server's configuration is never
touched."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import InfrastructureError
from tests.helpers.databases import POSTGRES_ADMIN_URL
from tests.helpers.processes import Cluster, free_port, throwaway_cluster

PASSWORD = "s3cret-pw"
# what the driver says, which no message repeats
DRIVER_WORDS = ("FATAL", "connection to server", "connection failed", "OperationalError", "Is the server running")


def refusal(url: str) -> str:
    """The detail of the error that opening a connection to ``url`` raises."""
    database = Database(url)
    try:
        with pytest.raises(InfrastructureError) as refused, database.read() as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        database.dispose()
    assert type(refused.value) is InfrastructureError and refused.value.code == "infrastructure_error"
    detail = refused.value.detail
    assert PASSWORD not in detail and PASSWORD not in str(refused.value)
    for word in DRIVER_WORDS:
        assert word not in detail, detail
    return detail


def masked(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def shared(**parts: str) -> str:
    """A URL on the shared server (trust: the password is never checked)."""
    return make_url(POSTGRES_ADMIN_URL).set(password=PASSWORD, **parts).render_as_string(hide_password=False)  # type: ignore[arg-type]


AUTH_HINT = "check the user and password in the database URL (PURGEKEEPER_DATABASE_URL)"
SERVER_HINT = "check that the PostgreSQL server is running and the host and port in the database URL"


def test_a_database_that_does_not_exist_says_so_and_how_to_create_it() -> None:
    url = shared(database=f"pk_missing_{uuid.uuid4().hex[:12]}")
    detail = refusal(url)
    name = make_url(url).database
    assert detail.startswith(f"the database {masked(url)} is unavailable: ")
    assert f"the server has no database {name}" in detail, detail
    assert f"create it (createdb {name}), then run `purgectl init`" in detail, detail


def test_a_refused_connection_says_so_and_to_check_the_server() -> None:
    url = f"postgresql://purgekeeper:{PASSWORD}@127.0.0.1:{free_port()}/nowhere"
    detail = refusal(url)
    assert detail.startswith(f"the database {masked(url)} is unavailable: ")
    assert "the server refused the connection" in detail, detail
    assert SERVER_HINT in detail, detail


def test_a_host_that_does_not_resolve_says_so_and_to_check_the_server() -> None:
    url = f"postgresql://purgekeeper:{PASSWORD}@no-such-host.invalid:5432/nowhere"
    detail = refusal(url)
    assert "the host name does not resolve" in detail, detail
    assert SERVER_HINT in detail, detail


def test_a_role_the_server_does_not_know_is_a_failed_authentication() -> None:
    url = shared(username=f"pk_nobody_{uuid.uuid4().hex[:8]}")
    detail = refusal(url)
    assert detail.startswith(f"the database {masked(url)} is unavailable: ")
    assert "the server refused the user name or password" in detail, detail
    assert AUTH_HINT in detail, detail


# -- a cluster that asks for a password -----------------------------------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[Cluster]:
    """A throw-away cluster on a free port: ``postgres`` is trusted; the role ``keeper``
    (password ``PASSWORD``) must give its password, and only for the database ``postgres``."""
    conf = "fsync = off\nshared_buffers = 16MB\nmax_connections = 20\npassword_encryption = 'scram-sha-256'\n"
    hba = (
        "local all postgres trust\n"
        "host all postgres 127.0.0.1/32 trust\n"
        "host postgres keeper 127.0.0.1/32 scram-sha-256\n"
    )
    with throwaway_cluster("purgekeeper-auth-", conf, hba=hba) as made:
        import psycopg

        with psycopg.connect(made.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE keeper LOGIN PASSWORD '{PASSWORD}'")
            conn.execute("CREATE DATABASE elsewhere")
        yield made


def test_the_right_password_opens_the_guarded_cluster(guarded: Cluster) -> None:
    database = Database(f"postgresql://keeper:{PASSWORD}@127.0.0.1:{guarded.port}/postgres")
    try:
        with database.read() as conn:
            assert conn.exec_driver_sql("SELECT current_user").scalar() == "keeper"
    finally:
        database.dispose()


@pytest.mark.parametrize("password", ["wrong-pw", None], ids=["wrong", "missing"])
def test_a_wrong_or_missing_password_is_a_failed_authentication(guarded: Cluster, password: str | None) -> None:
    credentials = f"keeper:{password}" if password else "keeper"
    url = f"postgresql://{credentials}@127.0.0.1:{guarded.port}/postgres"
    detail = refusal(url)
    assert detail.startswith(f"the database {masked(url)} is unavailable: ")
    assert "wrong-pw" not in detail
    assert "the server refused the user name or password" in detail, detail
    assert AUTH_HINT in detail, detail


def test_no_pg_hba_line_for_the_user_is_a_failed_authentication(guarded: Cluster) -> None:
    url = f"postgresql://keeper:{PASSWORD}@127.0.0.1:{guarded.port}/elsewhere"
    detail = refusal(url)
    assert "the server refused the user name or password" in detail, detail
    assert AUTH_HINT in detail, detail


# -- SQLite ---------------------------------------------------------------------------------------


def test_a_sqlite_file_in_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'dir' / 'purgekeeper.db'}"
    detail = refusal(url)
    assert detail.startswith(f"the database {url} is unavailable: ")
    assert f"its directory {tmp_path / 'missing' / 'dir'} does not exist" in detail, detail
    assert "create it, or run `purgectl init`" in detail, detail
    assert not (tmp_path / "missing").exists()


def test_a_sqlite_file_that_cannot_be_opened_says_so(tmp_path: Path) -> None:
    (tmp_path / "purgekeeper.db").mkdir()  # a directory where the file should be
    url = f"sqlite:///{tmp_path / 'purgekeeper.db'}"
    detail = refusal(url)
    assert detail.startswith(f"the database {url} is unavailable: ")
    assert "the file cannot be opened" in detail, detail
    assert "check that it is a SQLite file this process may read and write" in detail, detail


# -- through purgectl -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (shared(database="pk_missing_cli"), "createdb pk_missing_cli"),
        (f"postgresql://purgekeeper:{PASSWORD}@127.0.0.1:{free_port()}/nowhere", SERVER_HINT),
        (shared(username="pk_nobody_cli"), AUTH_HINT),
    ],
    ids=["missing-database", "refused", "unknown-role"],
)
def test_purgectl_reports_the_reason_and_the_hint(url: str, says: str) -> None:
    import json
    import sys

    env = {**os.environ, "PURGEKEEPER_DATABASE_URL": url}
    command = [sys.executable, "-m", "purgekeeper.commands.cli", "health", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, (done.stdout, done.stderr)
    refused = json.loads(done.stdout)
    assert refused["error"] == "infrastructure_error", refused
    assert refused["detail"].startswith(f"the database {masked(url)} is unavailable: "), refused
    assert says in refused["detail"], refused
    assert PASSWORD not in done.stdout + done.stderr
