"""Smoke test of bench/rocketmq_dledger.py: the four groups (habroker's and RocketMQ 4.9.7's
DLedger and SYNC) run in a private namespace, one implementation's pair after the other's, and
take the same batch frames.

Speed is not asserted.  What is asserted: every request of every group was answered SUCCESS
(so a real Java DLedger group stores RocketMQ batch sends), each group's CPU was read from its
own processes, and the report renders the ratios.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import common, report, rocketmq, rocketmq_dledger


@pytest.mark.timeout(900)
def test_quick_run_of_the_four_groups(tmp_path: Path) -> None:
    from tests.interop import rocketmq_java as rmq

    rmq.ensure_installed([rocketmq.VERSION])  # a skip that says why; a failure under CI=true
    reason = rocketmq.unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the RocketMQ peer, but {reason}")
        pytest.skip(f"needs Java RocketMQ brokers in a private network namespace: {reason}")
    settings = common.Settings.quick_mode(tmp_path / "scratch")
    try:
        result = rocketmq_dledger.run(settings)
    finally:
        common.stop_all()
    cells = {(c["system"], c["producers"]): c for c in result["cells"]}
    assert set(cells) == {(s, p) for s in rocketmq_dledger.SYSTEMS for p in (1, 4)}
    for key, c in cells.items():
        assert c["not_ok_requests"] == 0, (key, c["not_ok_codes"])
        assert c["msgs_per_s"]["median"] > 0, key
        cpu = c["cpu_us_per_msg"]
        members = 3 if key[0].endswith("dledger") else 2
        assert len(cpu) == members + 1, cpu  # each broker process, and "all"
        assert cpu["all"]["median"] > 0, key
        assert c["loadgen_cpu_us_per_msg"]["median"] > 0, key  # its processes were reaped
        assert c["cores_used"]["median"] > 0, key
        # RocketMQ's pair is measured after habroker's pair has stopped, not beside it
        assert c["others_running"] == [], (key, c["others_running"])
    assert result["phases"] == [
        ["habroker_dledger", "habroker_sync"],
        ["rocketmq_dledger", "rocketmq_sync"],
    ]
    for producers in (1, 4):
        for impl in ("habroker", "rocketmq"):
            ceiling = cells[(f"{impl}_dledger", producers)]["ceiling_if_cpu_bound"]
            assert 0 < ceiling < 1, (impl, producers, ceiling)  # a third replica costs CPU
    for producers in (1, 4):
        for impl in ("habroker", "rocketmq"):
            assert cells[(f"{impl}_dledger", producers)]["ratio_to_sync"] > 0
        assert cells[("habroker_dledger", producers)]["ratio_to_rocketmq"] > 0
    assert result["leaders"]["rocketmq_dledger"] in rocketmq_dledger.DLEDGER_PEERS
    page = "\n".join(report.rocketmq_dledger_section(result))
    assert "| rocketmq_dledger | 4 |" in page and "quick (smoke test" in page
    assert "**Ceiling if CPU-bound**" in page
    assert "`habroker_dledger` and `habroker_sync`; then `rocketmq_dledger`" in page
    names = [g["goal"] for g in report.goals({"rocketmq_dledger": result})]
    assert sum("module rocketmq_dledger" in n for n in names) == 2


def _sync_cell(master: float, slave: float, load: float) -> dict[str, object]:
    def med(v: float) -> dict[str, float]:
        return {"median": v, "min": v, "max": v}

    return {
        "system": "habroker_sync",
        "cpu_us_per_msg": {"master": med(master), "slave": med(slave), "all": med(master + slave)},
        "loadgen_cpu_us_per_msg": med(load),
    }


def test_the_ceiling_is_the_sync_pair_with_one_more_slave() -> None:
    # master 18, slave 8, load generator 6: SYNC costs 32 us a message on the cores, a group
    # of the master and two such slaves 40, so with the cores the bound 32 / 40 = 0.8x
    assert rocketmq_dledger.replica_ceiling(_sync_cell(18.0, 8.0, 6.0)) == pytest.approx(0.8)
    # a dearer slave lowers it: 36 / 48
    assert rocketmq_dledger.replica_ceiling(_sync_cell(18.0, 12.0, 6.0)) == pytest.approx(0.75)
    cell = _sync_cell(18.0, 8.0, 6.0)
    del cell["loadgen_cpu_us_per_msg"]  # a result from before the generator was measured
    assert rocketmq_dledger.replica_ceiling(cell) is None


def test_the_report_sets_the_ratio_beside_its_ceiling() -> None:
    def med(v: float) -> dict[str, float]:
        return {"median": v, "min": v, "max": v}

    cells = [
        {
            "system": "habroker_dledger",
            "producers": 4,
            "ratio_to_sync": 0.71,
            "ceiling_if_cpu_bound": 0.78,
            "cores_used": med(1.96),
        },
        {"system": "habroker_dledger", "producers": 1, "ratio_to_sync": 0.9},  # no ceiling
    ]
    text = " ".join(report.replica_ceiling_text(cells, {"cpus": 2}))
    assert "4 producer(s): 0.71x against a ceiling of 0.78x, with 1.96 cores used" in text
    assert "1 producer(s)" not in text and "machine's 2 CPUs" in text
    assert report.replica_ceiling_text(cells[1:], {"cpus": 2}) == []
