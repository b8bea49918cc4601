"""The handle is composed, not inherited (issue 25): ``Purgekeeper`` holds its services
(acceptance, the enqueuer, content, purges, retention, holds, restore, operations,
receipts) and delegates to them, most in one line each (``purgekeeper.commands.delegation``); its
public methods are the ones it had as a stack of mixins, with the same signatures. No I/O
beyond reading this repository's own source files."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from purgekeeper.commands import wiring
from purgekeeper.commands.delegation import Delegate
from purgekeeper.commands.handle import Purgekeeper

COMMANDS = Path(__file__).resolve().parents[2] / "commands"

# The public methods of the handle before the composition (``dir(Purgekeeper)`` without the
# private names), recorded from the mixin stack: each ``str(inspect.signature(...))``, cut
# into its parameters and its return annotation.
PUBLIC_API: dict[str, tuple[str, ...]] = {
    "add_derivative": (
        "self",
        "conversation_id: 'str'",
        "*",
        "kind: 'str'",
        "payload: 'Any'",
        "source_event_ids: 'Sequence[str]' = ()",
        "-> 'Derivative'",
    ),
    "admit": ("self", "event_id: 'str'", "run_id: 'str'", "*", "payload: 'Any'", "-> 'Admission'"),
    "checkpoint_ledger": ("self", "path: 'str | Path'", "-> 'checkpoint.Checkpoint'"),
    "close": ("self", "-> 'None'"),
    "completion": ("self", "purge_id: 'str'", "-> 'dict[str, Any]'"),
    "confirm_purge": (
        "self",
        "scope: 'EventScope'",
        "*",
        "scope_digest: 'str'",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "consistency": ("self", "from_size: 'int'", "-> 'dict[str, Any]'"),
    "copy_ledger": ("self", "-> 'int'"),
    "count_holds": ("self", "*", "limit: 'int' = 100", "-> 'list[HoldCount]'"),
    "create_conversation": (
        "self",
        "conversation_id: 'str'",
        "*",
        "kind: 'str' = 'conversation'",
        "bot_id: 'str | None' = None",
        "-> 'Conversation'",
    ),
    "database_now": ("self", "-> 'dt.datetime'"),
    "delete_bot": (
        "self",
        "bot_id: 'str'",
        "*",
        "actor: 'str'",
        "reason: 'str'",
        "erase_memory: 'bool' = False",
        "reviewed_repository: 'RepositoryIdentity | None' = None",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "delete_channel": (
        "self",
        "channel_id: 'str'",
        "*",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "erase_author": (
        "self",
        "author: 'str'",
        "*",
        "scope_digest: 'str'",
        "actor: 'str'",
        "reason: 'str'",
        "before: 'dt.datetime | None' = None",
        "close_author: 'bool' = True",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "find_purges": ("self", "query: 'str'", "*", "limit: 'int' = 20", "-> 'PurgeSearch'"),
    "finish_run": ("self", "run_id: 'str'", "*", "status: 'str'", "output: 'Any' = None", "-> 'Run'"),
    "get_conversation": ("self", "conversation_id: 'str'", "-> 'Conversation | None'"),
    "ingest_events": ("self", "conversation_id: 'str'", "events: 'Sequence[NewEvent]'", "-> 'list[IngestResult]'"),
    "ingest_event": (
        "self",
        "conversation_id: 'str'",
        "*",
        "author: 'str'",
        "body: 'str | None'",
        "provider_event_id: 'str | None' = None",
        "event_id: 'str | None' = None",
        "occurred_at: 'dt.datetime | None' = None",
        "attachments: 'Sequence[NewAttachment]' = ()",
        "-> 'Event'",
    ),
    "list_conversations": ("self", "-> 'list[Conversation]'"),
    "list_holds": ("self", "*", "include_released: 'bool' = False", "-> 'list[Hold]'"),
    "list_purges": (
        "self",
        "status: 'str | None' = None",
        "*",
        "kind: 'str | None' = None",
        "conversation_id: 'str | None' = None",
        "since: 'dt.datetime | None' = None",
        "until: 'dt.datetime | None' = None",
        "limit: 'int' = 100",
        "after: 'int | None' = None",
        "operator_rows: 'bool' = True",
        "-> 'PurgePage'",
    ),
    "list_retention": ("self", "-> 'list[RetentionPolicy]'"),
    "log_key": ("self", "-> 'str'"),
    "merge_ledger": (
        "self",
        "*paths: 'str | Path'",
        "allow_other_database: 'bool' = False",
        "full: 'bool' = False",
        "-> 'MergeReport'",
    ),
    "messaging_status": ("self", "*", "refresh: 'bool' = True", "-> 'GateState'"),
    "open_attachment": ("self", "attachment_id: 'str'", "-> 'BinaryIO'"),
    "place_event": ("self", "event_id: 'str'", "conversation_id: 'str'", "-> 'Placement'"),
    "place_hold": (
        "self",
        "hold_id: 'str'",
        "*",
        "conversation_ids: 'Iterable[str]' = ()",
        "authors: 'Iterable[str]' = ()",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "preview_author_erasure": (
        "self",
        "author: 'str'",
        "*",
        "before: 'dt.datetime | None' = None",
        "-> 'AuthorErasurePreview'",
    ),
    "preview_bot_deletion": ("self", "bot_id: 'str'", "-> 'BotDeletionPreview'"),
    "preview_purge": ("self", "scope: 'EventScope'", "-> 'PurgePreview'"),
    "preview_retention": (
        "self",
        "*",
        "max_age: 'dt.timedelta'",
        "conversation_id: 'str | None' = None",
        "-> 'RetentionPreview'",
    ),
    "preview_channel_deletion": ("self", "channel_id: 'str'", "-> 'ConversationPreview'"),
    "preview_conversation_purge": ("self", "conversation_id: 'str'", "-> 'ConversationPreview'"),
    "purge_conversation": (
        "self",
        "conversation_id: 'str'",
        "*",
        "actor: 'str'",
        "reason: 'str'",
        "expected_version: 'int | None' = None",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "purge_detail": ("self", "purge_id: 'str'", "-> 'PurgeDetail'"),
    "purge_touched": ("self", "purge_id: 'str'", "-> 'PurgeTouched'"),
    "read_conversation": ("self", "conversation_id: 'str'", "-> 'list[Event]'"),
    "receipt": ("self", "purge_id: 'str'", "*", "for_subject: 'bool' = False", "-> 'dict[str, Any]'"),
    "register_bot": (
        "self",
        "bot_id: 'str'",
        "*",
        "name: 'str'",
        "memory_path: 'str | Path | None' = None",
        "-> 'Bot'",
    ),
    "release_hold": (
        "self",
        "hold_id: 'str'",
        "*",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "remove_retention": (
        "self",
        "policy_id: 'str'",
        "*",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "repair_ledger_copy": ("self", "-> 'CopyRepair'"),
    "resume": ("self", "-> 'int'"),
    "retry": ("self", "purge_id: 'str'", "*", "actor: 'str'", "reason: 'str'", "-> 'PurgeStatus'"),
    "rotate_keys": ("self", "-> 'bool'"),
    "run_retention": ("self", "-> 'list[RetentionRunOutcome]'"),
    "run_retention_policy": (
        "self",
        "policy_id: 'str'",
        "*",
        "actor: 'str | None' = None",
        "reason: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'RetentionRunOutcome'",
    ),
    "scheduler_duties": ("self", "-> 'None'"),
    "seal_older_content": ("self", "-> 'SealingRound | None'"),
    "set_retention": (
        "self",
        "policy_id: 'str'",
        "*",
        "max_age: 'dt.timedelta'",
        "conversation_id: 'str | None' = None",
        "scope_digest: 'str'",
        "actor: 'str'",
        "reason: 'str'",
        "idempotency_key: 'str | None' = None",
        "request_id: 'str | None' = None",
        "origin: 'str | None' = None",
        "-> 'Acceptance'",
    ),
    "stalled_purge_ids": ("self", "*", "limit: 'int' = 1000", "-> 'list[str]'"),
    "start_run": ("self", "conversation_id: 'str'", "*", "bot_id: 'str'", "run_id: 'str | None' = None", "-> 'Run'"),
    "status": ("self", "purge_id: 'str'", "-> 'PurgeStatus'"),
    "step_context": ("self", "-> 'StepContext'"),
    "verify_ledger": ("self", "-> 'LedgerReport'"),
    "wait": (
        "self",
        "purge_id: 'str'",
        "timeout: 'float'",
        "*",
        "on_progress: 'Callable[[PurgeStatus], None] | None' = None",
        "-> 'PurgeStatus'",
    ),
    "why_unreadable": ("self", "conversation_id: 'str'", "-> 'PurgekeeperError'"),
    "worker_leases": ("self", "*", "limit: 'int' = 1000", "-> 'list[WorkerLeases]'"),
    "list_workers": ("self", "*", "limit: 'int' = 1000", "-> 'list[WorkerProcess]'"),
}


def test_the_handle_has_no_base_class_but_object() -> None:
    assert Purgekeeper.__bases__ == (object,)


def test_the_handle_exposes_the_same_public_methods_with_the_same_signatures() -> None:
    public = {name: getattr(Purgekeeper, name) for name in dir(Purgekeeper) if not name.startswith("_")}
    assert sorted(public) == sorted(PUBLIC_API)
    for name, method in public.items():
        assert callable(method), name
        *parameters, returns = PUBLIC_API[name]
        assert str(inspect.signature(method)) == f"({', '.join(parameters)}) {returns}", name


def test_every_public_method_of_the_handle_is_written_on_it_with_a_docstring() -> None:
    """Explicit delegations (no ``__getattr__``): help() and type checkers see each one."""
    assert "__getattr__" not in vars(Purgekeeper)
    for name in PUBLIC_API:
        assert name in vars(Purgekeeper), name
        assert inspect.getdoc(getattr(Purgekeeper, name)), name


def _unopened_handle() -> Purgekeeper:
    """A handle that was never opened: no database, each service a bare instance of its class
    (what a bound method needs, nothing more)."""
    handle = object.__new__(Purgekeeper)
    for name, kind in typing.get_type_hints(wiring.Services).items():
        if inspect.isclass(kind) and kind is not str:
            setattr(handle, name, object.__new__(kind))
    return handle


def test_each_public_method_of_a_handle_has_the_signature_without_self_and_a_docstring() -> None:
    """What a host calls (``pk.list_purges``) takes the parameters recorded above, ``self`` left
    out, and says what it does."""
    handle = _unopened_handle()
    for name, (_self, *parameters, returns) in PUBLIC_API.items():
        bound = getattr(handle, name)
        assert callable(bound), name
        assert str(inspect.signature(bound)) == f"({', '.join(parameters)}) {returns}", name
        assert inspect.getdoc(bound), name
        assert inspect.getdoc(bound) == inspect.getdoc(getattr(Purgekeeper, name)), name


def test_each_delegation_names_the_service_that_holds_its_method() -> None:
    """``delegate("purges", PurgeCommands.preview_purge)`` names the service by its attribute:
    mypy cannot check that name, this does; the method carries the docstring help() shows."""
    services = typing.get_type_hints(wiring.Services)
    delegated = {name: value for name, value in vars(Purgekeeper).items() if isinstance(value, Delegate)}
    assert set(delegated) < set(PUBLIC_API)
    for name, delegation in delegated.items():
        assert getattr(services[delegation.service], delegation.name) is delegation.method, name
        assert getattr(Purgekeeper, name).__wrapped__ is delegation.method, name
        assert inspect.getdoc(delegation.method), name


def _placeholders(source: str) -> list[str]:
    """The functions whose body (after a docstring) is only ``raise NotImplementedError``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None:
            raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
            if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                found.append(f"{node.lineno} {node.name}")
    return found


@pytest.mark.parametrize("path", sorted(COMMANDS.rglob("*.py")), ids=lambda p: str(p.relative_to(COMMANDS.parent)))
def test_no_command_is_a_not_implemented_placeholder(path: Path) -> None:
    assert _placeholders(path.read_text("utf-8")) == []


def test_the_placeholder_finder_sees_each_form() -> None:
    source = (
        "class A:\n"
        "    def f(self) -> None:\n"
        '        """provided by another class"""\n'
        "        raise NotImplementedError\n"
        "    def g(self) -> int:  # provided by another class\n"
        "        raise NotImplementedError('later')\n"
        "    def h(self) -> int:\n"
        "        if self:\n"
        "            raise NotImplementedError\n"
        "        return 1\n"
    )
    assert _placeholders(source) == ["2 f", "5 g"]
