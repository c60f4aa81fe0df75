"""``bench.run`` waits for a quiet machine before each module, and the report says how quiet."""

from __future__ import annotations

import os

from bench import common, report


def test_a_quiet_machine_is_not_waited_for() -> None:
    out = common.wait_until_quiet(max_load=os.getloadavg()[0] + 1000, timeout_s=5, poll_s=0.01)
    assert out["quiet"] is True
    assert out["waited_s"] < 1


def test_a_busy_machine_is_waited_for_until_the_timeout() -> None:
    out = common.wait_until_quiet(max_load=-1, timeout_s=0.3, poll_s=0.05)
    assert out["quiet"] is False
    assert out["waited_s"] >= 0.3
    assert out["limit"] == -1


def test_the_default_limit_is_half_the_cpus() -> None:
    out = common.wait_until_quiet(timeout_s=0)
    assert out["limit"] == (os.cpu_count() or 2) / 2


def test_the_cpu_probe_times_a_fixed_loop() -> None:
    out = common.wait_until_quiet(timeout_s=0)
    assert 1 < out["cpu_probe_ms"] < 60_000
    # four times the work takes longer than the best of three of the usual loop
    assert common.cpu_probe_ms(1, 4 * common.PROBE_ITERATIONS) > out["cpu_probe_ms"]


def test_the_report_names_each_wait() -> None:
    results = {
        "produce": {
            "quiet_wait": {
                "waited_s": 12.3,
                "loadavg_1m": 0.8,
                "limit": 1,
                "quiet": True,
                "cpu_probe_ms": 281.4,
            }
        },
        "rocketmq": {
            "quiet_wait": {"waited_s": 120, "loadavg_1m": 2.5, "limit": 1, "quiet": False}
        },
        "pull": {"rows": []},
    }
    text = "\n".join(report._quiet_waits(results))
    assert "produce 12 s → 0.8, probe 281 ms" in text
    assert "rocketmq 120 s → 2.5 (still busy: the wait timed out)" in text  # no probe: older JSON
    assert "pull" not in text
    assert report._quiet_waits({"pull": {"rows": []}}) == []
