"""Replication between real ``habroker serve`` processes: stop, kill and restart either side."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from habroker.client import Producer
from habroker.local import LocalGroup

FILE_SIZE = 64 * 1024
SMALL = dict(
    mappedFileSizeCommitLog=FILE_SIZE,
    mappedFileSizeConsumeQueue=20 * 1024,
    maxMessageSize=16 * 1024,
    haSendHeartbeatInterval=200,
)


def _wait(predicate, within: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.05)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "store" / "commitlog").iterdir())}


def _produce(producer: Producer, count: int, size: int = 900) -> list[str]:
    return [
        producer.send("ha", bytes([i % 251]) * size, queue_id=i % 2).status for i in range(count)
    ]


@pytest.fixture
def group(tmp_path: Path):
    groups: list[LocalGroup] = []

    def make(mode: str = "ASYNC", **config) -> LocalGroup:
        g = LocalGroup(tmp_path / f"group{len(groups)}", slaves=1, mode=mode, **{**SMALL, **config})
        groups.append(g)
        g.start()
        Producer(g.master.http_address).create_topic("ha", queues=2)
        return g

    yield make
    for g in groups:
        g.stop()


def test_sigstop_slave_gives_flush_slave_timeout(group) -> None:
    g = group("SYNC", syncFlushTimeout=500, haHousekeepingInterval=60_000)
    (slave,) = g.slaves
    _wait(lambda: g.master.status()["master"]["connectionCount"] == 1, what="slave connected")
    with Producer(g.master.http_address) as producer:
        assert _produce(producer, 5) == ["PUT_OK"] * 5
        slave.pause()
        try:
            assert _produce(producer, 2) == ["FLUSH_SLAVE_TIMEOUT"] * 2
        finally:
            slave.resume()
        _wait(lambda: _produce(producer, 1) == ["PUT_OK"], what="PUT_OK after SIGCONT")
    g.wait_replicated()


def test_sigkill_slave_restart_resumes_from_its_own_offset(group) -> None:
    g = group()
    (slave,) = g.slaves
    with Producer(g.master.http_address) as producer:
        _produce(producer, 300)
        g.wait_replicated()
        resumed_from = slave.status()["maxOffset"]
        slave.kill()
        _produce(producer, 300)
    slave.start()
    g.wait_replicated()
    requests = [s["requestOffset"] for s in g.master.status()["master"]["slaves"]]
    assert 0 < requests[0] <= resumed_from, requests  # recovery may cut a torn tail
    _wait(
        lambda: slave.status()["dispatchedOffset"] == g.master.status()["maxOffset"],
        what="slave dispatched everything",
    )
    g.stop()
    assert _files(slave.root) == _files(g.master.root)


def test_sigkill_master_restart_slave_reconnects(group) -> None:
    g = group()
    (slave,) = g.slaves
    with Producer(g.master.http_address) as producer:
        _produce(producer, 200)
    g.wait_replicated()
    g.master.kill()
    _wait(lambda: not slave.status()["slave"]["connected"], what="slave notices")
    g.master.start()
    _wait(lambda: slave.status()["slave"]["connected"], what="slave reconnects")
    assert slave.status()["slave"]["reconnects"] >= 1
    with Producer(g.master.http_address) as producer:
        _produce(producer, 200)
    g.wait_replicated()
    g.stop()
    assert _files(slave.root) == _files(g.master.root)


@pytest.mark.parametrize("drain_ms", [3000, 0], ids=["drain", "no-drain"])
def test_sigterm_master_sends_its_async_tail_before_it_exits(group, drain_ms: int) -> None:
    """A clean stop (SIGTERM: a pod deleted or rolled) of an ASYNC master holding writes its
    slave has not got yet: it waits for the slave's acknowledgement of its last byte before it
    closes the connection (haShutdownDrainTimeoutMs), ending the writer's linger at once. The
    tail is held back by a 1 s linger; with the drain off the slave is left without it."""
    g = group(
        "ASYNC",
        haAsyncTransferLingerMs=1000,
        haShutdownDrainTimeoutMs=drain_ms,
        haHousekeepingInterval=60_000,
    )
    (slave,) = g.slaves
    _wait(lambda: g.master.status()["master"]["connectionCount"] == 1, what="slave connected")
    with Producer(g.master.http_address) as producer:
        assert _produce(producer, 20) == ["PUT_OK"] * 20
        g.wait_replicated()
        lingers = g.master.status()["master"]["slaves"][0]["lingers"]
        started = time.monotonic()
        assert _produce(producer, 5) == ["PUT_OK"] * 5
    top = g.master.status()["maxOffset"]
    held = slave.status()["maxOffset"]
    assert held < top, "the linger should have held the tail back"
    assert g.master.stop() == 0
    window = time.monotonic() - started
    final = slave.status()["maxOffset"]
    print(f"tail {top - held} bytes; the master exited {window:.3f} s after the tail's first put")
    log = g.master.log_path.read_text()
    # gone before the linger ran out: only the drain (which ends a linger) can have sent the tail
    assert window < 1.0, f"the stop took {window:.3f} s: longer than the linger"
    if drain_ms:
        assert final == top, (final, top)
        assert f"1 slave(s) hold every byte up to offset {top}" in log
        assert _files(slave.root) == _files(g.master.root)
    else:
        assert lingers >= 1
        assert final == held < top, (final, held, top)
        assert "hold every byte" not in log
