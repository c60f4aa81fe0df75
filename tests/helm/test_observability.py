"""What the chart ships for monitoring: the alerting rules under a real evaluator
(``promtool check rules`` and ``promtool test rules``), the Grafana dashboard and the rules
naming only metrics that real brokers and the operator expose, and the chart rendering the
dashboard ConfigMap, the PrometheusRule (from the same rules file) and the operator's
PodMonitor.

promtool comes from ``tools/build-promtool.sh`` (``make promtool``, which ``make unit`` runs):
``$PROMTOOL``, ``e2e/.cluster/bin/promtool`` or PATH. Without it the promtool tests skip and
say why; under CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from brokergroup_operator import metrics as operator_metrics
from habroker.client import BrokerGroupReader, Producer
from habroker.local import LocalDLedgerGroup, LocalGroup
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helm.test_chart import CHART, LOCAL_BIN, by_kind, env_of, helm, render

# helm and promtool from `make cluster-build` / `make promtool`: `make unit` runs these after them
pytestmark = pytest.mark.cluster_bins

__all__ = ["helm"]  # the fixture, used by name

RULES = CHART / "rules" / "brokergroup.rules.yaml"
RULE_TESTS = CHART / "rules" / "tests" / "brokergroup.rules.test.yaml"
DASHBOARD = CHART / "dashboards" / "brokergroup.json"
ALERTS = {
    "BrokerGroupNoMaster",
    "BrokerGroupSlaveOutOfSync",
    "BrokerGroupHALagGrowing",
    "BrokerGroupDLedgerPeerDown",
    "BrokerGroupDLedgerLeaderUnstable",
    "BrokerGroupSlaveDiverged",
    "BrokerGroupDiskFilling",
    "BrokerGroupConsumerLagGrowing",
}
METRIC_NAME = re.compile(r"\b(?:habroker|brokergroup_operator)_[a-z0-9_]+\b")


# -- promtool ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def promtool() -> str:
    found = os.environ.get("PROMTOOL") or (
        str(LOCAL_BIN / "promtool")
        if (LOCAL_BIN / "promtool").is_file()
        else shutil.which("promtool")
    )
    if found is None:
        message = f"no promtool: run `make promtool` (builds it into {LOCAL_BIN})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test the alerting rules, but {message}")
        pytest.skip(message)
    return found


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, cwd=RULE_TESTS.parent
    )


def test_rules_are_valid(promtool: str) -> None:
    result = run_promtool(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout + result.stderr


def test_every_alert_fires_and_stays_silent_as_meant(promtool: str) -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tested = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    assert tested == ALERTS
    for alert in ALERTS:  # each alert both fires and is held back somewhere
        outcomes = {
            bool(t["exp_alerts"])
            for case in tests["tests"]
            for t in case["alert_rule_test"]
            if t["alertname"] == alert
        }
        if alert != "BrokerGroupSlaveDiverged":  # its silent case is the healthy slave-1 series
            assert outcomes == {True, False}, alert
    result = run_promtool(promtool, "test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_a_broken_expectation_fails(promtool: str, tmp_path: Path) -> None:
    """promtool really evaluates: a test expecting the wrong labels fails."""
    broken = RULE_TESTS.read_text().replace("brokergroup: orders, group: billing", "group: x")
    assert broken != RULE_TESTS.read_text()
    copy = tmp_path / "broken.test.yaml"
    copy.write_text(broken.replace("../brokergroup.rules.yaml", str(RULES)))
    result = run_promtool(promtool, "test", "rules", str(copy))
    assert result.returncode != 0
    assert "BrokerGroupConsumerLagGrowing" in result.stdout + result.stderr


# -- the metrics the dashboard and the rules name -------------------------------------------
def exposed_names(text: str) -> set[str]:
    """Every series name a scrape of ``text`` can hold (histograms' _bucket/_sum/_count, a
    counter's _total), including families that have no sample yet."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            names |= {f"{family.name}{s}" for s in ("_bucket", "_sum", "_count")}
        elif family.type == "counter":
            names.add(f"{family.name}_total")
        else:
            names.add(family.name)
    return names


def scrape_text(http_address: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{http_address}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Names scraped from a real SYNC master and slave that served produce, pull and a
    commit, from the leader of a real DLedger group, plus the operator's registry."""
    group = LocalGroup(
        tmp_path_factory.mktemp("obs") / "g",
        slaves=1,
        mode="SYNC",
        mappedFileSizeCommitLog=1 << 20,
        maxMessageSize=1 << 16,
    ).start()
    try:
        with Producer(group.master.http_address) as producer:
            producer.create_topic("t", 1)
            producer.send_batch("t", [b"x"] * 10, queue_id=0)
        with BrokerGroupReader(group.master.http_address) as reader:
            reader.pull("t", 0, 0, group="g")
            reader.commit_offset("g", "t", 0, 5)
        group.wait_replicated()
        names = exposed_names(scrape_text(group.master.http_address))
        names |= exposed_names(scrape_text(group.slaves[0].http_address))
    finally:
        group.stop()
    dledger = LocalDLedgerGroup(
        tmp_path_factory.mktemp("obs") / "d", 3, mappedFileSizeCommitLog=1 << 20
    ).start()
    try:
        names |= exposed_names(scrape_text(dledger.leader(timeout=60).http_address))
    finally:
        dledger.stop()
    names |= exposed_names(generate_latest(operator_metrics.REGISTRY).decode())
    yield names


def dashboard_exprs(dashboard: dict[str, Any]) -> Iterable[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            yield f"${var['name']}", var["definition"]


def test_dashboard_names_only_exposed_metrics(exposed: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(dashboard_exprs(dashboard))
    assert len(exprs) > 20
    used: set[str] = set()
    for title, expr in exprs:
        names = set(METRIC_NAME.findall(expr))
        assert names, f"{title}: {expr} names no metric of ours"
        assert names <= exposed, f"{title}: {sorted(names - exposed)} are not exposed"
        used |= names
    # the dashboard shows each headline metric the issue asked for
    for name in (
        "habroker_produce_latency_seconds_bucket",
        "habroker_pull_latency_seconds_bucket",
        "habroker_sync_wait_seconds_bucket",
        "habroker_ha_slave_lag_bytes",
        "habroker_ha_slave_lag_seconds",
        "habroker_consumer_group_lag",
        "habroker_store_disk_used_ratio",
        "brokergroup_operator_failovers_total",
        "brokergroup_operator_dledger_events_total",
        "brokergroup_operator_sweep_duration_seconds_bucket",
    ):
        assert name in used, name
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


GRAFANA_VARIABLES = {
    "$__rate_interval": "2m",
    "$__range": "1h",
    "$namespace": ".*",
    "$brokergroup": ".*",
}


def test_dashboard_queries_are_promql(promtool: str, tmp_path: Path) -> None:
    """Prometheus's own parser judges every panel query (Grafana's variables filled in): each
    becomes a recording rule, and `promtool check rules` parses them all."""
    exprs = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"{panel['title']}: an unknown variable in {expr}"
            exprs.append(expr)
    rules = [{"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout + result.stderr
    # and a query that is not PromQL is refused: the check bites
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "d",
                        "rules": [
                            {
                                "record": "dashboard:broken",
                                "expr": "sum by (le (rate(habroker_put_messages_total[5m]))",
                            }
                        ],
                    }
                ]
            }
        )
    )
    assert run_promtool(promtool, "check", "rules", str(path)).returncode != 0


def test_rules_name_only_exposed_metrics(exposed: set[str]) -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        names = set(METRIC_NAME.findall(rule["expr"]))
        assert names and names <= exposed, f"{rule['alert']}: {sorted(names - exposed)}"


# -- the chart ----------------------------------------------------------------------------------
def test_chart_renders_dashboard_rule_and_podmonitor(helm: str) -> None:
    kinds = by_kind(
        render(
            helm,
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.labels.release=prom",
        )
    )
    (dashboard,) = [c for c in kinds["ConfigMap"] if c["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "bg-system"
    assert json.loads(dashboard["data"]["brokergroup.json"]) == json.loads(DASHBOARD.read_text())

    (rule,) = kinds["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]

    (pm,) = kinds["PodMonitor"]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    (deployment,) = kinds["Deployment"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 8081}
    env = env_of(deployment)
    assert env["BROKERGROUP_METRICS_PORT"] == "8081"
    assert env["BROKERGROUP_METRICS_ADDRESS"] == "0.0.0.0"
    (policy,) = kinds["NetworkPolicy"]
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {"health", "metrics"}


def test_chart_defaults_ship_no_monitoring_objects(helm: str) -> None:
    kinds = by_kind(render(helm))
    assert "PrometheusRule" not in kinds and "PodMonitor" not in kinds
    assert not [c for c in kinds.get("ConfigMap", []) if "grafana_dashboard" in str(c)]
    # metrics off: no port, no env pointing anywhere
    (deployment,) = by_kind(render(helm, "--set", "operator.metricsPort=0"))["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert env_of(deployment)["BROKERGROUP_METRICS_PORT"] == "0"
    assert "BROKERGROUP_METRICS_ADDRESS" not in env_of(deployment)


def test_operator_settings_read_the_chart_metrics_env(helm: str) -> None:
    from brokergroup_operator.settings import Settings

    (deployment,) = by_kind(render(helm))["Deployment"]
    settings = Settings.from_env(env_of(deployment))
    assert (settings.metrics_port, settings.metrics_address) == (8081, "0.0.0.0")
