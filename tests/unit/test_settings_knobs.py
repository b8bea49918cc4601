"""The process knobs added to Settings for issue 15: the log format and level, and the worker's
metrics port; a bad value is a typed error naming the variable."""

from __future__ import annotations

import pytest

from purgekeeper.commands.settings import Settings
from purgekeeper.schema.errors import ValidationError


def test_the_defaults_are_text_logs_at_info_and_no_worker_metrics_port() -> None:
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": "/tmp/pk-knobs"})
    assert (settings.log_format, settings.log_level, settings.worker_metrics_port) == ("text", "INFO", None)


def test_the_knobs_are_read_case_insensitively() -> None:
    settings = Settings.from_env(
        {
            "PURGEKEEPER_DATA_DIR": "/tmp/pk-knobs",
            "PURGEKEEPER_LOG_FORMAT": "JSON",
            "PURGEKEEPER_LOG_LEVEL": "debug",
            "PURGEKEEPER_WORKER_METRICS_PORT": "9191",
        }
    )
    assert (settings.log_format, settings.log_level, settings.worker_metrics_port) == ("json", "DEBUG", 9191)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOG_FORMAT", "xml"),
        ("LOG_LEVEL", "LOUD"),
        ("WORKER_METRICS_PORT", "0"),
        ("WORKER_METRICS_PORT", "65536"),
        ("WORKER_METRICS_PORT", "-1"),
        ("WORKER_METRICS_PORT", "nine"),
    ],
)
def test_a_bad_knob_is_a_validation_error_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ValidationError, match=f"PURGEKEEPER_{variable}"):
        Settings.from_env({"PURGEKEEPER_DATA_DIR": "/tmp/pk-knobs", f"PURGEKEEPER_{variable}": value})
