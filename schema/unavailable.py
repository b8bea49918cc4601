"""Why a database could not be opened, said so that an operator knows what to do: a database
that does not exist, a server that does not answer, a failed authentication, a SQLite file
that cannot be opened (``purgekeeper.schema.db`` puts it into its ``InfrastructureError``)."""

from __future__ import annotations

import os

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

_SERVER_HINT = "check that the PostgreSQL server is running and the host and port in the database URL"
_AUTH_HINT = "check the user and password in the database URL (PURGEKEEPER_DATABASE_URL)"
# What libpq and the server say (in English; another ``lc_messages`` falls back to the class
# name), first match wins. Matched, never repeated: the driver's message names the server's
# address, the user and the server's own wording.
_AUTH_FAILED = (
    "password authentication failed",  # 28P01
    "authentication failed",  # SCRAM, peer, ident, ...
    "no pg_hba.conf entry",  # 28000
    "pg_hba.conf rejects connection",  # 28000
    "no password supplied",  # the server asks for a password the URL does not give
    'role "',  # role "x" does not exist (28000)
)
_UNREACHABLE = (
    ("connection refused", "the server refused the connection"),
    ("no such file or directory", "no server listens on the socket"),
    ("failed to resolve host", "the host name does not resolve"),
    ("could not translate host name", "the host name does not resolve"),
    ("timeout expired", "the server did not answer in time"),
    ("connection timed out", "the server did not answer in time"),
)


def why_unavailable(database: str, exc: sa_exc.OperationalError) -> str:
    """Why the database could not be opened, and what fixes it: a database that does not
    exist, a server that does not answer, a failed authentication, a SQLite file that
    cannot be opened; else the driver's class name. ``database`` is the redacted URL."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    text = str(exc.orig).lower()
    url = make_url(database)
    if url.get_backend_name() == "sqlite":
        if "unable to open database file" not in text:
            return type(exc.orig).__name__
        directory = os.path.dirname(url.database or "")
        if directory and not os.path.isdir(directory):
            return f"its directory {directory} does not exist: create it, or run `purgectl init`"
        return "the file cannot be opened: check that it is a SQLite file this process may read and write"
    if sqlstate not in (None, "3D000", "28P01", "28000"):
        return type(exc.orig).__name__  # libpq gives no SQLSTATE for a connection it could not open
    if sqlstate == "3D000" or ('database "' in text and "does not exist" in text):
        name = url.database or url.username  # libpq's default: the user's name
        return f"the server has no database {name}: create it (createdb {name}), then run `purgectl init`"
    if sqlstate in ("28P01", "28000") or any(words in text for words in _AUTH_FAILED):
        return f"the server refused the user name or password: {_AUTH_HINT}"
    for words, reason in _UNREACHABLE:
        if words in text:
            return f"{reason}: {_SERVER_HINT}"
    return type(exc.orig).__name__
