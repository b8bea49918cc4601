"""The rule table (``schema/rules.py``) and the current source of the triggers
(``schema/sql/<dialect>/current.sql``) agree, without a database: every trigger either file
defines belongs to a rule of its dialect, every name the table gives is defined in that
dialect's file, and every rule is enforced on both backends unless it says why it is one
backend's by nature."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from purgekeeper.schema import fences, rules


@pytest.mark.parametrize("dialect", rules.DIALECTS)
def test_current_sql_only_defines(dialect: str) -> None:
    """current.sql creates triggers, functions and views, nothing else (no DROP, no data)."""
    found = fences.defined(dialect)
    assert found["trigger"]
    if dialect == "sqlite":
        assert not found["function"]


@pytest.mark.parametrize("dialect", rules.DIALECTS)
def test_every_trigger_in_current_sql_has_a_rule(dialect: str) -> None:
    without = sorted(fences.defined(dialect)["trigger"] - rules.names(dialect))
    assert without == [], f"{dialect} triggers that no rule in schema/rules.py names: {without}"


@pytest.mark.parametrize("dialect", rules.DIALECTS)
def test_every_name_in_the_rule_table_is_defined(dialect: str) -> None:
    found = fences.defined(dialect)
    unknown = sorted(rules.names(dialect) - found["trigger"] - found["function"])
    assert unknown == [], f"schema/rules.py names {dialect} triggers or functions current.sql lacks: {unknown}"


def one_sided(table: tuple[rules.Rule, ...]) -> list[str]:
    """The rules of ``table`` missing on a backend without saying why."""
    missing = []
    for rule in table:
        for dialect in rules.DIALECTS:
            has = bool(rule.names(dialect))
            if rule.only is None and not has:
                missing.append(f"{rule.id}: no {dialect} trigger")
            if rule.only is not None and has != (dialect == rule.only):
                missing.append(
                    f"{rule.id}: marked {rule.only}'s by nature, yet {dialect} {'has' if has else 'lacks'} it"
                )
        if rule.only is not None and (rule.only not in rules.DIALECTS or not rule.why.strip()):
            missing.append(f"{rule.id}: one dialect's by nature needs a known dialect and the reason")
        if rule.only is None and rule.why:
            missing.append(f"{rule.id}: a reason given for a rule on both backends")
    return missing


def test_every_rule_is_enforced_on_both_backends_or_says_why_not() -> None:
    assert one_sided(rules.RULES) == []


def test_a_rule_missing_on_either_side_fails() -> None:
    chain = next(rule for rule in rules.RULES if rule.id == "ledger_chain")
    no_sqlite = replace(chain, sqlite=())
    no_postgresql = replace(chain, postgresql=())
    assert one_sided((no_sqlite,)) == ["ledger_chain: no sqlite trigger"]
    assert one_sided((no_postgresql,)) == ["ledger_chain: no postgresql trigger"]
    assert one_sided((replace(chain, sqlite=(), only="postgresql"),)) == [
        "ledger_chain: one dialect's by nature needs a known dialect and the reason"
    ]
    assert one_sided((replace(chain, only="postgresql", why="because"),)) == [
        "ledger_chain: marked postgresql's by nature, yet sqlite has it"
    ]


def test_rules_have_short_ids_and_one_line_meanings() -> None:
    ids = [rule.id for rule in rules.RULES]
    assert len(ids) == len(set(ids))
    for rule in rules.RULES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", rule.id), rule.id
        assert rule.meaning.strip() and "\n" not in rule.meaning, rule.id
        for dialect in rules.DIALECTS:
            assert len(rule.names(dialect)) == len(set(rule.names(dialect))), (rule.id, dialect)
