"""Issue 25: no module of any layer over about 500 lines, no function over 60 (the migrations
included: a revision's ``upgrade`` runs helpers, one per table or group).

One module is larger by design: ``tlog/verify.py`` is the offline verifier a host copies into
its own code, one file that imports only the standard library and ``cryptography``. Its bound
rose from 700 to 850 lines with issue 35: the strict reading of hostile receipts (nesting,
numbers, duplicate keys) and the names of the row kinds must live in that one file too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("commands", "workers", "storage", "schema", "tlog")
MAX_MODULE_LINES = 500
# 850 -> 1000: the witnesses' cosignatures (keys, checks, quorum) are verified offline, in the one file.
# 1000 -> 1250: leaf version 2 (salted commitments, and the values a receipt discloses) is read there too.
ONE_FILE_BY_DESIGN = {"tlog/verify.py": 1250}
MAX_FUNCTION_LINES = 60


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    limit = ONE_FILE_BY_DESIGN.get(str(path.relative_to(ROOT)), MAX_MODULE_LINES)
    assert lines <= limit, f"{path.relative_to(ROOT)} has {lines} lines"


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_function_is_over_60_lines(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path.relative_to(ROOT)}: {', '.join(long)}"


def test_a_split_module_still_names_what_it_named() -> None:
    """The modules split for issue 25 still name what other code imports from them."""
    from purgekeeper.schema import content_queries, purges, retention_queries, tables
    from purgekeeper.storage import ledger_copy, signed_log

    assert {"LedgerCopy", "CopyHead", "catch_up", "reconcile", "open_source", "write_export", "SEGMENT_ROWS"} <= set(
        dir(ledger_copy)
    )
    assert {"SignedLog", "TreeHead", "LogRefused", "ForeignKey", "load_or_create_key", "read_key"} <= set(
        dir(signed_log)
    )
    assert {"Fence", "expire_batch", "deferral", "preview_totals", "quiet_turns", "summary"} <= set(
        dir(retention_queries)
    )
    assert {"report_rows", "ReportRows", "create_steps", "list_ledger", "lock_conversations"} <= set(dir(purges))
    assert {"metadata", "UtcDateTime", "events", "purge_ledger", "CONTENT_TABLES", "PURGE_TABLES"} <= set(dir(tables))
    assert {"live_event", "read_conversation", "insert_event", "NOT_PURGED", "utc_from_text"} <= set(
        dir(content_queries)
    )


def test_the_copy_reads_its_segment_size_from_storage_ledger_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests shrink ``purgekeeper.storage.ledger_copy.SEGMENT_ROWS``: the copy's reading and writing parts,
    in their own modules, read it from there at every use."""
    from purgekeeper.storage import ledger_copy

    copy = ledger_copy.LedgerCopy(Path("/nonexistent"), "d")
    assert copy.segment_rows == ledger_copy.SEGMENT_ROWS
    monkeypatch.setattr(ledger_copy, "SEGMENT_ROWS", 4)
    assert copy.segment_rows == 4 and ledger_copy.segment_of(9) == 9 and ledger_copy.segment_of(8) == 5


def test_no_two_modules_share_a_name_across_the_layers() -> None:
    """Issue 25: a module's name says where it lives (``__init__`` and ``__main__`` aside)."""
    seen: dict[str, list[str]] = {}
    for package in ("commands", "schema", "workers", "storage", "tlog"):
        for path in (ROOT / package).rglob("*.py"):
            if path.stem not in ("__init__", "__main__"):
                seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, shared
