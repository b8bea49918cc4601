"""The error tree, database-error translation, settings from a given environment, the blob
layout, the public names of ``commands``, and the one direction of imports. No I/O beyond
reading this repository's own source files."""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

import purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import errors
from purgekeeper.schema.errors import (
    TRIGGER_ERRORS,
    ContentPurged,
    InfrastructureError,
    MessagingUnavailable,
    NotFound,
    PurgekeeperError,
    ValidationError,
    translate_db_error,
)
from purgekeeper.storage.blobstore import cas_path, file_path

REPOSITORY = Path(__file__).resolve().parents[2]
SHA = "abcdef" + "0" * 58
PUBLIC_ERRORS = [
    getattr(purgekeeper, name)
    for name in sorted(purgekeeper.__all__)
    if isinstance(getattr(purgekeeper, name), type) and issubclass(getattr(purgekeeper, name), PurgekeeperError)
]


# -- the error tree -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.PurgekeeperError, "purgekeeper_error"),
        (errors.ValidationError, "validation_error"),
        (errors.NotFound, "not_found"),
        (errors.Conflict, "conflict"),
        (errors.StaleConfirmation, "stale_confirmation"),
        (errors.VersionConflict, "version_conflict"),
        (errors.IdempotencyConflict, "idempotency_conflict"),
        (errors.ActiveRuns, "active_runs"),
        (errors.Fenced, "fenced"),
        (errors.ConversationPurged, "conversation_purged"),
        (errors.ConversationDeleted, "conversation_deleted"),
        (errors.ContentPurged, "content_purged"),
        (errors.BotDeleted, "bot_deleted"),
        (errors.IdReserved, "id_reserved"),
        (errors.MemoryErasureUnavailable, "memory_erasure_unavailable"),
        (errors.MessagingUnavailable, "messaging_unavailable"),
        (errors.InfrastructureError, "infrastructure_error"),
        (errors.SchemaMismatch, "schema_mismatch"),
    ],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_code_is_the_class_name_in_snake_case(cls: type[PurgekeeperError], code: str) -> None:
    assert cls().code == code
    assert cls("with a detail").code == code


def test_every_public_error_is_covered_by_the_code_table() -> None:
    # A new class exported from commands must get a code the HTTP API can report.
    assert {c.__name__ for c in PUBLIC_ERRORS} >= {"ValidationError", "NotFound", "MessagingUnavailable"}
    for cls in PUBLIC_ERRORS:
        assert cls().code.replace("_", "").lower() == cls.__name__.lower()
        assert cls().code == cls().code.lower()


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_default_message_is_the_first_line_of_the_docstring(cls: type[PurgekeeperError]) -> None:
    first_line = inspect.getdoc(cls).splitlines()[0]  # type: ignore[union-attr]
    assert first_line
    error = cls()
    assert error.detail == first_line
    assert str(error) == first_line


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_a_given_detail_replaces_the_default_message(cls: type[PurgekeeperError]) -> None:
    error = cls("run r1 is still running")
    assert error.detail == "run r1 is still running"
    assert str(error) == "run r1 is still running"


def test_every_error_has_its_own_default_message() -> None:
    messages = [cls().detail for cls in PUBLIC_ERRORS]
    assert len(set(messages)) == len(messages)


def test_the_tree_has_one_root_and_its_subtrees() -> None:
    for cls in (errors.StaleConfirmation, errors.VersionConflict, errors.IdempotencyConflict, errors.ActiveRuns):
        assert issubclass(cls, errors.Conflict)
    for cls in (
        errors.ConversationPurged,
        errors.ConversationDeleted,
        errors.ContentPurged,
        errors.BotDeleted,
        errors.IdReserved,
    ):
        assert issubclass(cls, errors.Fenced)
    assert issubclass(errors.SchemaMismatch, errors.InfrastructureError)
    for cls in PUBLIC_ERRORS:
        assert issubclass(cls, PurgekeeperError)


def test_messaging_unavailable_keeps_at_most_max_diagnostics() -> None:
    limit = MessagingUnavailable.MAX_DIAGNOSTICS
    assert limit > 0
    many = MessagingUnavailable(diagnostics=[f"problem {i}" for i in range(limit * 3)])
    assert many.diagnostics == tuple(f"problem {i}" for i in range(limit))
    exact = MessagingUnavailable(diagnostics=(f"p{i}" for i in range(limit)))  # any iterable, consumed once
    assert len(exact.diagnostics) == limit
    assert MessagingUnavailable().diagnostics == ()
    assert MessagingUnavailable("ledger corrupt", diagnostics=["row 3"]).detail == "ledger corrupt"


def test_errors_carry_their_machine_readable_fields() -> None:
    assert errors.MemoryErasureUnavailable().reason == "unprovable"
    assert errors.MemoryErasureUnavailable(reason="symlink").reason == "symlink"
    assert errors.ActiveRuns(run_ids=["r1", "r2"]).run_ids == ("r1", "r2")
    assert errors.ActiveRuns().run_ids == ()


# -- translate_db_error -------------------------------------------------------------------


class FakeDriverError(Exception):
    """Stands in for a psycopg or sqlite3 error: a message, and maybe a SQLSTATE and diag."""

    def __init__(self, message: str, *, sqlstate: str | None = None, constraint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        if constraint is not None:
            self.diag = type("Diag", (), {"constraint_name": constraint})()


def dbapi_error(message: str, *, kind: type[sa_exc.DBAPIError] = sa_exc.DBAPIError, **fake: str) -> sa_exc.DBAPIError:
    return kind("INSERT INTO events ...", {}, FakeDriverError(message, **fake))


def test_a_trigger_message_becomes_content_purged_with_its_detail() -> None:
    domain = translate_db_error(dbapi_error("purgekeeper:content_purged: the event is purged or no longer live"))
    assert type(domain) is ContentPurged
    assert domain.detail == "the event is purged or no longer live"


@pytest.mark.parametrize(("code", "cls"), sorted(TRIGGER_ERRORS.items()), ids=sorted(TRIGGER_ERRORS))
def test_every_trigger_code_maps_to_its_error(code: str, cls: type[PurgekeeperError]) -> None:
    domain = translate_db_error(dbapi_error(f"purgekeeper:{code}: a detail for {code}", kind=sa_exc.IntegrityError))
    assert type(domain) is cls
    assert domain.detail == f"a detail for {code}"


def test_trigger_codes_cover_the_fences() -> None:
    assert TRIGGER_ERRORS["conversation_purged"] is errors.ConversationPurged
    assert TRIGGER_ERRORS["conversation_deleted"] is errors.ConversationDeleted
    assert TRIGGER_ERRORS["bot_deleted"] is errors.BotDeleted
    assert TRIGGER_ERRORS["id_reserved"] is errors.IdReserved
    assert TRIGGER_ERRORS["blob_not_present"] is errors.ContentPurged


def test_a_postgresql_trigger_message_keeps_only_its_first_line() -> None:
    message = (
        "purgekeeper:conversation_purged: the conversation is purged\n"
        "CONTEXT:  PL/pgSQL function pk_placements_before_write() line 5 at RAISE"
    )
    domain = translate_db_error(dbapi_error(message, sqlstate="P0001"))
    assert type(domain) is errors.ConversationPurged
    assert domain.detail == "the conversation is purged"


def test_a_trigger_code_without_detail_gets_the_default_message() -> None:
    domain = translate_db_error(dbapi_error("purgekeeper:bot_deleted"))
    assert type(domain) is errors.BotDeleted
    assert domain.detail == "The bot has been deleted."


@pytest.mark.parametrize(
    "message",
    [
        "syntax error at or near SELEC",
        "purgekeeper:no_such_code: something",
        "value too long for type character varying(16)",
    ],
    ids=["syntax-error", "unknown-trigger-code", "other-driver-error"],
)
def test_a_foreign_error_is_not_translated(message: str) -> None:
    assert translate_db_error(dbapi_error(message)) is None


@pytest.mark.parametrize(
    "exc",
    [ValueError("purgekeeper:content_purged: x"), KeyError("x"), RuntimeError("database is locked")],
    ids=["value-error", "key-error", "runtime-error"],
)
def test_a_non_dbapi_exception_is_not_translated(exc: BaseException) -> None:
    assert translate_db_error(exc) is None


def test_named_constraints_map_to_domain_errors() -> None:
    duplicate = translate_db_error(dbapi_error("duplicate key", constraint="pk_events", sqlstate="23505"))
    assert type(duplicate) is errors.Conflict  # an id that exists is a conflict with the state (409)
    missing_bot = translate_db_error(dbapi_error("violates foreign key", constraint="fk_runs_bot_id_bots"))
    assert type(missing_bot) is NotFound
    assert translate_db_error(dbapi_error("check failed", constraint="some_other_constraint")) is None


def test_sqlite_unique_messages_map_by_column() -> None:
    domain = translate_db_error(dbapi_error("UNIQUE constraint failed: events.provider_event_id"))
    assert type(domain) is ValidationError
    assert "provider_event_id" in domain.detail
    assert type(translate_db_error(dbapi_error("UNIQUE constraint failed: conversations.id"))) is errors.Conflict
    assert translate_db_error(dbapi_error("UNIQUE constraint failed: blobs.path")) is None


def test_busy_and_operational_errors_are_infrastructure_errors() -> None:
    for error in (
        dbapi_error("deadlock detected", sqlstate="40P01"),
        dbapi_error("could not serialize access", sqlstate="40001"),
        dbapi_error("database is locked"),
        dbapi_error("connection refused", kind=sa_exc.OperationalError),
    ):
        assert type(translate_db_error(error)) is InfrastructureError


def test_an_expired_lock_timeout_is_a_lock_timeout_and_an_infrastructure_error() -> None:
    domain = translate_db_error(dbapi_error("canceling statement due to lock timeout", sqlstate="55P03"))
    assert type(domain) is errors.LockTimeout and isinstance(domain, InfrastructureError)


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (dbapi_error("connection refused", kind=sa_exc.OperationalError), True),
        (dbapi_error("terminating connection due to administrator command", sqlstate="57P01"), True),
        (dbapi_error("the database system is starting up", sqlstate="57P03"), True),
        (dbapi_error("connection failure", sqlstate="08006"), True),
        (dbapi_error("record is not assigned yet", sqlstate="55000", kind=sa_exc.OperationalError), False),
        (dbapi_error("deadlock detected", sqlstate="40P01"), False),
        (dbapi_error("database is locked"), False),
    ],
    ids=["refused", "terminated", "starting-up", "class-08", "a-server-error", "deadlock", "sqlite-busy"],
)
def test_a_lost_connection_is_told_from_an_error_the_server_would_give_again(
    error: sa_exc.DBAPIError, lost: bool
) -> None:
    """What a step waits out for its whole lease (issue 11): a lost or refused connection,
    also when it comes wrapped in the domain error it was translated to."""
    assert errors.connection_lost(error) is lost
    try:
        raise InfrastructureError("database unavailable") from error
    except InfrastructureError as wrapped:
        assert errors.connection_lost(wrapped) is lost


# -- settings -----------------------------------------------------------------------------


def test_settings_defaults_from_an_empty_environment() -> None:
    settings = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg"})
    data_dir = Path("/srv/xdg/purgekeeper")
    assert settings == Settings(
        database_url=f"sqlite:///{data_dir}/purgekeeper.db",
        data_dir=data_dir,
        blob_root=data_dir / "blobs",
        file_root=data_dir / "files",
        memory_roots=(data_dir / "memory",),
        checkpoint_dir=data_dir / "ledger",
        broker_url=None,
        api_token=None,
        operator_token=None,
    )


def test_settings_default_data_dir_without_xdg_is_under_home() -> None:
    settings = Settings.from_env({})
    assert settings.data_dir == Path.home() / ".local" / "share" / "purgekeeper"
    assert settings.database_url == f"sqlite:///{settings.data_dir}/purgekeeper.db"


def test_settings_data_dir_moves_every_default() -> None:
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": "/var/lib/pk", "XDG_DATA_HOME": "/srv/xdg"})
    data_dir = Path("/var/lib/pk")
    assert settings.data_dir == data_dir
    assert settings.database_url == "sqlite:////var/lib/pk/purgekeeper.db"
    assert (settings.blob_root, settings.file_root) == (data_dir / "blobs", data_dir / "files")
    assert settings.memory_roots == (data_dir / "memory",)
    assert settings.checkpoint_dir == data_dir / "ledger"


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("DATABASE_URL", "postgresql://pk@db/pk", "database_url", "postgresql://pk@db/pk"),
        ("BROKER_URL", "redis://queue:6379/0", "broker_url", "redis://queue:6379/0"),
        ("DATA_DIR", "/data/pk", "data_dir", Path("/data/pk")),
        ("BLOB_ROOT", "/mnt/blobs", "blob_root", Path("/mnt/blobs")),
        ("FILE_ROOT", "/mnt/files", "file_root", Path("/mnt/files")),
        ("MEMORY_ROOTS", f"/m1{os.pathsep}/m2", "memory_roots", (Path("/m1"), Path("/m2"))),
        ("CHECKPOINT_DIR", "/offsite/ledger", "checkpoint_dir", Path("/offsite/ledger")),
        ("API_TOKEN", "host-secret", "api_token", "host-secret"),
        ("OPERATOR_TOKEN", "op-secret", "operator_token", "op-secret"),
    ],
    ids=[
        "DATABASE_URL",
        "BROKER_URL",
        "DATA_DIR",
        "BLOB_ROOT",
        "FILE_ROOT",
        "MEMORY_ROOTS",
        "CHECKPOINT_DIR",
        "API_TOKEN",
        "OPERATOR_TOKEN",
    ],
)
def test_each_variable_overrides_its_setting(variable: str, value: str, field: str, expected: object) -> None:
    base = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg"})
    settings = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg", f"PURGEKEEPER_{variable}": value})
    assert getattr(settings, field) == expected
    assert getattr(base, field) != expected
    untouched = {name for name in vars(base) if name != field}
    if variable == "DATA_DIR":  # the data directory also moves the defaults that live under it
        untouched -= {"database_url", "blob_root", "file_root", "memory_roots", "checkpoint_dir"}
    for name in untouched:
        assert getattr(settings, name) == getattr(base, name), name


@pytest.mark.parametrize("value", ["", "   "], ids=["empty", "blank"])
def test_an_empty_variable_counts_as_unset(value: str) -> None:
    base = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg"})
    environ = {"XDG_DATA_HOME": "/srv/xdg"} | {
        f"PURGEKEEPER_{name}": value
        for name in (
            "DATABASE_URL",
            "BROKER_URL",
            "DATA_DIR",
            "BLOB_ROOT",
            "FILE_ROOT",
            "MEMORY_ROOTS",
            "CHECKPOINT_DIR",
            "API_TOKEN",
            "OPERATOR_TOKEN",
        )
    }
    assert Settings.from_env(environ) == base


def test_relative_and_home_paths_become_absolute() -> None:
    settings = Settings.from_env(
        {"PURGEKEEPER_DATA_DIR": "rel/data", "PURGEKEEPER_BLOB_ROOT": "~/blobs", "PURGEKEEPER_MEMORY_ROOTS": "mem"}
    )
    assert settings.data_dir == Path.cwd() / "rel" / "data"
    assert settings.blob_root == Path.home() / "blobs"
    assert settings.memory_roots == (Path.cwd() / "mem",)
    for path in (settings.data_dir, settings.blob_root, settings.file_root, settings.checkpoint_dir):
        assert path.is_absolute()


def test_unrelated_variables_are_ignored() -> None:
    base = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg"})
    noisy = Settings.from_env({"XDG_DATA_HOME": "/srv/xdg", "DATABASE_URL": "postgresql://x", "PK_BLOB_ROOT": "/x"})
    assert noisy == base


def test_from_env_does_not_read_os_environ_when_given_a_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PURGEKEEPER_API_TOKEN", "from-the-process")
    assert Settings.from_env({"XDG_DATA_HOME": "/srv/xdg"}).api_token is None


# -- blob layout --------------------------------------------------------------------------


def test_cas_path_is_sharded_by_hash_and_unique_by_blob() -> None:
    assert cas_path(SHA, "blob1") == f"ab/{SHA}-blob1"
    assert cas_path(SHA, "blob1") != cas_path(SHA, "blob2")


def test_file_path_is_sharded_by_blob_id_and_holds_no_attachment_name() -> None:
    assert file_path("9f8e7d6c") == "9f/9f8e7d6c"
    assert file_path("9f8e7d6c") != file_path("9f8e7d6d")


# -- the public API -----------------------------------------------------------------------


def test_commands_all_is_sorted_and_unique() -> None:
    assert purgekeeper.__all__ == sorted(purgekeeper.__all__)
    assert len(set(purgekeeper.__all__)) == len(purgekeeper.__all__)


def test_every_name_in_commands_all_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec("from purgekeeper import *", namespace)
    for name in purgekeeper.__all__:
        assert getattr(purgekeeper, name) is namespace[name]


def test_commands_exports_the_documented_api() -> None:
    documented = {
        "open",
        "Purgekeeper",
        "NewAttachment",
        "PurgekeeperError",
        "ValidationError",
        "NotFound",
        "StaleConfirmation",
        "VersionConflict",
        "IdempotencyConflict",
        "ActiveRuns",
        "ConversationPurged",
        "ConversationDeleted",
        "ContentPurged",
        "BotDeleted",
        "IdReserved",
        "MemoryErasureUnavailable",
        "MessagingUnavailable",
        "InfrastructureError",
    }
    assert documented <= set(purgekeeper.__all__)


# -- one direction of imports: commands -> workers -> storage -> schema ------------------


def imported_packages(source: str) -> set[str]:
    """The packages a module imports absolutely (relative imports stay inside): a third party's
    top-level name, or purgekeeper's layer (``purgekeeper`` itself re-exports ``commands``)."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(layer_of(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(layer_of(node.module))
    return found


def layer_of(module: str) -> str:
    top, *rest = module.split(".")
    if top != "purgekeeper":
        return top
    return rest[0] if rest else "commands"


def modules_under(package: str) -> list[Path]:
    paths = sorted((REPOSITORY / package).rglob("*.py"))
    assert paths, f"no modules found under {package}/"
    return paths


def test_the_import_parser_sees_every_form_of_import() -> None:
    source = (
        "import os, purgekeeper.workers.runner as m\n"
        "import purgekeeper\n"
        "from . import sibling\n"
        "from .tables import metadata\n"
        "def f():\n"
        "    from purgekeeper.commands.content_commands import ContentCommands\n"
        "if True:\n"
        "    import purgekeeper.schema.db\n"
    )
    assert imported_packages(source) == {"os", "workers", "commands", "schema"}
    assert imported_packages("from purgekeeper import open") == {"commands"}


@pytest.mark.parametrize("path", modules_under("schema"), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_schema_imports_nothing_of_ours_above_it(path: Path) -> None:
    assert imported_packages(path.read_text("utf-8")).isdisjoint({"commands", "workers", "storage"})


@pytest.mark.parametrize("path", modules_under("storage"), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_storage_imports_neither_workers_nor_commands(path: Path) -> None:
    assert imported_packages(path.read_text("utf-8")).isdisjoint({"commands", "workers"})


@pytest.mark.parametrize("path", modules_under("workers"), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_workers_do_not_import_commands(path: Path) -> None:
    assert "commands" not in imported_packages(path.read_text("utf-8"))


def test_a_retryable_database_fault_reports_a_documented_code() -> None:
    """``db.read()``/``db.write()`` can raise the transaction's private retry signal as it
    is (only ``transact`` turns it into InfrastructureError): a client must see the code of
    the error tree's InfrastructureError, not the private class's name."""
    from purgekeeper.commands import surface
    from purgekeeper.schema import db

    signal = db._Retryable("deadlock detected")
    assert signal.code == InfrastructureError("x").code
    assert (surface.http_status(signal), surface.exit_code(signal)) == (503, 4)
