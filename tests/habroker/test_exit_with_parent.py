"""``habroker serve --exit-with-parent`` (how habroker.local starts every broker): a harness
SIGKILLed before its cleanup ran leaves no broker behind holding its ports and store."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HARNESS = """
import json, sys, time
from habroker.local import LocalBroker
broker = LocalBroker(sys.argv[1], serve_args=sys.argv[2:]).start()
print(json.dumps({"pid": broker.proc.pid, "port": broker.config["httpListenPort"]}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running, and not a zombie its new parent has yet to reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _harness(root: Path, *serve_args: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(root), *serve_args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _kill_harness(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)  # no cleanup runs: LocalBroker.stop is never called
    proc.wait(10)


def test_a_broker_shuts_down_when_its_harness_is_killed(tmp_path: Path) -> None:
    proc, started = _harness(tmp_path / "b")
    broker = started["pid"]
    _kill_harness(proc)
    deadline = time.monotonic() + 20
    while _alive(broker) and time.monotonic() < deadline:
        time.sleep(0.1)
    log = (tmp_path / "b" / "broker.log").read_text()
    assert not _alive(broker), f"the broker outlived its harness; log:\n{log[-2000:]}"
    assert "exited; shutting down" in log
    with socket.create_server(("127.0.0.1", started["port"])):
        pass  # its HTTP port is free again
