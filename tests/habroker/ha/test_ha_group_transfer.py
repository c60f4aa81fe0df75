"""GroupTransferService on its own: ordering, one-pass release, deadlines."""

from __future__ import annotations

import asyncio

from habroker.ha import GroupTransferService


async def test_one_ack_releases_every_covered_waiter_and_no_other() -> None:
    gts = GroupTransferService()
    futures = [gts.put_request(offset, timeout=30) for offset in range(1000, 0, -10)]
    beyond = gts.put_request(5000, timeout=30)
    gts.notify_transfer_some(1000)
    assert all(f.done() and f.result() is True for f in futures)
    assert not beyond.done()
    assert gts.waiting == 1 and gts.released_total == len(futures)
    gts.shutdown()
    assert beyond.result() is False


async def test_deadline_resolves_false_and_ack_never_goes_back() -> None:
    gts = GroupTransferService()
    slow = gts.put_request(200, timeout=0.05)
    assert await slow is False
    assert gts.timed_out_total == 1 and gts.waiting == 0
    gts.notify_transfer_some(300)
    gts.notify_transfer_some(100)  # stale ack: ignored
    assert gts.acked_offset == 300
    early = gts.put_request(250, timeout=10)
    assert early.done() and early.result() is True


async def test_cancelled_waiter_does_not_disturb_the_others() -> None:
    gts = GroupTransferService()
    gone = gts.put_request(100, timeout=10)
    kept = gts.put_request(100, timeout=10)
    waiter = asyncio.ensure_future(gone)
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    gts.notify_transfer_some(100)
    assert kept.result() is True
    assert gts.waiting == 0


async def test_an_ack_releases_only_puts_its_connection_sent() -> None:
    """A connection that started sending at 500 confirms [500, acked): a put that began before
    500 stays waiting (for another connection's ack, or its deadline)."""
    gts = GroupTransferService()
    before = gts.put_request(600, timeout=30, first_offset=400)  # straddles the start
    after = gts.put_request(700, timeout=30, first_offset=600)
    gts.notify_transfer_some(800, since=500)
    assert after.result() is True
    assert not before.done() and gts.waiting == 1
    # the same range is no proof for a new put that starts before 500 either
    late = gts.put_request(650, timeout=30, first_offset=450)
    assert not late.done()
    gts.notify_transfer_some(700, since=0)  # a connection that sent everything from 0
    assert before.result() is True and late.result() is True
    assert gts.acked_offset == 800 and gts.waiting == 0


async def test_wait_for_resolves_to_the_callers_own_values() -> None:
    """The put path's waiter carries its answer: the acked value, the timed-out value, and the
    timed-out value again for whoever is still waiting at shutdown."""
    gts = GroupTransferService()
    acked = gts.wait_for(100, 30, 50, "stored", "slave timeout")
    late = gts.wait_for(300, 0.05, 200, "stored", "slave timeout")
    left = gts.wait_for(900, 30, 800, "stored", "slave timeout")
    gts.notify_transfer_some(150)
    assert acked.result() == "stored" and not late.done()
    assert await late == "slave timeout"
    gts.shutdown()
    assert left.result() == "slave timeout"
    already = gts.wait_for(120, 30, 60, "stored", "slave timeout")  # under the acked offset
    assert already.result() == "stored"
    assert gts.released_total == 2 and gts.timed_out_total == 1
