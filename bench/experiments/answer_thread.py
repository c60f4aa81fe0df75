"""Experiment (issue 17, "the way past one event loop"): does writing the client port's answers
from a second thread let habroker's master use the second core?

The reply ``send()`` is the largest single cost of a master at batch 1 and 32
(bench/analysis.md). ``os.write`` releases the GIL, so a thread doing the writes could run the
kernel's loopback send and the consumer's wake-up on the other CPU while the event loop goes on.
The price is a hand-off per answer (a queue put, a futex wake, the GIL taken by the writer).

Two ASYNC master + slave groups of the same code run side by side; in one, a ``sitecustomize``
written to a scratch directory (and put on that broker's PYTHONPATH only) replaces
``Channel.write`` so that an answer to a connection with nothing else pending goes to a writer
thread. It is a measurement patch, not a product design: it does not keep a connection's order
if the loop writes to it while the thread still holds an answer (the load generator keeps one
request outstanding per connection, so that cannot happen here), and it skips TLS.

    python -m bench.experiments.answer_thread [--reps 5]   # bench/results/answer_thread.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from bench import common, loadgen, rocketmq, servers
from bench.cores import cpu_seconds
from bench.event_loop import job
from bench.stats import ratio, summary

CELLS = ((1, 4), (32, 4), (256, 4))
PATCH = textwrap.dedent(
    """
    import os

    if os.environ.get("BENCH_ANSWER_THREAD"):
        import queue
        import select
        import threading

        import habroker.remoting.channel as channel

        answers = queue.SimpleQueue()

        def writer():
            import ctypes

            # the OS thread name, so the benchmark can see the patch took (PR_SET_NAME)
            ctypes.CDLL(None).prctl(15, b"answer-writer", 0, 0, 0)
            while True:
                fd, parts = answers.get()
                view = memoryview(b"".join(parts))
                try:
                    while view:
                        try:
                            view = view[os.write(fd, view):]
                        except BlockingIOError:
                            select.select([], [fd], [], 1.0)
                except OSError:
                    pass  # the loop sees the connection fail on its next read

        threading.Thread(target=writer, daemon=True, name="answer-writer").start()

        def write(self, cmd):
            t = self.transport
            if t is None or t.is_closing():
                return
            parts = cmd.encode()
            sock = t.get_extra_info("socket")
            if sock is not None and t.get_write_buffer_size() == 0 and t.get_extra_info("sslcontext") is None:
                answers.put((sock.fileno(), parts))
                return
            t.writelines(parts)

        channel.Channel.write = write
    """
)


def run(settings: common.Settings) -> dict[str, Any]:
    started = time.monotonic()
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": common.machine_info(),
        "reps": settings.reps,
        "duration_s": settings.duration,
        "cells": [],
    }
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(common.scratch_dir(settings, "answer-thread"))
        patch_dir = root / "patch"
        patch_dir.mkdir()
        (patch_dir / "sitecustomize.py").write_text(PATCH)
        groups = {
            "loop": stack.enter_context(
                servers.habroker_group(root / "loop", "ASYNC", **rocketmq.STORE)
            )
        }
        saved = dict(os.environ)
        os.environ["BENCH_ANSWER_THREAD"] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(patch_dir), saved.get("PYTHONPATH")) if p
        )
        try:
            groups["thread"] = stack.enter_context(
                servers.habroker_group(root / "thread", "ASYNC", **rocketmq.STORE)
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
        threads = {
            name: sorted(
                Path(f"/proc/{g.master.proc.pid}/task/{t}/comm").read_text().strip()
                for t in os.listdir(f"/proc/{g.master.proc.pid}/task")
            )
            for name, g in groups.items()
            if g.master.proc is not None
        }
        out["master_threads"] = threads
        if "answer-writer" not in threads["thread"] or "answer-writer" in threads["loop"]:
            raise RuntimeError(f"the patch is not where it should be: {threads}")
        for batch, producers in CELLS if not settings.quick else ((32, 2),):
            print(f"[answer_thread] batch {batch} producers {producers}", flush=True)
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in groups}
            for rep in range(settings.reps):
                order = list(groups) if rep % 2 == 0 else list(groups)[::-1]
                for name in order:
                    g = groups[name]
                    assert g.master.proc is not None
                    pid = g.master.proc.pid
                    port = int(g.master.config["listenPort"])
                    cpu0, t0 = cpu_seconds(pid), time.monotonic()
                    r = loadgen.run(job(port, batch, producers, settings))
                    used = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
                    servers.habroker_reset(g)
                    if r["not_ok"]:
                        raise RuntimeError(f"{name}: {r['not_ok']} requests not answered SUCCESS")
                    runs[name].append((float(r["msgs_per_s"]), used))
            cell: dict[str, Any] = {"batch": batch, "producers": producers}
            for name, values in runs.items():
                cell[name] = {
                    "msgs_per_s": summary([v[0] for v in values]),
                    "cores_used": summary([v[1] for v in values]),
                }
            cell["thread_over_loop_pairs"] = [
                ratio(t[0], lp[0]) for lp, t in zip(runs["loop"], runs["thread"], strict=True)
            ]
            cell["thread_over_loop"] = ratio(
                cell["thread"]["msgs_per_s"]["median"], cell["loop"]["msgs_per_s"]["median"]
            )
            print(f"[answer_thread] {json.dumps(cell['thread_over_loop_pairs'])}", flush=True)
            out["cells"].append(cell)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = common.standalone_parser(
        "python -m bench.experiments.answer_thread", __doc__, "answer_thread.json"
    )
    args: argparse.Namespace = p.parse_args(argv)
    return common.run_standalone(args, run)


if __name__ == "__main__":
    sys.exit(main())
