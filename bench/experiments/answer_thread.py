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

import sys
import textwrap
from typing import Any

from bench import common
from bench.experiments import patched

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
    return patched.compare(
        settings,
        name="answer-thread",
        prepare=lambda d: (d / "sitecustomize.py").write_text(PATCH),
        flag="BENCH_ANSWER_THREAD",
        thread_name="answer-writer",
        modes=("ASYNC",),
        cells=CELLS if not settings.quick else ((32, 2),),
    )


def main(argv: list[str] | None = None) -> int:
    return patched.main(argv, "bench.experiments.answer_thread", __doc__, run)


if __name__ == "__main__":
    sys.exit(main())
