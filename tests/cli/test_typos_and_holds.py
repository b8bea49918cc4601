"""Issue 26, items 1, 2 and 7: a typo must not purge (or hold) forever without a word, and a
text preview shows the legal holds and never prints a confirm command that cannot succeed.

What was tried: ``purge-conversation`` of an id nobody created (refused, exit 1, nothing
written, unless ``--reserve-absent``); ``hold place --conversation`` of an unknown id
(refused unless ``--allow-unknown``); the text previews of a content purge, an author erasure
and a conversation purge while a hold covers them (the hold is shown, the confirm command is
not); a conversation and a channel preview with their confirm commands."""

from __future__ import annotations

import re

import pytest

import purgekeeper
from purgekeeper.commands.cli import render
from tests.helpers.purgectl import WHO, Purgectl, concurrently, seed, written

Pk = purgekeeper.Purgekeeper
# What the CLI adds is the same on both backends; the library's side (reservations, previews,
# holds) runs on both in tests/integration/test_conversation_preview.py.
pytestmark = pytest.mark.sqlite_only
HOLD = ("--actor", "legal@example.org", "--reason", "litigation")


def test_an_unknown_conversation_is_refused_unless_reserve_absent_is_given(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    before = written(pk)
    refused, listed = concurrently(
        lambda: purgectl.error(1, "not_found", "purge-conversation", "cli-9", *WHO),
        lambda: purgectl.text("purge-conversation", "cli-9", *WHO, code=1),
    )
    assert "no conversation cli-9" in refused["detail"] and "--reserve-absent" in refused["detail"]
    assert "--reserve-absent" in listed.stderr and "reserve" in listed.stderr
    assert written(pk) == before  # nothing was written
    reserved = purgectl.json("purge-conversation", "cli-9", *WHO, "--reserve-absent")
    assert (reserved["outcome"], reserved["reserved_absent"]) == ("accepted", True)
    with_flag = purgectl.json("purge-conversation", "c1", *WHO, "--reserve-absent")
    assert (with_flag["outcome"], with_flag["reserved_absent"]) == ("accepted", False)
    again = purgectl.text("purge-conversation", "cli-9", *WHO)  # a repeat of a reservation needs no flag
    assert again.stdout.startswith("already purged"), again.stdout


def test_a_reservation_says_so_in_text() -> None:
    shown = render.render_acceptance(purgekeeper.Acceptance("p1", 3, "accepted", reserved_absent=True))
    assert "reserved" in shown and "no conversation had this id" in shown
    assert "reserved" not in render.render_acceptance(purgekeeper.Acceptance("p1", 3, "accepted"))


def test_a_conversation_preview_prints_its_counts_and_confirm_command(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.create_conversation("ch1", kind="channel")
    version = pk.get_conversation("c1").version  # type: ignore[union-attr]
    conversation, channel, absent = concurrently(
        lambda: purgectl.text("preview-conversation", "c1").stdout,
        lambda: purgectl.text("preview-channel-deletion", "ch1").stdout,
        lambda: purgectl.text("preview-conversation", "cli-9").stdout,
    )
    assert re.search(r"^events\s+3$", conversation, re.M), conversation
    assert f"purgectl purge-conversation c1 --expected-version {version} --actor WHO --reason WHY" in conversation
    assert "purgectl delete-channel ch1 --actor WHO --reason WHY" in channel
    assert "history stays readable" in channel
    assert "--reserve-absent" in absent and "reserve" in absent


def test_text_previews_show_holds_and_print_no_confirm_command_that_would_fail(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.place_hold("h-ada", authors=["ada"], actor="legal@example.org", reason="litigation")
    content, author, conversation = concurrently(
        lambda: purgectl.text("preview", "--event", "e1", "--event", "e3").stdout,
        lambda: purgectl.text("preview-author-erasure", "ada").stdout,
        lambda: purgectl.text("preview-conversation", "c1").stdout,
    )
    for shown in (content, author, conversation):
        assert "h-ada" in shown, shown
        assert "to confirm:" not in shown, shown
        assert "purgectl hold release h-ada" in shown, shown
    assert "e1" in content.split("held")[1]  # the held event is named
    free = purgectl.text("preview", "--event", "e3").stdout
    assert "to confirm: purgectl confirm" in free and "held by legal hold" not in free


def test_a_hold_on_an_unknown_conversation_is_refused_unless_allowed(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    before = written(pk)
    refused = purgectl.error(1, "not_found", "hold", "place", "h1", "--conversation", "does-not-exist", *HOLD)
    assert "no conversation does-not-exist" in refused["detail"] and "--allow-unknown" in refused["detail"]
    assert written(pk) == before
    placed = purgectl.json(
        "hold", "place", "h1", "--conversation", "does-not-exist", "--conversation", "c1", *HOLD, "--allow-unknown"
    )
    assert placed["outcome"] == "accepted"
