"""Run a generator ahead of its consumer in a thread, a bounded number of items ahead.

Used for pulls: the next HTTP request is in flight while the current response is decoded. Items
and the producer's exception cross over through a bounded queue; closing the consumer early
(Spark stops reading after a ``limit``) stops the producer at its next item.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


def ahead(source: Iterator[T], depth: int = 2) -> Iterator[T]:
    items: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in source:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(exc)

    worker = threading.Thread(target=run, name="brokergroup-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        worker.join(timeout=30)
