"""``purgekeeper.commands.logs``: the one log format of every process. The formatter follows
``PURGEKEEPER_LOG_FORMAT``, a JSON line parses and carries the fields, the text line appends the
purge and step it is about, the level follows ``PURGEKEEPER_LOG_LEVEL``, and bad values are
typed errors. Each test puts the root logger back as it found it (pytest's own handlers)."""

from __future__ import annotations

import io
import json
import logging
import re
import runpy
import sys
from collections.abc import Iterator

import pytest

from purgekeeper.commands import logs
from purgekeeper.commands.settings import Settings
from purgekeeper.schema.errors import ValidationError

UTC_MILLIS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
STEP = {"purge_id": "p-1", "step_id": "s-1", "step_kind": "bodies"}
MOMENT = 1_767_225_600.25  # 2026-01-01T00:00:00.250Z


@pytest.fixture(autouse=True)
def root_as_found() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    alembic = logging.getLogger("alembic").level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("alembic").setLevel(alembic)


def configured(env: dict[str, str], process: str = "worker") -> io.StringIO:
    stream = io.StringIO()
    logs.configure(env, process=process, stream=stream)
    return stream


def record(message: str = "step claimed", level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("purgekeeper.workers.runner", level, __file__, 1, message, (), None)
    made.created, made.msecs = MOMENT, 250.0
    made.__dict__.update(extra)
    return made


def test_text_is_the_default_format_and_a_line_names_its_purge_and_step() -> None:
    stream = configured({})
    logging.getLogger("purgekeeper.workers.runner").info("step claimed: attempt %d of %d", 1, 5, extra=STEP)
    logging.getLogger("purgekeeper.workers.scheduler").info("scheduler leads now")
    claimed, leads = stream.getvalue().splitlines()
    time, level, process, logger, *message = claimed.split(" ")
    assert UTC_MILLIS.match(time) and (level, process, logger) == ("INFO", "worker", "purgekeeper.workers.runner:")
    assert " ".join(message) == "step claimed: attempt 1 of 5 purge_id=p-1 step_kind=bodies step_id=s-1"
    assert leads.endswith(
        " INFO worker purgekeeper.workers.scheduler: scheduler leads now"
    )  # no context: nothing appended


def test_the_text_time_is_utc_with_milliseconds() -> None:
    line = logs.formatter("text", "api").format(record())
    assert line.startswith("2026-01-01T00:00:00.250Z ")


def test_a_json_line_parses_and_carries_time_level_logger_message_and_the_extra_fields() -> None:
    stream = configured({"PURGEKEEPER_LOG_FORMAT": "json"}, process="scheduler")
    extra = {**STEP, "attempt": 2, "duration_s": 0.5}
    logging.getLogger("purgekeeper.workers.runner").warning("step finished: attempt %d failed", 2, extra=extra)
    (line,) = stream.getvalue().splitlines()
    parsed = json.loads(line)
    assert UTC_MILLIS.match(parsed.pop("time"))
    assert parsed == {
        "level": "WARNING",
        "logger": "purgekeeper.workers.runner",
        "message": "step finished: attempt 2 failed",
        "process": "scheduler",
        **extra,
    }


def test_a_json_time_is_utc_with_milliseconds_and_uvicorns_coloured_copy_is_left_out() -> None:
    line = logs.formatter("json", "api").format(record("GET /v1/purges 200", color_message="\x1b[1mGET\x1b[0m"))
    parsed = json.loads(line)
    assert parsed["time"] == "2026-01-01T00:00:00.250Z"
    assert "color_message" not in parsed and parsed["message"] == "GET /v1/purges 200"


def test_a_json_traceback_stays_inside_its_one_line() -> None:
    stream = configured({"PURGEKEEPER_LOG_FORMAT": "json"})
    try:
        raise RuntimeError("the disk said no")
    except RuntimeError:
        logging.getLogger("purgekeeper.commands.http.app").exception("internal error")
    (line,) = stream.getvalue().splitlines()
    parsed = json.loads(line)
    assert parsed["level"] == "ERROR" and "RuntimeError: the disk said no" in parsed["exc_info"]


def test_the_level_follows_the_setting() -> None:
    stream = configured({"PURGEKEEPER_LOG_LEVEL": "warning"})
    logging.getLogger("purgekeeper.workers.broker").info("step sent")
    logging.getLogger("purgekeeper.workers.runner").error("purge p-1 is incomplete")
    assert [line.split(" ")[1] for line in stream.getvalue().splitlines()] == ["ERROR"]


def test_settings_configure_as_the_environment_does() -> None:
    settings = Settings.from_env({"PURGEKEEPER_LOG_FORMAT": "json", "PURGEKEEPER_LOG_LEVEL": "DEBUG"})
    stream = io.StringIO()
    logs.configure(settings, process="cli", stream=stream)
    logging.getLogger("purgekeeper.commands.purge_commands").debug("a detail")
    assert json.loads(stream.getvalue())["process"] == "cli"


@pytest.mark.parametrize(("variable", "value"), [("PURGEKEEPER_LOG_FORMAT", "xml"), ("PURGEKEEPER_LOG_LEVEL", "LOUD")])
def test_a_bad_format_or_level_is_a_validation_error_naming_the_variable(variable: str, value: str) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    with pytest.raises(ValidationError, match=variable):
        logs.configure({variable: value}, process="api", stream=io.StringIO())
    assert root.handlers == before  # nothing was half-configured


def test_only_the_log_variables_are_read_from_the_environment() -> None:
    """A one-shot command reports another bad variable itself, in its own format."""
    stream = configured({"PURGEKEEPER_STEP_LEASE": "soon", "PURGEKEEPER_LOG_FORMAT": "json"}, process="cli")
    logging.getLogger("commands").warning("still logged")
    assert json.loads(stream.getvalue())["message"] == "still logged"


def test_alembic_info_lines_are_silenced() -> None:
    configured({"PURGEKEEPER_LOG_LEVEL": "DEBUG"})
    assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
    assert logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.WARNING)
    assert logging.getLogger("purgekeeper.workers.runner").isEnabledFor(logging.DEBUG)


def test_configure_replaces_its_own_handler_and_a_basic_config_one_and_keeps_the_others() -> None:
    root = logging.getLogger()
    basic = logging.StreamHandler(io.StringIO())  # what logging.basicConfig (and dramatiq) installs
    other = logging.NullHandler()  # any other kind of handler (pytest's, a host's): left alone
    root.addHandler(basic)
    root.addHandler(other)
    configured({})
    stream = configured({"PURGEKEEPER_LOG_FORMAT": "json"})
    ours = [h for h in root.handlers if h.get_name() == logs.HANDLER_NAME]
    assert len(ours) == 1 and basic not in root.handlers and other in root.handlers
    root.removeHandler(other)
    logging.getLogger("x").warning("once")
    assert len(stream.getvalue().splitlines()) == 1


def test_without_a_stream_lines_go_to_whatever_stderr_is_then(monkeypatch: pytest.MonkeyPatch) -> None:
    logs.configure({}, process="worker")
    swapped = io.StringIO()  # as dramatiq points a worker process's stderr at its pipe
    monkeypatch.setattr(sys, "stderr", swapped)
    logging.getLogger("dramatiq.WorkerProcess(0)").info("Worker process is ready for action.")
    assert swapped.getvalue().endswith("Worker process is ready for action.\n")


def test_an_unknown_process_is_refused() -> None:
    with pytest.raises(ValueError, match="process must be one of"):
        logs.configure({}, process="web", stream=io.StringIO())


def test_uvicorn_is_left_no_format_and_no_level_of_its_own() -> None:
    assert logs.uvicorn_options() == {"log_config": None, "log_level": None}


@pytest.mark.parametrize(
    ("command", "process"), [("serve", "api"), ("scheduler", "scheduler"), ("list", "cli"), (None, "cli")]
)
def test_purgectl_logs_as_the_process_its_command_runs(
    command: str | None, process: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    logs.configure_purgectl(lambda: Settings.from_env({"PURGEKEEPER_LOG_FORMAT": "json"}), command)
    logging.getLogger("commands").warning("hello")
    assert json.loads(sys.stderr.getvalue())["process"] == process


def test_a_bad_log_variable_leaves_purgectl_the_default_format_for_the_command_to_report_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bad = {"PURGEKEEPER_LOG_FORMAT": "xml", "PURGEKEEPER_LOG_LEVEL": "LOUD"}
    logs.configure_purgectl(lambda: Settings.from_env(bad), "list")
    logging.getLogger("commands").info("hello")
    assert sys.stderr.getvalue().endswith(" INFO cli commands: hello\n")


def test_the_worker_module_run_as_spawns_main_sets_nothing_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the spawn start method (``--use-spawn``, macOS) a worker process first runs the
    main module again as ``__mp_main__``, then dramatiq imports ``purgekeeper.commands.worker``: only
    the import may set the worker up, or each process would have two brokers and engines.
    Without a broker URL, setting up exits; run as ``__mp_main__``, nothing is tried."""
    monkeypatch.delenv("PURGEKEEPER_BROKER_URL", raising=False)
    namespace = runpy.run_module("purgekeeper.commands.worker", run_name="__mp_main__")
    assert "database" not in namespace
