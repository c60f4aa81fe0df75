"""The operator's /metrics: sweeps of a real broker group (habroker processes on 127.0.0.1)
reported through brokergroup_operator.metrics, served by its HTTP server and parsed by
prometheus_client's parser."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from brokergroup_operator import metrics
from brokergroup_operator.spec import GroupSpec, parse_spec
from brokergroup_operator.status import Event
from habroker.local import LocalDLedgerGroup, LocalGroup, free_port
from prometheus_client.parser import text_string_to_metric_families

from tests.brokergroup_operator.test_sweep_brokers import Harness, local_group

__all__ = ["local_group"]  # the fixture, used by name

GROUP = {"namespace": "ns", "brokergroup": "bg"}


def scrape(port: int) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        families = list(text_string_to_metric_families(resp.read().decode()))
    types = {f.name: f.type for f in families}
    values = {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}
    return types, values


async def sweep_until(
    h: Harness, spec: GroupSpec, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Sweep until the group shows what the test needs (a slave connects, or notices a stop,
    within a few polls on a loaded machine)."""
    for _ in range(100):
        status = await h.run(spec)
        if done(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the sweep never showed it: {status}")


def value(values, name: str, **labels: str) -> float | None:
    return values.get((name, frozenset(labels.items())))


async def test_sweeps_and_group_gauges_from_a_real_group(local_group: LocalGroup) -> None:
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")
    assert server is not None
    try:
        assert metrics.serve(port, "127.0.0.1") is None  # taken: refused, not raised
        await _sweeps_and_gauges(local_group, port)
    finally:
        server.shutdown()
        server.server_close()


async def _sweeps_and_gauges(local_group: LocalGroup, port: int) -> None:
    _, before = scrape(port)
    sweeps_before = value(before, "brokergroup_operator_sweeps_total") or 0
    spec = parse_spec(
        "bg",
        "ns",
        {
            "image": "x",
            "replicationMode": "SYNC",
            "slaves": 1,
            "ports": {
                "client": int(local_group.master.config["listenPort"]),
                "ha": int(local_group.master.config["haListenPort"]),
                "http": int(local_group.master.config["httpListenPort"]),
            },
        },
    )
    async with aiohttp.ClientSession() as session:
        h = Harness(local_group, session)
        status = await sweep_until(h, spec, lambda st: st["phase"] == "Running")
        metrics.observe_sweep("ns", "bg", status, 0.02)
        types, values = scrape(port)
        assert types["brokergroup_operator_sweeps"] == "counter"
        assert types["brokergroup_operator_sweep_duration_seconds"] == "histogram"
        assert types["brokergroup_operator_failovers"] == "counter"
        assert types["brokergroup_operator_reconcile_errors"] == "counter"
        assert types["brokergroup_operator_group_brokers_up"] == "gauge"
        assert value(values, "brokergroup_operator_sweeps_total") == sweeps_before + 1
        assert value(values, "brokergroup_operator_groups") == 1
        assert value(values, "brokergroup_operator_group_master_reachable", **GROUP) == 1
        assert value(values, "brokergroup_operator_group_ready", **GROUP) == 1
        assert value(values, "brokergroup_operator_group_brokers_up", **GROUP) == 2
        assert value(values, "brokergroup_operator_group_slaves_in_sync", **GROUP) == 1
        assert value(values, "brokergroup_operator_group_phase", phase="Running", **GROUP) == 1
        # a classic group has no DLedger event series
        events = "brokergroup_operator_dledger_events_total"
        assert value(values, events, reason="LeaderElected", **GROUP) is None

        # the slave goes away: one broker up, none in sync, a SYNC group no longer Ready
        local_group.slaves[0].stop()
        status = await sweep_until(h, spec, lambda st: not st["slaves"][0].get("connected"))
        metrics.observe_sweep("ns", "bg", status, 0.5)
        _, values = scrape(port)
        assert value(values, "brokergroup_operator_group_brokers_up", **GROUP) == 1
        assert value(values, "brokergroup_operator_group_slaves_in_sync", **GROUP) == 0
        assert value(values, "brokergroup_operator_group_ready", **GROUP) == 0
        assert value(values, "brokergroup_operator_group_phase", phase="Running", **GROUP) is None

    # mastership moves are counted from the failover controller's Events
    metrics.observe_events(
        "ns",
        "bg",
        [
            Event("Warning", "FailoverStarted", "m lost"),
            Event("Normal", "MasterPromoted", "s is master"),
            Event("Normal", "SwitchoverDone", "m is master"),
        ],
    )
    metrics.count_error("failover")
    _, values = scrape(port)
    assert value(values, "brokergroup_operator_failovers_total", kind="failover", **GROUP) == 1
    assert value(values, "brokergroup_operator_failovers_total", kind="switchover", **GROUP) == 1
    assert value(values, "brokergroup_operator_reconcile_errors_total", handler="failover") >= 1

    # a deleted group leaves the gauges
    metrics.forget("ns", "bg")
    _, values = scrape(port)
    assert value(values, "brokergroup_operator_groups") == 0
    assert value(values, "brokergroup_operator_group_brokers_up", **GROUP) is None


async def test_dledger_gauges_and_events_from_a_real_quorum(tmp_path: Path) -> None:
    """A real 3-peer DLedger group swept as the operator sweeps it: term, committed index,
    live peers and each peer's lag on /metrics, and the DLedger Events counted by reason. A
    paused follower turns up as one peer fewer live."""
    from tests.brokergroup_operator import test_dledger_brokers as dl

    dgroup = {"namespace": "ns", "brokergroup": "dl"}
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")
    assert server is not None
    quorum = LocalDLedgerGroup(tmp_path / "g", 3, **dl.FAST).start()
    try:
        quorum.wait_converged()
        async with aiohttp.ClientSession() as session:
            h = dl.Harness(quorum, session)

            async def serving() -> bool:
                result = await h.run()
                peers = result.status["dledger"]["peers"]
                return result.status["phase"] == "Running" and all(p["inSync"] for p in peers)

            await dl.until(serving, 30, "the quorum Running with every peer caught up")
            metrics.observe_sweep("ns", "dl", h.status, 0.02)
            types, values = scrape(port)
            # every reason counts from 0 once the group is swept, before its first event
            events = "brokergroup_operator_dledger_events_total"
            for reason in metrics.DLEDGER_REASONS:
                assert value(values, events, reason=reason, **dgroup) == 0, reason
            d = h.status["dledger"]
            assert types["brokergroup_operator_group_dledger_term"] == "gauge"
            assert value(values, "brokergroup_operator_group_dledger_term", **dgroup) == d["term"]
            assert (
                value(values, "brokergroup_operator_group_dledger_committed_index", **dgroup)
                == d["committedIndex"]
            )
            assert value(values, "brokergroup_operator_group_dledger_peers_live", **dgroup) == 3
            for i in range(3):
                lag = "brokergroup_operator_group_dledger_peer_lag_entries"
                assert value(values, lag, pod=f"bg-peers-{i}", **dgroup) == 0

            follower = next(p for p in quorum.peers if p is not quorum.leader())
            follower.pause()
            try:

                async def noticed() -> bool:
                    result = await h.run()
                    return sum(1 for p in result.status["dledger"]["peers"] if p["live"]) == 2

                await dl.until(noticed, 30, "the leader seeing the paused follower not live")
            finally:
                follower.resume()
            metrics.observe_sweep("ns", "dl", h.status, 0.02)
            _, values = scrape(port)
            assert value(values, "brokergroup_operator_group_dledger_peers_live", **dgroup) == 2
        # the sweep's and the leader daemon's Events, counted by reason (not as failovers)
        reasons = ("LeaderElected", "LeadershipTransferred", "PeerBehind", "SomethingElse")
        metrics.observe_events("ns", "dl", [Event("Normal", r, "a message") for r in reasons])
        _, values = scrape(port)
        assert value(values, events, reason="LeaderElected", **dgroup) == 1
        assert value(values, events, reason="LeadershipTransferred", **dgroup) == 1
        assert value(values, events, reason="PeerBehind", **dgroup) == 1
        assert value(values, events, reason="SomethingElse", **dgroup) is None
        assert (
            value(values, "brokergroup_operator_failovers_total", kind="failover", **dgroup) is None
        )
        metrics.forget("ns", "dl")
        _, values = scrape(port)
        assert value(values, "brokergroup_operator_group_dledger_term", **dgroup) is None
    finally:
        quorum.stop()
        server.shutdown()
        server.server_close()
