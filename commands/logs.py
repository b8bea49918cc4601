"""One log format for every process: ``api`` (``purgectl serve``), ``worker`` (the dramatiq
worker processes), ``scheduler`` (``purgectl scheduler``) and ``cli`` (the one-shot commands).

Each process calls :func:`configure` once, at its edge: the standard library's ``logging``,
one handler on the root logger writing to stderr (stdout carries the CLI's results), at the
level of ``PURGEKEEPER_LOG_LEVEL``. ``PURGEKEEPER_LOG_FORMAT`` chooses how a line reads:

- ``text`` (the default), the standard ``logging.Formatter``::

      2026-05-04T09:12:03.217Z INFO worker purgekeeper.workers.runner: step claimed: attempt 1 of 5
      purge_id=3f2a... step_kind=bodies step_id=9c1e...

  (one line; folded here)

- ``json``, python-json-logger's ``JsonFormatter``, one object a line::

      {"time": "2026-05-04T09:12:03.217Z", "level": "INFO", "logger": "purgekeeper.workers.runner",
       "message": "step claimed: attempt 1 of 5", "process": "worker", "purge_id": "3f2a...",
       "step_id": "9c1e...", "step_kind": "bodies", "attempt": 1, "owner": "host:4121:0be1..."}

Times are UTC, ISO 8601 with milliseconds. A record's ``extra=`` fields (``purge_id``,
``step_id``, ``step_kind``, ``outcome``, ``duration_s``, ...) are JSON fields; the text format
appends the ones that name a purge or a step (``CONTEXT_FIELDS``). alembic's INFO lines (the
migration context at every start) are silenced: its loggers log at WARNING. uvicorn installs
no format of its own (:func:`uvicorn_options`): its lines go through the same handler.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from purgekeeper.commands.settings import ENV_PREFIX, Settings
from purgekeeper.schema.errors import ValidationError

PROCESSES = ("api", "worker", "scheduler", "cli")
PURGECTL_PROCESSES = {"serve": "api", "scheduler": "scheduler"}  # the rest are one-shot: "cli"
VARIABLES = (ENV_PREFIX + "LOG_FORMAT", ENV_PREFIX + "LOG_LEVEL")
HANDLER_NAME = "purgekeeper"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(process_role)s %(name)s: %(message)s%(context)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"
JSON_NAMES = {"asctime": "time", "levelname": "level", "name": "logger"}
CONTEXT_FIELDS = ("purge_id", "step_kind", "step_id")
# INFO at every start ("Context impl PostgresqlImpl.", ...); httpx: a line per request (the
# key server's client asks at every ingest and read)
QUIET_LOGGERS = ("alembic", "httpx")
# uvicorn passes its coloured message along as an extra; the plain one is the message (with
# python-json-logger's RESERVED_ATTRS, which the JSON formatter skips too).
EXTRA_SKIPPED_ATTRS = ("color_message", "taskName")


def configure(source: Settings | Mapping[str, str], *, process: str, stream: TextIO | None = None) -> None:
    """Log as ``process`` (one of ``PROCESSES``) in the configured format and level, to
    ``stream`` or else whatever ``sys.stderr`` is when a line is written (dramatiq points it
    at its pipe in a worker process; click's test runner swaps it). ``source``: the settings,
    or environment variables (only the two log variables are read: a CLI command reports any
    other bad variable itself). A bad format or level raises ``ValidationError``. Calling it
    again replaces the handler; a ``logging.basicConfig`` handler (dramatiq installs one in
    its processes) is replaced too, other handlers are left alone."""
    if process not in PROCESSES:
        raise ValueError(f"process must be one of {', '.join(PROCESSES)}, not {process!r}")
    settings = source if isinstance(source, Settings) else _log_settings(source)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter(settings.log_format, process))
    if settings.log_format == "text":
        handler.addFilter(TextContext())
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == HANDLER_NAME or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure_purgectl(read_settings: Callable[[], Settings], command: str | None) -> None:
    """``purgectl``'s logging, set up by its group before the command runs: as ``api`` for
    ``serve``, ``scheduler`` for ``scheduler``, ``cli`` for the one-shot commands, from the
    process's settings (``read_settings``: read once, kept for the command). Settings that do
    not read (a bad variable) leave the default format: the command reports the variable when
    it reads them (``validation_error``, exit 2, as JSON under ``--json``)."""
    process = PURGECTL_PROCESSES.get(command or "", "cli")
    try:
        configure(read_settings(), process=process)
    except ValidationError:
        configure({}, process=process)


def _log_settings(environ: Mapping[str, str]) -> Settings:
    """Settings read from the two log variables only (the rest at their defaults)."""
    return Settings.from_env({name: environ[name] for name in VARIABLES if name in environ})


def formatter(log_format: str, process: str) -> logging.Formatter:
    """The standard formatter for ``text``, python-json-logger's for ``json``; both write
    UTC times like ``2026-05-04T09:12:03.217Z``."""
    chosen: logging.Formatter
    if log_format == "json":
        # imported here: a one-shot purgectl command logging text starts without it
        from pythonjsonlogger.core import RESERVED_ATTRS
        from pythonjsonlogger.json import JsonFormatter

        skipped = (*RESERVED_ATTRS, *EXTRA_SKIPPED_ATTRS)
        chosen = JsonFormatter(
            JSON_FIELDS, rename_fields=JSON_NAMES, static_fields={"process": process}, reserved_attrs=skipped
        )
    else:
        chosen = logging.Formatter(TEXT_FORMAT, defaults={"process_role": process, "context": ""})
    chosen.converter = time.gmtime
    chosen.default_time_format = "%Y-%m-%dT%H:%M:%S"
    chosen.default_msec_format = "%s.%03dZ"
    return chosen


class TextContext(logging.Filter):
    """For the text format: `` purge_id=... step_kind=... step_id=...`` for the fields a
    record carries (nothing for the others)."""

    def filter(self, record: logging.LogRecord) -> bool:
        present = ((name, getattr(record, name, None)) for name in CONTEXT_FIELDS)
        record.context = "".join(f" {name}={value}" for name, value in present if value is not None)
        return True


class _StderrHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is at the time of each line."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """Always ``sys.stderr``: nothing to set."""


def uvicorn_options() -> dict[str, Any]:
    """``uvicorn.Config`` options that leave logging to :func:`configure`: no dictConfig of
    uvicorn's own (its format, its handlers), and no level of its own on its loggers (the
    process's level applies), so its lines, the access log among them, go through the same
    handler."""
    return {"log_config": None, "log_level": None}
