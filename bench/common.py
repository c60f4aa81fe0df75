"""What every benchmark shares: the payload, scratch space, settings, and process hygiene.

Every server a benchmark starts is registered here and stopped by PID when the benchmark ends,
fails, or the orchestrator exits (``atexit`` and SIGTERM), so a run never leaves one behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
SCRATCH_DIR = BENCH_DIR / ".scratch"  # same file system as a broker store would be on
BODY_SIZE = 1024


def payload(size: int = BODY_SIZE) -> bytes:
    """The one message body every system gets: fixed pseudo-random bytes (incompressible)."""
    return random.Random(1024).randbytes(size)


@dataclass
class Settings:
    """How big and how long: full runs vs ``--quick`` smoke runs."""

    quick: bool = False
    reps: int = 3
    duration: float = 2.0  # seconds per throughput measurement
    warmup: float = 0.3
    batches: tuple[int, ...] = (1, 32, 256)
    producers: tuple[int, ...] = (1, 4)
    sync_producers: tuple[int, ...] = (1, 8, 32)
    latency_requests: int = 3000
    limit_bytes: int = 512 << 20
    fsync_samples: int = 2000
    pull_messages: int = 200_000
    lag_seconds: float = 5.0
    lag_rate: int = 20_000  # messages/s offered during the lag benchmark
    catchup_size: str = "2G"
    scratch: Path = field(default_factory=lambda: SCRATCH_DIR)

    @classmethod
    def quick_mode(cls, scratch: Path | None = None) -> Settings:
        return cls(
            quick=True,
            reps=1,
            duration=0.3,
            warmup=0.05,
            batches=(1, 32),
            producers=(1, 2),
            sync_producers=(1, 4),
            latency_requests=50,
            limit_bytes=8 << 20,
            fsync_samples=20,
            pull_messages=2000,
            lag_seconds=0.5,
            lag_rate=2000,
            catchup_size="16M",
            scratch=scratch or SCRATCH_DIR,
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- process hygiene ----------------------------------------------------------------------------
_PROCS: dict[int, subprocess.Popen[Any]] = {}


def register(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """Remember a started server so :func:`stop_all` stops it whatever happens."""
    _PROCS[proc.pid] = proc
    return proc


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 15.0) -> None:
    """SIGTERM (SIGCONT first, in case it was paused), wait, SIGKILL if it does not go."""
    if proc is None:
        return
    _PROCS.pop(proc.pid, None)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stop_all() -> None:
    for proc in list(_PROCS.values()):
        stop(proc)


atexit.register(stop_all)


def _on_sigterm(signum: int, _frame: object) -> None:
    stop_all()
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


@contextlib.contextmanager
def scratch_dir(settings: Settings, name: str) -> Iterator[Path]:
    """A fresh directory under the scratch root, removed afterwards."""
    path = settings.scratch / f"{name}-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def machine_info() -> dict[str, Any]:
    import platform

    load = os.getloadavg()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }
