"""Experiment (issue 17, "the way past one event loop"): do HA frames sent by a native thread
that never takes the GIL let habroker's master use the second core?

The Python writer thread of ``bench.experiments.answer_thread`` lost to its GIL hand-offs, and
bench/analysis.md named a native thread as the way that could win. Here each HA connection of
the patched master gets a pthread (``native_ha_sender.pyx``, compiled with Cython into the
patch directory): the write loop hands it (offset, a dup of the commit-log file's fd, position,
size) under a mutex and goes on; the thread sends the 12-byte header with MSG_MORE and then
``sendfile``s the range, polling on EAGAIN, in submission order. Heartbeats take the same queue,
so frames cannot overtake each other. At most 4 MiB wait in a connection's queue (the loop
sleeps 0.5 ms while more do); the thread starts and ends with the connection's writer. A
measurement patch (``habroker.ha.ha_connection.send_frame`` and ``HAConnection._write_loop``
wrapped in one of two otherwise identical groups), not a product design: it skips TLS HA.

    python -m bench.experiments.native_ha_sender [--reps 8]   # needs Cython (the dev extra)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from bench import common
from bench.experiments import patched

CELLS = ((32, 1), (32, 4), (1, 4))
PYX = Path(__file__).with_suffix(".pyx")
PATCH = textwrap.dedent(
    """
    import os

    if os.environ.get("BENCH_NATIVE_HA_SENDER"):
        import asyncio

        import habroker.ha.ha_connection as ha_connection
        from native_ha_sender import HASender

        senders = {}
        QUEUE_LIMIT = 4 << 20
        write_loop = ha_connection.HAConnection._write_loop

        async def _write_loop(self):
            senders[id(self.sock)] = sender = HASender(self.sock.fileno())
            try:
                await write_loop(self)
            finally:
                del senders[id(self.sock)]
                sender.close()

        async def send_frame(loop, sock, offset, file_fd, position, size):
            sender = senders[id(sock)]
            while sender.queued > QUEUE_LIMIT:
                await asyncio.sleep(0.0005)
            sender.submit(offset, file_fd, position, size)

        ha_connection.HAConnection._write_loop = _write_loop
        ha_connection.send_frame = send_frame
    """
)


def prepare(patch_dir: Path) -> None:
    """The patch and its compiled thread, built here so nothing of it lands in habroker."""
    try:
        import Cython  # noqa: F401
    except ImportError as exc:
        raise SystemExit("bench.experiments.native_ha_sender needs Cython (the dev extra)") from exc
    (patch_dir / "sitecustomize.py").write_text(PATCH)
    shutil.copy(PYX, patch_dir / PYX.name)
    subprocess.run(
        [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-q", PYX.name],
        cwd=patch_dir,
        check=True,
    )


def run(settings: common.Settings) -> dict[str, Any]:
    return patched.compare(
        settings,
        name="native-ha-sender",
        prepare=prepare,
        flag="BENCH_NATIVE_HA_SENDER",
        thread_name="ha-sender",
        modes=("SYNC", "ASYNC"),
        cells=CELLS if not settings.quick else ((32, 2),),
    )


def main(argv: list[str] | None = None) -> int:
    return patched.main(argv, "bench.experiments.native_ha_sender", __doc__, run)


if __name__ == "__main__":
    sys.exit(main())
