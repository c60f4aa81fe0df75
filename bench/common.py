"""What every benchmark shares: the payload, scratch space, settings, and process hygiene.

Every server a benchmark starts is registered here and stopped by PID when the benchmark ends,
fails, or the orchestrator exits (``atexit`` and SIGTERM), so a run never leaves one behind.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
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


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (/proc/<pid>/stat), all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def wait_until_quiet(
    max_load: float | None = None, timeout_s: float = 120.0, poll_s: float = 5.0
) -> dict[str, Any]:
    """Wait until the 1-minute load average is at most ``max_load`` (default: half the CPUs),
    at most ``timeout_s``.  A module started right after another heavy job (the previous
    module's JVMs, a test run) measures that job's tail too: on two CPUs a CPU-bound cell
    loses more to it than a latency-bound one, which skews ratios taken inside the run."""
    limit = max_load if max_load is not None else (os.cpu_count() or 2) / 2
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    while load > limit and time.monotonic() - t0 < timeout_s:
        time.sleep(poll_s)
        load = os.getloadavg()[0]
    return {
        "waited_s": round(time.monotonic() - t0, 1),
        "loadavg_1m": round(load, 2),
        "limit": limit,
        "quiet": load <= limit,
        "cpu_probe_ms": cpu_probe_ms(),
    }


#: the probe's work: a RocketMQ-sized record header packed and a CRC of 64 bytes taken, this often
PROBE_ITERATIONS = 300_000


def cpu_probe_ms(rounds: int = 3, iterations: int = PROBE_ITERATIONS) -> float:
    """Milliseconds of a fixed single-threaded Python loop, the best of ``rounds`` (~0.3 s
    each here): how fast this VM's CPU is at the moment.

    The load average cannot say it: on a slow host the same idle VM shows the same load, and
    every single-threaded server (habroker, Redis) loses alike (the 2026-11-29 runs: Redis's
    pipelined XADD 40k against 70k two days before). With the probe beside each module a
    figure from a slow moment can be told from a regression.
    """
    header = struct.Struct("<iiiiqq")
    buf = bytearray(1 << 16)
    chunk = bytes(64)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        crc = 0
        for i in range(iterations):
            header.pack_into(buf, (i * 32) & 0xFFC0, i, i, i, i, i, i)
            crc = zlib.crc32(chunk, crc)
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


# -- one module run on its own ------------------------------------------------------------------
def settings_for(args: argparse.Namespace) -> Settings:
    """Settings from the options every runner shares (--quick, --reps, --duration, --scratch)."""
    scratch = getattr(args, "scratch", None) or SCRATCH_DIR
    s = Settings.quick_mode(scratch) if args.quick else Settings(scratch=scratch)
    if args.reps:
        s.reps = args.reps
    if args.duration:
        s.duration = args.duration
    return s


def standalone_parser(prog: str, doc: str | None, out: str) -> argparse.ArgumentParser:
    """``python -m bench.NAME``'s options: --quick, --reps, --duration, --out, --scratch."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small and short: a smoke test")
    p.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    p.add_argument("--duration", type=float, help="seconds per throughput measurement")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / out, help="the JSON to write")
    p.add_argument("--scratch", type=Path, default=SCRATCH_DIR)
    return p


def run_standalone(args: argparse.Namespace, measure: Callable[[Settings], dict[str, Any]]) -> int:
    """Run one module's measurement, stop every server it started, write its JSON."""
    install_signal_handlers()
    try:
        result = measure(settings_for(args))
    finally:
        stop_all()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result.get("skipped") or "done"), file=sys.stderr)
    return 0
