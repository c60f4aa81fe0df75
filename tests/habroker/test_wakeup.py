"""Wakeup on its own: a notify releases the parked, a deadline returns, cancellation wins."""

from __future__ import annotations

import asyncio

import pytest
from habroker.store.wakeup import Wakeup


async def test_notify_releases_everyone_parked_and_nobody_later() -> None:
    wakeup = Wakeup()
    parked = [asyncio.ensure_future(wakeup.wait(30)) for _ in range(3)]
    await asyncio.sleep(0)
    assert wakeup.waiting == 3
    wakeup.notify()
    await asyncio.wait_for(asyncio.gather(*parked), 1)
    later = asyncio.ensure_future(wakeup.wait(30))
    await asyncio.sleep(0.01)
    assert not later.done() and wakeup.waiting == 1
    wakeup.notify()
    await asyncio.wait_for(later, 1)
    assert wakeup.waiting == 0


async def test_deadline_returns_and_leaves_nothing_parked() -> None:
    wakeup = Wakeup()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await wakeup.wait(0.05)
    assert loop.time() - started >= 0.04
    assert wakeup.waiting == 0


async def test_cancellation_propagates_even_when_notified_at_the_same_time() -> None:
    """A writer told to stop must stop: a notify that lands before the cancelled task runs
    again does not turn the cancellation into a normal return."""
    wakeup = Wakeup()
    task = asyncio.ensure_future(wakeup.wait(30))
    await asyncio.sleep(0)
    wakeup.notify()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    other = asyncio.ensure_future(wakeup.wait(30))
    await asyncio.sleep(0)
    other.cancel()
    with pytest.raises(asyncio.CancelledError):
        await other
    assert wakeup.waiting == 0
