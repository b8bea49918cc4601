"""purgekeeper.commands.processes, what purgectl's process commands call, on SQLite and PostgreSQL: init,
a handle on an initialised database, the health check and the scheduler's broker wiring."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pytest

from purgekeeper.commands import processes
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.errors import MessagingUnavailable, SchemaMismatch


def settings_for(database_url: str, roots: dict[str, Path], tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "PURGEKEEPER_DATABASE_URL": database_url,
            "PURGEKEEPER_DATA_DIR": str(tmp_path / "data"),
            "PURGEKEEPER_BLOB_ROOT": str(roots["blob_root"]),
            "PURGEKEEPER_FILE_ROOT": str(roots["file_root"]),
            "PURGEKEEPER_MEMORY_ROOTS": str(roots["memory_root"]),
            "PURGEKEEPER_CHECKPOINT_DIR": str(roots["checkpoint_dir"]),
        }
    )


def test_initialise_is_safe_to_run_again_and_names_the_database(
    database_url: str, roots: dict[str, Path], tmp_path: Path
) -> None:
    settings = settings_for(database_url, roots, tmp_path)
    again = processes.initialise(settings)  # the clone is migrated already
    assert (again.migrated, again.revision, again.previous_revision) == (False, migrate.head_revision(), again.revision)
    assert again.database_url == settings.database_name


def test_health_is_ok_then_names_what_closed_the_gate(
    database_url: str, roots: dict[str, Path], tmp_path: Path
) -> None:
    settings = settings_for(database_url, roots, tmp_path)
    with processes.opened(settings) as pk:
        pk.purge_conversation("c-1", actor="ops", reason="reserve")
    health = processes.check_health(settings)
    assert (health.ok, health.revision, health.ledger_rows) == (True, migrate.head_revision(), 1)
    with processes.opened(settings) as pk:
        pk.db.transact(lambda conn: ledger.set_gate(conn, "a restore merge is under way (test)"))
    with pytest.raises(MessagingUnavailable) as closed:
        processes.check_health(settings)
    assert closed.value.diagnostics == ("a restore merge is under way (test)",)


def test_a_handle_is_refused_on_a_database_never_initialised(tmp_path: Path) -> None:
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path / "fresh")})
    with pytest.raises(SchemaMismatch, match=re.escape(f"no purgekeeper database at {settings.database_name}:")):
        with processes.opened(settings):
            pass
    assert not (tmp_path / "fresh" / "purgekeeper.db").exists()


def test_a_broker_that_is_down_is_logged_and_the_next_sweep_sends_again(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="purgekeeper.commands.processes"):
        processes.enqueue_or_log(f"redis://127.0.0.1:{port}/0", "key", ["step-1", "step-2"])
    assert "enqueue of 2 step(s) failed" in caplog.text
