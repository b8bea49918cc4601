"""Schemathesis over every operation of the OpenAPI document, as its CLI would run it with
``--checks all --mode all`` and every phase (examples, coverage, fuzzing, and the stateful
phase, whose state machine follows the links Schemathesis infers), in-process over the app
with a valid bearer token. The document must tell the truth: every check passes (no 5xx, every
response declared with its status, content type, headers and body; schema-violating input
refused, schema-valid input accepted; ``405`` with an ``Allow`` of the path's methods), no
response holds a traceback, and every error is ``{"error": ..., "detail": ...}``.

Two statuses are a refusal of valid input that the document cannot prevent, and are accepted
as answers to it: ``410`` (the request is valid, but names purged content) and ``413`` (the
body is over this app's cap, which is smaller than the schema's sizes allow). The other
refusals of schema-valid input that are allowed are listed in ``SEMANTIC_RULES``, each with
why the schema cannot say it.

Reproducible and bounded: a fixed seed, Hypothesis derandomised, ``MAX_EXAMPLES`` per
operation; each run gets a fresh database. SQLite only, for speed. The handle is seeded with
short ids that Hypothesis tends to generate (``0``, ``A``, ...), so many requests reach
existing conversations, events, runs, bots and blobs instead of stopping at NotFound."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events, from_schema

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web.auth import Tokens
from tests.helpers.http import ENDPOINTS

TOKEN = "fuzz-host-token"
SEED_IDS = ("0", "00", "A", "a")
SEED = 26
MAX_EXAMPLES = 5  # per operation and generation mode
STATEFUL = 25  # the state machine's scenarios, each a chain of calls along the links
# Each run is one engine run over a fresh database; the stateful phase follows the fuzzing
# phase, whose Location headers it learns links from.
RUNS = {"examples-and-coverage": ("examples", "coverage"), "fuzzing-and-stateful": ("fuzzing", "stateful")}
UNEXPECTED_METHODS = ["OPTIONS", "DELETE", "PATCH"]  # each undocumented method of each path: 405 with its Allow
NEGATIVE_REJECTED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
POSITIVE_ANSWERED = ["2xx", "401", "404", "409", "410", "413"]

# Schema-valid requests that a 400 refuses by a rule the document cannot state (between two
# fields, or about what is stored): the error's detail, and why it is not in the schema. The
# ids the server makes (uuid4) steer the stateful phase a little, so a rule of what is stored
# can show in one run and not the next. A new finding is fixed, or judged one of these and added.
SEMANTIC_RULES: dict[str, str] = {
    r"after must be earlier than before": "a window's two ends compare (after < before)",
    r"is a conversation, not a channel": "a channel deletion names a channel: the kind of a stored row",
    r"the event is already placed in this conversation": "a stored placement (a conflict, still a 400)",
    r"provider_event_id is already used": "a stored event's provider id, with other content (still a 400)",
    r"run .* is already \w+": "a run finishes once, and a finished run admits nothing (its stored status, a 400)",
    r"the scope selects no events": "a preview's scope must select stored events",
    r"must be a tree size from 1 to": "a consistency proof's size is at most the ledger's current size",
    r"memory_path must lie inside": "a Memory path must lie inside a Memory root configured on this server",
    r"not a JSON document|not a checkpoint|rejected, nothing changed": "a merge's file must be a checkpoint file",
    r"must be printable text without whitespace": (
        "printable (no format, private-use or unassigned character): Unicode classes a pattern cannot name for"
        " Schemathesis, which generates with Python's re (no \\p{...})"
    ),
}


@dataclass(frozen=True)
class Finding:
    check: str
    operation: str
    request: str
    status: int | None
    answer: str

    def __str__(self) -> str:
        return f"{self.check} on {self.operation}: {self.status} {self.answer} <- {self.request}"


def _seed(pk: purgekeeper.Purgekeeper, memory_root: Path) -> None:
    for n, the_id in enumerate(SEED_IDS):
        repository = memory_root / f"bot-{n}"
        subprocess.run(["git", "init", "-q", str(repository)], check=True, capture_output=True)
        pk.register_bot(the_id, name=f"bot {the_id}", memory_path=repository)
        pk.create_conversation(the_id, bot_id=the_id)
        event = pk.ingest_event(
            the_id,
            author="ada",
            body=f"hello {the_id}",
            event_id=the_id,
            provider_event_id=the_id,
            attachments=[NewAttachment.cas(b"shared bytes", name="a.txt")],
        )
        pk.start_run(the_id, bot_id=the_id, run_id=the_id)
        pk.add_derivative(the_id, kind="summary", payload={"of": the_id}, source_event_ids=[event.id])
    pk.create_conversation("ch", kind="channel")


@pytest.fixture
def fuzzed_pk(sqlite_template: Path, tmp_path: Path) -> Iterator[purgekeeper.Purgekeeper]:
    database = tmp_path / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    handle = purgekeeper.open(
        f"sqlite:///{database}",
        blob_root=tmp_path / "blobs",
        file_root=tmp_path / "files",
        checkpoint_dir=tmp_path / "ledger",
        memory_roots=[tmp_path / "memory"],
        workers="none",
    )
    _seed(handle, tmp_path / "memory")
    waited = handle.wait
    # No worker runs here, so a wait would last its whole timeout: the run answers at once.
    handle.wait = lambda purge_id, timeout, **kwargs: waited(purge_id, 0, **kwargs)  # type: ignore[method-assign]
    yield handle
    handle.close()


def _config(phases: tuple[str, ...]) -> schemathesis.Config:
    generation = {"mode": "all", "max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"}
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "continue-on-failure": True,
            "generation": generation,
            "phases": {
                **{name: {"enabled": name in phases} for name in ("examples", "fuzzing")},
                "stateful": {"enabled": "stateful" in phases, "generation": {**generation, "max-examples": STATEFUL}},
                "coverage": {"enabled": "coverage" in phases, "unexpected-methods": UNEXPECTED_METHODS},
            },
            "checks": {
                "enabled": True,
                "negative_data_rejection": {"expected-statuses": NEGATIVE_REJECTED},
                "positive_data_acceptance": {"expected-statuses": POSITIVE_ANSWERED},
            },
        }
    )


def _run(app: Any, phases: tuple[str, ...]) -> tuple[list[Finding], int]:
    """The findings of one engine run, and how many responses it checked."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=_config(phases))
    findings: list[Finding] = []
    responses = 0
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError):
            raise event.exception
        if isinstance(event, events.NonFatalError):
            findings.append(Finding("error", event.label, "", None, str(event.value)[:300]))
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            responses += len(recorder.interactions)
            findings.extend(_failed_checks(recorder))
            findings.extend(_malformed_answers(recorder))
    return findings, responses


# schemathesis's own word that the "negative" case it sent is the positive one (its mutation
# left nothing invalid: a duplicate delivery's upload, say, answered 200 with the stored
# event): not a finding about the API. Seen in the stateful phase, where the cases depend on
# the earlier steps' answers.
NOT_NEGATIVE = "Invalid component: positive test case"


def _failed_checks(recorder: Any) -> Iterator[Finding]:
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is not None:
                failure = check.failure_info.failure
                if check.name == "negative_data_rejection" and NOT_NEGATIVE in str(failure.message):
                    continue
                yield _finding(recorder, case_id, check.name, f"{failure.title}: {failure.message}"[:400])


def _malformed_answers(recorder: Any) -> Iterator[Finding]:
    """No traceback in any answer, and every error is ``{"error": ..., "detail": ...}``."""
    for case_id, interaction in recorder.interactions.items():
        response = interaction.response
        if response is None:
            continue
        text = (response.content or b"").decode("utf-8", "replace")
        if "Traceback" in text:
            yield _finding(recorder, case_id, "no_traceback", "")
        if response.status_code >= 400 and not _error_body(text):
            yield _finding(recorder, case_id, "error_body", "")


def _error_body(text: str) -> bool:
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and {"error", "detail"} <= set(body)


def _finding(recorder: Any, case_id: str, check: str, message: str) -> Finding:
    case = recorder.cases[case_id].value
    interaction = recorder.interactions.get(case_id)
    response = interaction.response if interaction is not None else None
    body = "" if response is None else (response.content or b"").decode("utf-8", "replace")[:300]
    sent = f"{case.method} {case.formatted_path} query={case.query} body={str(case.body)[:200]}"
    status = None if response is None else response.status_code
    return Finding(check, recorder.label, sent, status, f"{body} ({message})" if message else body)


def semantic(finding: Finding) -> bool:
    """A positive-acceptance 400 whose detail is one of ``SEMANTIC_RULES``."""
    if finding.check != "positive_data_acceptance" or finding.status != 400:
        return False
    return any(re.search(rule, finding.answer) for rule in SEMANTIC_RULES)


@pytest.mark.parametrize("phases", list(RUNS.values()), ids=list(RUNS))
def test_the_document_tells_the_truth(fuzzed_pk: purgekeeper.Purgekeeper, phases: tuple[str, ...]) -> None:
    app = create_app(fuzzed_pk, tokens=Tokens(api=TOKEN), max_body_bytes=256 * 1024)
    findings, responses = _run(app, phases)
    assert responses > 100 * len(phases), responses  # the run reached the app
    unexpected = sorted({str(f) for f in findings if not semantic(f)})
    assert not unexpected, f"{len(unexpected)} findings:\n" + "\n".join(unexpected)


def test_the_fuzzed_operations_are_all_the_operations(sqlite_template: Path, tmp_path: Path) -> None:
    """Every route of the endpoint table is in the document, so the runs above reach it, and
    so are the two probes (outside the table: they need no token)."""
    database = tmp_path / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    with purgekeeper.open(f"sqlite:///{database}", blob_root=tmp_path / "b", checkpoint_dir=tmp_path / "l") as pk:
        schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(pk, tokens=Tokens(api=TOKEN)))
        served = {(result.ok().method.upper(), result.ok().path) for result in schema.get_all_operations()}
    assert served == set(ENDPOINTS) | {("GET", "/healthz"), ("GET", "/readyz")}
