"""Slave catch-up vs the loopback limit: runs the HA engineer's ``bench.ha_catchup``.

That module measures, in one run and alternating, a fresh slave copying a backlog from a master
and the loopback limit (sendfile → recv_into → file write); this wrapper only runs it bounded in
time (its process group is killed on timeout) and returns its JSON.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import common


def available() -> bool:
    return importlib.util.find_spec("bench.ha_catchup") is not None


def run(settings: common.Settings, out: Path, timeout: float = 900) -> dict[str, Any]:
    if not available():
        return {"skipped": "bench/ha_catchup.py has not landed on this branch yet"}
    # a run is ~5 s and the loopback limit alone spreads 4x between runs: twice each phase order
    runs = "1" if settings.quick else str(max(settings.reps, 6))
    cmd = [sys.executable, "-m", "bench.ha_catchup", "--size", settings.catchup_size]
    work = settings.scratch / f"catchup-{os.getpid()}"
    cmd += ["--runs", runs, "--out", str(out), "--workdir", str(work)]
    proc = subprocess.Popen(cmd, cwd=common.ROOT, start_new_session=True)
    common.register(proc)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"error": f"ha_catchup did not finish within {timeout:.0f} s"}
    finally:
        common.stop(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own children, should any be left
        shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        return {"error": f"ha_catchup exited with {code}"}
    result: dict[str, Any] = json.loads(out.read_text())
    return result
