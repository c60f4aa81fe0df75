"""An event loop of one's own, and async work run ahead of a blocking consumer.

Spark calls a data source from plain threads, and the remoting client is asyncio: each reader
or writer runs its client on a private loop in a daemon thread (:class:`LoopThread`) and closes
both when it is done, so no loop is ever shared between readers or touched from two threads.

:func:`ahead` runs an async iterator (the pulls of one queue range) on that loop, a bounded
number of items ahead of the thread that consumes them: the broker prepares the next answers
while this one is decoded and handed to Spark. Closing the consumer early (Spark stops reading
after a ``limit``) cancels the pulls still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_DONE = object()


class LoopThread:
    """An asyncio event loop running in its own daemon thread until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result in the calling thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()


def ahead(runner: LoopThread, source: AsyncIterator[T], depth: int = 4) -> Iterator[T]:
    """The items of ``source`` (iterated on ``runner``'s loop), up to ``depth`` ahead."""

    async def start() -> tuple[asyncio.Queue[object], asyncio.Task[None]]:
        items: asyncio.Queue[object] = asyncio.Queue(maxsize=depth)

        async def fill() -> None:
            try:
                async for item in source:
                    await items.put(item)
                await items.put(_DONE)
            except Exception as exc:  # handed to the consumer, which re-raises it
                await items.put(exc)

        return items, asyncio.create_task(fill(), name="brokergroup-prefetch")

    async def stop(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()

    items, task = runner.run(start())
    try:
        while True:
            item = runner.run(items.get())
            if item is _DONE:
                return
            if isinstance(item, Exception):
                raise item
            yield item  # type: ignore[misc]
    finally:
        runner.run(stop(task), 30)
