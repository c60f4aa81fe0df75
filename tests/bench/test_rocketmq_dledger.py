"""Smoke test of bench/rocketmq_dledger.py: the four groups (habroker's and RocketMQ 4.9.7's
DLedger and SYNC) run side by side in a private namespace and take the same batch frames.

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
    for producers in (1, 4):
        for impl in ("habroker", "rocketmq"):
            assert cells[(f"{impl}_dledger", producers)]["ratio_to_sync"] > 0
        assert cells[("habroker_dledger", producers)]["ratio_to_rocketmq"] > 0
    assert result["leaders"]["rocketmq_dledger"] in rocketmq_dledger.DLEDGER_PEERS
    page = "\n".join(report.rocketmq_dledger_section(result))
    assert "| rocketmq_dledger | 4 |" in page and "quick (smoke test" in page
    names = [g["goal"] for g in report.goals({"rocketmq_dledger": result})]
    assert sum("module rocketmq_dledger" in n for n in names) == 2
