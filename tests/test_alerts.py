"""The alerts and the dashboard that ship in ``deploy/``: ``promtool check rules`` and
``promtool test rules`` on them (every alert fires when it should, and not before its ``for:``
elapses or once its metric is back to normal), what each alert carries, and that every metric
they name is one a real ``/metrics`` scrape exports (a renamed metric fails here).

promtool is Debian's ``prometheus`` package (``.ci/run`` installs it); without it these tests
fail on CI and skip elsewhere."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML: installed with the dev tools (schemathesis reads YAML with it)
from prometheus_client import generate_latest

import purgekeeper
from purgekeeper.commands.web import metrics
from tests.helpers.databases import service_missing

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "purgekeeper.json"
METRIC_NAME = re.compile(r"\b" + metrics.PREFIX + r"[a-z0-9_]+")
SEVERITIES = {"critical", "warning"}
COMMANDS = ("purgectl ", "/status")


def promtool(*args: str) -> str:
    path = shutil.which("promtool")
    if path is None:
        service_missing("promtool (Debian's prometheus package)", FileNotFoundError("no promtool on PATH"))
    assert path is not None
    done = subprocess.run([path, *args], capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} exited {done.returncode}:\n{output}"
    return output


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def metric_names(text: str) -> set[str]:
    return set(METRIC_NAME.findall(text))


def test_promtool_accepts_the_rules() -> None:
    assert f"SUCCESS: {len(alert_rules())} rules found" in promtool("check", "rules", str(RULES))


def test_the_unit_tests_of_every_alert_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_waits_has_a_severity_and_says_what_to_do() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} == {
        "PurgekeeperPurgeIncomplete",
        "PurgekeeperPurgeStalled",
        "PurgekeeperNoLiveWorker",
        "PurgekeeperNoScheduler",
        "PurgekeeperLedgerCopyUnwritable",
        "PurgekeeperSigningKeyUnusable",
        "PurgekeeperKeyStoreUnusable",
        "PurgekeeperWitnessRefusing",
        "PurgekeeperWitnessLagging",
        "PurgekeeperLedgerDamaged",
        "PurgekeeperMessagingUnavailable",
        "PurgekeeperRetentionOverdue",
        "PurgekeeperRetentionDeferred",
    }
    for rule in rules:
        assert re.fullmatch(r"[1-9][0-9]*[mh]", rule.get("for", "")), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), rule["alert"]
        assert any(command in annotations["description"] for command in COMMANDS), rule["alert"]


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() -> None:
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for rule in alert_rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} is never expected to fire"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} is never expected to stay quiet"


def test_the_dashboard_is_json_and_promtool_parses_its_queries(tmp_path: Path) -> None:
    queries = dashboard_queries()
    assert queries
    recorded = [{"record": f"dashboard:query_{i}", "expr": query} for i, query in enumerate(queries)]
    as_rules = tmp_path / "dashboard_queries.yml"
    as_rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    assert f"SUCCESS: {len(queries)} rules found" in promtool("check", "rules", str(as_rules))


def exported_names(exposition: str) -> set[str]:
    """What PromQL can select from a scrape: each family's samples, and a histogram's
    ``_bucket``, ``_sum`` and ``_count`` even while it has no samples yet."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
            names.update(name + suffix for suffix in suffixes)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@pytest.mark.sqlite_only
def test_every_metric_the_alerts_and_the_dashboard_name_is_exported(pk: purgekeeper.Purgekeeper) -> None:
    exported = exported_names(generate_latest(metrics.registry_for(pk)).decode())
    rules_text = "\n".join(line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#"))
    used = metric_names(rules_text) | metric_names("\n".join(dashboard_queries()))
    for rule in alert_rules():
        assert metric_names(rule["expr"]), f"{rule['alert']} names no purgekeeper metric"
    assert used - exported == set(), f"not in /metrics: {sorted(used - exported)}"
