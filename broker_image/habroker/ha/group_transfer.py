"""GroupTransferService: SYNC_MASTER producers waiting for the slaves' acknowledged offset.

RocketMQ parks each producer's GroupCommitRequest and re-checks every request in a polling
thread. Here the waiters sit in a heap ordered by the offset they need, so one ack releases
every producer it covers in a single pass (offsets are acked in order), and each waiter's
deadline is a loop timer: nothing polls.

An ack comes with the offset its connection started sending from (``since``): it confirms
only the bytes that connection sent, so it releases a waiter only if the waiter's first byte
is at or after ``since``. A peer that claims a long log in its first report (the plain
protocol cannot tell a slave from a stranger) cannot confirm what it was never sent.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(order=True)
class _Waiter:
    next_offset: int
    seq: int
    first_offset: int = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)
    acked: Any = field(compare=False)  # the future's result once acked
    timed_out: Any = field(compare=False)  # ... at the deadline
    timer: asyncio.TimerHandle | None = field(compare=False, default=None)
    expired: bool = field(compare=False, default=False)


class GroupTransferService:
    """Futures resolved once the acked offset reaches theirs, or at their deadline."""

    def __init__(self) -> None:
        self._heap: list[_Waiter] = []
        self._seq = itertools.count()
        self._acked = 0
        self._acked_since = 0  # where the connection that confirmed ``_acked`` started sending
        self._expired_in_heap = 0
        self.released_total = 0
        self.timed_out_total = 0

    @property
    def waiting(self) -> int:
        return len(self._heap) - self._expired_in_heap

    @property
    def acked_offset(self) -> int:
        return self._acked

    def put_request(
        self, next_offset: int, timeout: float, first_offset: int | None = None
    ) -> asyncio.Future[bool]:
        """A future for the moment every byte of ``[first_offset, next_offset)`` is on a slave:
        True then, False at the deadline.

        ``first_offset`` (the put's first byte) defaults to ``next_offset - 1``.
        """
        return self.wait_for(next_offset, timeout, first_offset, True, False)

    def wait_for(
        self, next_offset: int, timeout: float, first_offset: int | None, acked: T, timed_out: T
    ) -> asyncio.Future[T]:
        """``put_request`` whose future resolves to ``acked`` or ``timed_out``.

        The caller's own answer is the future's result: a future chained behind this one
        would cost the producer one more loop pass per acknowledgement.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        first = next_offset - 1 if first_offset is None else first_offset
        if next_offset <= self._acked and first >= self._acked_since:
            fut.set_result(acked)
            self.released_total += 1
            return fut
        waiter = _Waiter(next_offset, next(self._seq), first, fut, acked, timed_out)
        waiter.timer = loop.call_later(max(timeout, 0.0), self._expire, waiter)
        heapq.heappush(self._heap, waiter)
        return fut

    def notify_transfer_some(self, acked: int, since: int = 0) -> None:
        """Release every waiter at or below ``acked`` whose first byte is at or after ``since``.

        The acked offset only moves forward.
        """
        if acked > self._acked:
            self._acked = acked
            self._acked_since = since
        heap = self._heap
        kept: list[_Waiter] = []  # covered, but starting before this connection's transfer
        while heap and heap[0].next_offset <= acked:
            waiter = heapq.heappop(heap)
            if waiter.expired:
                self._expired_in_heap -= 1
                continue
            if waiter.first_offset < since:
                kept.append(waiter)
                continue
            if waiter.timer is not None:
                waiter.timer.cancel()
            if not waiter.future.done():  # the producer may have given up (cancelled)
                waiter.future.set_result(waiter.acked)
                self.released_total += 1
        for waiter in kept:
            heapq.heappush(heap, waiter)

    def _expire(self, waiter: _Waiter) -> None:
        waiter.expired = True
        self._expired_in_heap += 1
        if not waiter.future.done():
            waiter.future.set_result(waiter.timed_out)
            self.timed_out_total += 1
        # A slave that never acks leaves dead entries behind; drop them once they dominate.
        if self._expired_in_heap > 1024 and self._expired_in_heap * 2 > len(self._heap):
            self._heap = [w for w in self._heap if not w.expired]
            heapq.heapify(self._heap)
            self._expired_in_heap = 0

    def shutdown(self) -> None:
        """Fail every waiter: nobody will ack them any more."""
        for waiter in self._heap:
            if waiter.timer is not None:
                waiter.timer.cancel()
            if not waiter.future.done():
                waiter.future.set_result(waiter.timed_out)
        self._heap.clear()
        self._expired_in_heap = 0
