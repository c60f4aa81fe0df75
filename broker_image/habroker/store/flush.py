"""Flush services: when commit-log bytes reach the disk.

ASYNC_FLUSH: FlushCommitLogService syncs every flushIntervalCommitLog ms once at least
flushCommitLogLeastPages pages are dirty (and at least every 10 s regardless).
SYNC_FLUSH: GroupCommitService; producers park on wait_flushed and one fdatasync releases every
producer whose bytes it covered (group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from habroker.store.commit_log import CommitLog

log = logging.getLogger(__name__)

PAGE_SIZE = 4096
THOROUGH_INTERVAL = 10.0  # s; RocketMQ's flushPhysicQueueThoroughInterval


class _Service(ABC):
    """A background loop on the event loop, stopped cooperatively (never mid-fdatasync)."""

    name = "service"

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_guarded(), name=self.name)

    async def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _wake(self) -> None:  # noqa: B027 - a hook: only services that park on an event override it
        """Rouse a service parked on its own event so that it sees the stop."""

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when the service should stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    async def _run_guarded(self) -> None:
        while not self._stop.is_set():
            try:
                await self.run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed; restarting it in 1 s", self.name)
                if await self._sleep(1.0):
                    return

    @abstractmethod
    async def run(self) -> None:
        """The service's loop; returns when the service stops."""


class FlushCommitLogService(_Service):
    """ASYNC_FLUSH: periodic fdatasync of the commit log."""

    name = "flush-commitlog"

    def __init__(
        self,
        commit_log: CommitLog,
        interval_ms: Callable[[], int],
        least_pages: Callable[[], int],
        flush: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__()
        self.commit_log = commit_log
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.flush = flush
        self._last_thorough = time.monotonic()

    async def run(self) -> None:
        while not await self._sleep(self.interval_ms() / 1000):
            least = self.least_pages() * PAGE_SIZE
            now = time.monotonic()
            if now - self._last_thorough >= THOROUGH_INTERVAL:
                least = 0
                self._last_thorough = now
            dirty = self.commit_log.queue.unflushed_bytes()
            if dirty > 0 and dirty >= least:
                await self.flush()


class GroupCommitService(_Service):
    """SYNC_FLUSH: waiters register their end offset; each round one flush serves them all."""

    name = "group-commit"

    def __init__(self, commit_log: CommitLog, flush: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self.commit_log = commit_log
        self.flush = flush
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._pending = asyncio.Event()
        self.rounds = 0  # flush rounds that released waiters

    def _wake(self) -> None:
        self._pending.set()

    async def wait(self, offset: int, timeout: float) -> bool:  # noqa: ASYNC109
        if self.commit_log.flushed_offset >= offset:
            return True
        if self._stop.is_set():
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        self._pending.set()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return False

    async def run(self) -> None:
        while True:
            await self._pending.wait()
            self._pending.clear()
            if not self._waiters:
                if self._stop.is_set():
                    return
                continue
            before = self.commit_log.flushed_offset
            await self.flush()
            self.rounds += 1
            self._release(self.commit_log.flushed_offset)
            if self._waiters and self.commit_log.flushed_offset > before:
                self._pending.set()  # producers arrived during the sync: next round
            if self._stop.is_set():
                self._release(self.commit_log.flushed_offset, final=True)
                return

    def _release(self, flushed: int, final: bool = False) -> None:
        keep: list[tuple[int, asyncio.Future[bool]]] = []
        for offset, fut in self._waiters:
            if fut.done():
                continue
            if offset <= flushed:
                fut.set_result(True)
            elif final:
                fut.set_result(False)
            else:
                keep.append((offset, fut))
        self._waiters = keep


class FlushConsumeQueueService(_Service):
    """Periodic flush of consume queues, then the checkpoint (which records what is durable)."""

    name = "flush-consumequeue"

    def __init__(
        self, interval_ms: Callable[[], int], flush: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__()
        self.interval_ms = interval_ms
        self.flush = flush

    async def run(self) -> None:
        while not await self._sleep(self.interval_ms() / 1000):
            await self.flush()
