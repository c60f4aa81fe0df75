"""The core-scaling benchmark's harness (bench/cores.py): its CPU plan, its pinning, and a quick
run against real habroker and RocketMQ 4.9.7 masters. Speed is not asserted; that each master
really ran on the CPUs it was given, and answered every request, is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import cores

ROOT = Path(__file__).resolve().parents[2]

_SPIN = """
import threading, time
def spin():
    while True:
        pass
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
time.sleep(60)
"""


def test_configurations_give_the_master_the_last_cpus_and_the_load_the_first_half() -> None:
    assert cores.configurations([0, 1]) == [
        {"master": [1], "load": [0]},
        {"master": [0, 1], "load": [0]},
    ]
    eight = list(range(8))
    assert [c["master"] for c in cores.configurations(eight)] == [[7], [6, 7], eight]
    assert {tuple(c["load"]) for c in cores.configurations(eight)} == {(0, 1, 2, 3)}
    assert cores.configurations([3]) == [{"master": [3], "load": [3]}]


def test_pin_moves_every_thread_and_cpu_seconds_counts_them_all() -> None:
    """A real process with three threads: each is pinned, and its CPU time is the sum of all."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    proc = subprocess.Popen([sys.executable, "-c", _SPIN])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cores.pin(proc.pid, [cpu]) >= 3
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            assert os.sched_getaffinity(int(tid)) == {cpu}, tid
        before = cores.cpu_seconds(proc.pid)
        time.sleep(1.0)
        used = cores.cpu_seconds(proc.pid) - before
        # two spinning threads sharing one CPU: about one CPU second, never near two
        assert 0.3 < used < 1.5, used
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(420)
def test_quick_run_pins_both_masters(tmp_path: Path) -> None:
    """``python -m bench.cores --quick`` with real Java and habroker groups."""
    from tests.interop import rocketmq_java as rmq

    rmq.ensure_installed(["4.9.7"])
    if len(os.sched_getaffinity(0)) < 2:
        reason = (
            "this process may use one CPU only; pinning a master to 1 and then 2 CPUs needs two"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI machines have two CPUs or more, but {reason}")
        pytest.skip(reason)
    out = tmp_path / "cores.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cores",
            "--quick",
            "--out",
            str(out),
            "--scratch",
            str(tmp_path / "scratch"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert "skipped" not in data, data
    cells = data["cells"]
    assert {c["system"] for c in cells} == {"habroker", "rocketmq"}
    assert {c["cores"] for c in cells} == {len(c["master"]) for c in data["configurations"]}
    for c in cells:
        assert c["master_affinity"] == c["master_cpus"], c
        assert c["not_ok_requests"] == 0 and c["msgs_per_s"]["median"] > 0, c
        assert c["cores_used"]["median"] > 0, c
    # both masters took unmeasured load before the first cell
    assert set(data["warm_up"]) == {"habroker", "rocketmq"}, data.get("warm_up")
    assert all(w["msgs_per_s"] > 0 for w in data["warm_up"].values()), data["warm_up"]
    # the JVM has many threads, all pinned
    assert min(c["master_threads"] for c in cells if c["system"] == "rocketmq") > 10
