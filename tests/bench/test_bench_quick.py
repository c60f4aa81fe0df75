"""Smoke test of the benchmark code: ``python -m bench.run --quick`` end to end.

It proves the harness works (servers start and stop, load generators, JSON, plots, markdown);
it asserts nothing about speed. Redis figures appear only where redis-server is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_quick_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    docs = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--quick",
            "--results-dir",
            str(results),
            "--docs",
            str(docs),
            "--scratch",
            str(tmp_path / "scratch"),
            "--max-seconds",
            "480",
            "--no-rocketmq",  # tests/bench/test_remoting_load.py covers the Java peer's path
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("limits", "produce", "sync_async", "lag", "pull", "summary"):
        assert (results / f"{name}.json").exists(), name
    assert (results / "produce.png").exists()
    text = docs.read_text()
    assert "## Goals" in text and "## Produce throughput" in text

    produce = json.loads((results / "produce.json").read_text())
    habroker = [c for c in produce["cells"] if c["system"].startswith("habroker")]
    assert habroker
    for cell in habroker:
        # every request of every system got a stored, replicated (SYNC) answer
        assert cell["requests"] > 0, cell
        assert cell["not_ok_requests"] == 0, cell
    limits = json.loads((results / "limits.json").read_text())
    assert limits["seq_read_32KiB"]["median"] > 0
    for messages in ("32", "1024"):
        answers = limits["pull_transport"]["answers"][messages]
        assert answers["answer_bytes"] == int(messages) * 1130
        for conns in ("1", "4"):
            assert answers["connections"][conns]["answers_per_s"]["median"] > 0
    assert "pull transport: 342 B request → 36,160 B" in text
    assert "pull transport: 342 B request → 1,157,120 B" in text
    assert "| sequential read, 32 KiB reads (page cache) |" in text
    lag = json.loads((results / "lag.json").read_text())
    assert lag["systems"]["habroker_async"]["runs"][0]["samples"] > 0
    pull = json.loads((results / "pull.json").read_text())
    assert pull["1"]["msgs_per_s"]["median"] > 0
    dledger = json.loads((results / "dledger.json").read_text())
    for cell in dledger["throughput"]:
        assert cell["not_ok_requests"] == 0 and cell["msgs_per_s"]["median"] > 0, cell
    for label, rounds in dledger["failover"].items():
        assert rounds["pauseSeconds"] and rounds["acknowledged"] > 0, label
        assert set(rounds["acknowledgedMissing"].values()) == {0}, rounds
    assert (results / "dledger.png").exists()
    # nothing left running: every server was started by PID and stopped
    leftover = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.strip()
    assert not leftover, leftover


def test_pulls_are_held_against_the_sequential_read_limit_of_the_run() -> None:
    from bench.report import goals

    small = {"mode": "ASYNC", "system": "habroker", "consumers": 4, "max_per_pull": 32}
    large = {**small, "max_per_pull": 1024, "mb_per_s": {"median": 2000.0}}
    small["mb_per_s"] = {"median": 90.0}
    results = {
        "limits": {"seq_read_32KiB": {"median": 6000.0}},
        "rocketmq": {"modes": {"ASYNC": {"cells": [], "pull": [small, large]}}},
    }
    rows = {g["goal"]: g for g in goals(results)}
    row = rows["issue 17: pull (PULL_MESSAGE, 32 a pull) / sequential read limit, 4 consumer(s)"]
    assert row["value"] == 90.0 / 6000.0 and row["target"] == 0.3 and row["met"] is False
    row = rows["issue 17: pull (PULL_MESSAGE, 1024 a pull) / sequential read limit, 4 consumer(s)"]
    assert row["value"] == 2000.0 / 6000.0 and row["met"] is True
    del results["limits"]
    rows = {g["goal"]: g for g in goals(results)}
    assert rows["issue 17: pull (PULL_MESSAGE) / sequential read limit"]["value"] is None


def test_pulls_are_set_beside_the_bare_pull_transport_of_the_run() -> None:
    from bench.report import rocketmq_section
    from bench.stats import summary

    def cell(system: str, per_pull: int, mb: float) -> dict[str, object]:
        return {
            "mode": "ASYNC",
            "system": system,
            "consumers": 4,
            "max_per_pull": per_pull,
            "msgs_per_s": summary([mb * 1e6 / 1024]),
            "mb_per_s": summary([mb]),
            "ratio_to_rocketmq": 1.25,
        }

    pulls = [cell("habroker", 32, 500.0), cell("habroker", 1024, 3000.0)]
    data = {"modes": {"ASYNC": {"cells": [], "pull": pulls}}}

    def transport(answers: float, mb: float) -> dict[str, object]:
        return {"4": {"answers_per_s": summary([answers]), "mb_per_s": summary([mb])}}

    limits = {
        "seq_read_32KiB": {"median": 8000.0},
        "pull_transport": {
            "request_bytes": 342,
            "answers": {
                "32": {"answer_bytes": 36160, "connections": transport(61035.0, 2000.0)},
                "1024": {"answer_bytes": 1157120, "connections": transport(4768.0, 5000.0)},
            },
        },
    }
    text = "\n".join(rocketmq_section(data, limits))
    # each pull size against the bare transport of its own answer size and the read limit:
    # 500 / 2,000 and 500 / 8,000 MB/s; 3,000 / 5,000 and 3,000 / 8,000 MB/s
    assert "| habroker | 32 | 4 |" in text and "| 1.25x | 0.25x | 0.06x |" in text
    assert "| habroker | 1024 | 4 |" in text and "| 1.25x | 0.60x | 0.38x |" in text
    assert (
        "(36,160 bytes), 4 connection(s): 61,035 answers/s = 2,000 MB/s of payload, 0.25x" in text
    )
    assert "(1,157,120 bytes), 4 connection(s): 4,768 answers/s = 5,000 MB/s" in text
    # without the limits module the column stays, empty, and no sentence is made up
    bare = "\n".join(rocketmq_section(data))
    assert "vs. pull transport" in bare and "answers/s" not in bare
