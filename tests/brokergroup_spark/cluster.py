"""A real Spark standalone cluster on 127.0.0.1: one Master and Workers, each its own JVM.

Started with the installed pyspark's own launcher (``bin/spark-class``), as ``sbin/start-*.sh``
would, but in the foreground under our control: every daemon in a process group of its own
(executors and their Python workers are the Workers' children, in the same group), stopped by
that group at the end. Everything binds to 127.0.0.1 (``SPARK_LOCAL_IP`` and ``--host``); the
web UIs too (the Master's is how we see the Workers register).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyspark
from habroker.local import free_port

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
# JVM flags that halve start-up on these machines (docs/spark.md, notes: spark.md)
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def daemon_env(log_dir: Path) -> dict[str, str]:
    """The daemons' (and so the executors') environment: ours, with no PYSPARK_* variables and
    without this venv's bin on PATH, as on a machine where ``python3`` is not the driver's
    interpreter: executors get the right Python only if the application says which."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        SPARK_LOG_DIR=str(log_dir),
        SPARK_DAEMON_MEMORY="256m",
        # no REST submission server (it would listen on the fixed port 6066)
        SPARK_DAEMON_JAVA_OPTS=f"{QUICK_JVM} -Dspark.master.rest.enabled=false",
        SPARK_NO_DAEMONIZE="1",
    )
    return env


@dataclass
class StandaloneCluster:
    """``spark://127.0.0.1:port`` with ``workers`` Workers of ``cores`` cores each."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self._logs.append(log)
        proc = subprocess.Popen(
            [str(SPARK_CLASS), *args],
            env=daemon_env(self.root),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,  # its own process group: executors included
        )
        self.procs.append(proc)

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
            )
            for i in range(self.workers):
                work = self.root / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{i}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(free_port()),
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(work),
                        self.url,
                    ],
                )
            self.wait_for_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, Any]:
        """The Master's JSON status page (what its web UI shows)."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            status: dict[str, Any] = json.load(answer)
        return status

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers = self.status().get("workers", [])
        except OSError:
            return []
        return [w for w in workers if w.get("state") == "ALIVE"]

    def wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited ({proc.args!r}): {self.logs()}")
            if len(self.alive_workers()) == self.workers:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.workers} workers not registered in {timeout} s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        """Stop every daemon we started, by its process group; workers first."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            # executors and Python workers of the group outlive a SIGTERMed Worker briefly
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
