"""Confirming again the scope of a content purge that is already accepted (a repeat after a
lost response, a second operator, a retried job): every event it selects is fenced, so the
answer is ``already_purged`` with the latest covering purge, whatever that purge's cleanup
has done to the report since the preview (the bodies step clears attachment names and run
outputs, so the preview's digest no longer matches). Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper import EventScope
from tests.helpers.cleanup import WHO, run, seed_content, step_of
from tests.helpers.reads import scalar

Pk = purgekeeper.Purgekeeper
DOOMED = EventScope(event_ids=("e-doomed",))


def written(pk: Pk) -> tuple[int, int, int]:
    """Ledger rows, tombstones and cleanup steps: what an acceptance writes."""
    tables = ("purge_ledger", "tombstones", "cleanup_steps")
    return tuple(int(scalar(pk, f"SELECT count(*) FROM {table}")) for table in tables)  # type: ignore[return-value]


def accepted(pk: Pk, scope: EventScope = DOOMED) -> tuple[str, purgekeeper.Acceptance]:
    """The scope previewed and confirmed: the preview's digest and the acceptance."""
    digest = pk.preview_purge(scope).scope_digest
    acceptance = pk.confirm_purge(scope, scope_digest=digest, **WHO)
    assert acceptance.outcome == "accepted"
    return digest, acceptance


def assert_already_purged(pk: Pk, first: purgekeeper.Acceptance, digest: str, scope: EventScope = DOOMED) -> None:
    before = written(pk)
    again = pk.confirm_purge(scope, scope_digest=digest, **WHO)
    assert (again.outcome, again.purge_id, again.ledger_seq) == ("already_purged", first.purge_id, first.ledger_seq)
    assert written(pk) == before


@pytest.fixture
def embedded(database_url: str, roots: dict[str, Path]) -> Iterator[Pk]:
    """A handle that runs the in-process worker, as a host's default ``open()`` does."""
    with purgekeeper.open(
        database_url,
        blob_root=roots["blob_root"],
        file_root=roots["file_root"],
        checkpoint_dir=roots["checkpoint_dir"],
        memory_roots=[roots["memory_root"]],
    ) as handle:
        yield handle


def test_a_repeat_after_the_cleanup_completed_is_already_purged(embedded: Pk) -> None:
    seed_content(embedded)
    digest, first = accepted(embedded)
    assert embedded.wait(first.purge_id, 30).status == "complete"
    assert embedded.preview_purge(DOOMED).scope_digest != digest  # the premise: the report changed
    assert_already_purged(embedded, first, digest)


def test_a_repeat_while_the_cleanup_is_under_way_is_already_purged(pk: Pk) -> None:
    """The bodies step done, the attachments step not yet run."""
    seed_content(pk)
    digest, first = accepted(pk)
    assert run(pk, step_of(pk, first.purge_id, "bodies").id).status == "done"
    assert step_of(pk, first.purge_id, "attachments").status == "pending"
    assert pk.preview_purge(DOOMED).scope_digest != digest
    assert_already_purged(pk, first, digest)


@pytest.mark.parametrize("digest", ["0" * 64, "fresh"], ids=["no-such-preview", "fresh-preview"])
def test_a_repeat_with_any_digest_is_already_purged(pk: Pk, digest: str) -> None:
    """Nothing is left to fence, so nothing is confirmed: the digest names no change that
    matters, and a stale confirmation would only send the caller to a preview that says
    every event is fenced."""
    seed_content(pk)
    _, first = accepted(pk)
    run(pk, step_of(pk, first.purge_id, "bodies").id)
    assert_already_purged(pk, first, pk.preview_purge(DOOMED).scope_digest if digest == "fresh" else digest)


def test_a_run_started_since_does_not_block_a_repeat(pk: Pk) -> None:
    """A non-terminal run blocks what an acceptance would remove; a repeat removes nothing."""
    seed_content(pk)
    digest, first = accepted(pk)
    pk.start_run("c1", bot_id="b-run", run_id="r-later")
    assert [r.id for r in pk.preview_purge(DOOMED).blocking_runs] == ["r-later"]
    assert_already_purged(pk, first, digest)


def test_a_repeat_answers_with_the_latest_covering_purge(pk: Pk) -> None:
    """Fenced by two purges: the answer names the later one."""
    seed_content(pk)
    pk.ingest_event("c1", author="ada", body="another", event_id="e-more")
    both = EventScope(event_ids=("e-doomed", "e-more"))
    digest = pk.preview_purge(both).scope_digest
    accepted(pk)
    _, latest = accepted(pk, EventScope(event_ids=("e-more",)))
    assert_already_purged(pk, latest, digest, both)


def test_a_repeat_of_a_conversation_window_is_already_purged(pk: Pk) -> None:
    """A scope by conversation selects its fenced events again, and is answered the same."""
    seed_content(pk)
    window = EventScope(conversation_id="c1")
    digest, first = accepted(pk, window)
    run(pk, step_of(pk, first.purge_id, "bodies").id)
    assert_already_purged(pk, first, digest, window)
