"""Wakeup: tasks parked until the store has something new for them, or their deadline.

The HA writer of a caught-up SYNC pair parks once per message, so a park is on the path of every
SYNC acknowledgement. ``asyncio.Event`` plus ``asyncio.timeout`` cost an Event future, a Timeout
object, a current-task lookup and its reschedule per park; here a park is one future and one
timer that resolves it (it never cancels the waiting task, so a cancellation from outside
always propagates as itself).
"""

from __future__ import annotations

import asyncio


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wakeup:
    """``wait`` returns on the next ``notify`` or after its timeout, whichever comes first."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(max(timeout, 0.0), _release, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if self._waiters and waiter in self._waiters:  # timed out or cancelled
                self._waiters.remove(waiter)

    def notify(self) -> None:
        """Release every task parked now (later ones wait for the next notify)."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
