"""The authenticated HA handshake (``haAuthSecretFile``, issue 16): only peers holding the
group's secret replicate, in either direction.

Real ``habroker serve`` processes for the group behaviour (SYNC puts, logs, metrics); the
in-process HAService/HAClient with real sockets where a test needs a forged master or a frame
at a precise moment. The attackers are raw sockets speaking whatever they like.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from habroker.client import Producer
from habroker.config import BrokerRole
from habroker.ha import HAAuth, HAClient, HAService
from habroker.ha.handshake import (
    CHALLENGE_SIZE,
    HANDSHAKE_TIMEOUT,
    HEADER,
    MAGIC,
    PROOF_SIZE,
    RESPONSE_SIZE,
    HASecretError,
)
from habroker.local import LocalBroker, LocalGroup
from habroker.store.values import BatchEntry, PutStatus

from tests.habroker.ha.conftest import Node
from tests.habroker.ha.ha_support import (
    JavaMasterStandIn,
    JavaSlaveStandIn,
    master_config,
    open_store,
    produce,
    slave_config,
    wait_until,
)
from tests.habroker.ha.test_ha_processes import SMALL, _wait
from tests.habroker.metricsutil import scrape

REPORT = struct.Struct(">q")
M1 = b"\x40\x00\x00\x00"  # the int32 that ends every handshake header (NOT_A_SIZE)
SECRET = "0123456789abcdef0123456789abcdef-group-secret"
BROKER = "broker-a"  # LocalBroker's brokerName; the proofs are bound to it


def _secret_file(tmp_path: Path, name: str, secret: str = SECRET) -> str:
    path = tmp_path / name
    path.write_text(secret + "\n")
    return str(path)


def _send(producer: Producer, body: bytes = b"m" * 200) -> str:
    return producer.send("ha", body, queue_id=0).status


def _refused(broker: Any) -> float:
    return scrape(broker.http_address).value("habroker_ha_auth_refused_total")


@pytest.fixture
def group(tmp_path: Path) -> Any:
    """``make(master=..., slave=..., **config)``: a SYNC master and one slave, each with its own
    extra keys (e.g. its own haAuthSecretFile), started."""
    groups: list[LocalGroup] = []

    def make(
        master: dict[str, Any] | None = None, slave: dict[str, Any] | None = None, **config: Any
    ) -> LocalGroup:
        g = LocalGroup(
            tmp_path / f"group{len(groups)}", slaves=1, mode="SYNC", **{**SMALL, **config}
        )
        g.master.config.update(master or {})
        g.slaves[0].config.update(slave or {})
        groups.append(g)
        g.start()
        Producer(g.master.http_address).create_topic("ha", queues=2)
        return g

    yield make
    for g in groups:
        g.stop()


# -- processes ---------------------------------------------------------------------------------
def test_slave_with_the_secret_replicates_and_sync_puts_succeed(group, tmp_path: Path) -> None:
    secret = _secret_file(tmp_path, "ha-secret")
    g = group(haAuthSecretFile=secret)
    g.wait_connected()
    with Producer(g.master.http_address, timeout=30) as producer:
        assert [_send(producer) for _ in range(20)] == ["PUT_OK"] * 20
    g.wait_replicated()
    master = g.master.status()["master"]
    assert master["authRequired"] is True
    assert [s["authenticated"] for s in master["slaves"]] == [True]
    assert g.slaves[0].status()["slave"]["authRequired"] is True
    assert _refused(g.master) == 0 and _refused(g.slaves[0]) == 0
    assert "authenticated" in g.master.log_path.read_text()
    assert SECRET not in g.master.log_path.read_text() + g.slaves[0].log_path.read_text()


def test_forged_report_to_a_master_with_the_secret_is_refused(group, tmp_path: Path) -> None:
    """The stranger of test_ha_security's forged-ack test, now against a master that requires
    the handshake: its report of the master's max offset closes its connection at once, is
    counted and logged with its address, and the waiting SYNC put is not acknowledged."""
    g = group(
        haAuthSecretFile=_secret_file(tmp_path, "ha-secret"),
        syncFlushTimeout=2000,
        haHousekeepingInterval=60_000,
    )
    g.wait_connected()
    (slave,) = g.slaves
    port = int(g.master.config["haListenPort"])
    with Producer(g.master.http_address, timeout=30) as producer:
        assert [_send(producer) for _ in range(3)] == ["PUT_OK"] * 3
        slave.pause()
        attacker = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            statuses: list[str] = []
            waiting = threading.Thread(target=lambda: statuses.append(_send(producer)))
            waiting.start()
            _wait(
                lambda: g.master.status()["master"]["waitingProducers"] == 1,
                within=10,
                what="the put waiting for a slave ack",
            )
            top = g.master.status()["maxOffset"]
            attacker.sendall(REPORT.pack(top))  # "I have everything"
            attacker.settimeout(HANDSHAKE_TIMEOUT - 1)  # closed well before the timeout
            data = attacker.recv(1024)  # the challenge comes first, then EOF
            while data:
                data = attacker.recv(1024)
            where = attacker.getsockname()
            waiting.join(30)
            assert statuses == ["FLUSH_SLAVE_TIMEOUT"], statuses
            assert g.master.status()["master"]["connectionCount"] == 1  # the paused real slave
        finally:
            attacker.close()
            slave.resume()
        _wait(lambda: _send(producer) == "PUT_OK", what="PUT_OK once the real slave is back")
    assert _refused(g.master) == 1
    log = g.master.log_path.read_text()
    assert re.search(
        rf"HA connection from slave 127\.0\.0\.1:{where[1]} closed: HA handshake refused: "
        r"slave does not speak the HA handshake",
        log,
    ), log[-3000:]
    g.wait_replicated()


def test_slave_with_a_wrong_secret_is_refused(group, tmp_path: Path) -> None:
    g = group(
        master={"haAuthSecretFile": _secret_file(tmp_path, "right")},
        slave={
            "haAuthSecretFile": _secret_file(tmp_path, "wrong", "another-secret-of-enough-bytes")
        },
        syncFlushTimeout=2000,
    )
    (slave,) = g.slaves
    _wait(lambda: _refused(g.master) >= 2, what="the master refusing the slave twice")
    with Producer(g.master.http_address, timeout=30) as producer:
        assert _send(producer) == "SLAVE_NOT_AVAILABLE"
    status = slave.status()["slave"]
    assert status["connected"] is False
    assert "HA handshake refused" in status["lastError"], status
    assert slave.status()["maxOffset"] == 0
    master_log = g.master.log_path.read_text()
    assert re.search(
        r"HA connection from slave 127\.0\.0\.1:\d+ closed: HA handshake refused: slave's proof "
        r"does not match \(a different haAuthSecretFile secret or brokerName\)",
        master_log,
    ), master_log[-3000:]
    slave_log = slave.log_path.read_text()
    assert re.search(
        rf"HA connection to master {re.escape(g.master.ha_address)} closed: HA handshake "
        r"refused: not completed: peer closed the connection",
        slave_log,
    ), slave_log[-3000:]
    assert _refused(slave) >= 1
    for text in (master_log, slave_log):
        assert SECRET not in text and "another-secret" not in text and "Traceback" not in text


def test_slave_with_the_secret_refuses_a_master_without_it(group, tmp_path: Path) -> None:
    """A classic master waits for the slave's report; the slave waits for the challenge and
    gives up after HANDSHAKE_TIMEOUT: it never reports, so the master never counts it."""
    g = group(slave={"haAuthSecretFile": _secret_file(tmp_path, "ha-secret")})
    (slave,) = g.slaves
    _wait(lambda: _refused(slave) >= 1, within=HANDSHAKE_TIMEOUT + 20, what="slave refusing")
    log = slave.log_path.read_text()
    assert re.search(
        rf"HA connection to master {re.escape(g.master.ha_address)} closed: HA handshake "
        rf"refused: nothing from the master within {HANDSHAKE_TIMEOUT:g} s",
        log,
    ), log[-3000:]
    assert g.master.status()["master"]["connectionCount"] == 0
    with Producer(g.master.http_address, timeout=30) as producer:
        assert _send(producer) == "SLAVE_NOT_AVAILABLE"
    assert slave.status()["maxOffset"] == 0


def test_master_with_the_secret_refuses_a_classic_slave_at_once(group, tmp_path: Path) -> None:
    g = group(master={"haAuthSecretFile": _secret_file(tmp_path, "ha-secret")})
    (slave,) = g.slaves
    _wait(lambda: _refused(g.master) >= 1, within=10, what="master refusing the plain slave")
    log = g.master.log_path.read_text()
    assert "slave does not speak the HA handshake" in log, log[-3000:]
    with Producer(g.master.http_address, timeout=30) as producer:
        assert _send(producer) == "SLAVE_NOT_AVAILABLE"
    # the plain slave took the challenge for a transfer header and dropped the connection
    assert slave.status()["maxOffset"] == 0
    assert "Traceback" not in slave.log_path.read_text()


def test_a_bad_secret_file_stops_the_broker(tmp_path: Path) -> None:
    with pytest.raises(HASecretError, match="no-such-file"):
        HAAuth(tmp_path / "no-such-file", BROKER)
    short = tmp_path / "short"
    short.write_text("too-short\n")
    with pytest.raises(HASecretError, match="at least 16 bytes"):
        HAAuth(short, BROKER)
    broker = LocalBroker(tmp_path / "b", brokerId=0, haAuthSecretFile=str(short))
    with pytest.raises(RuntimeError, match="broker exited with 2"):
        broker.start(timeout=30)
    broker.stop()
    assert f"haAuthSecretFile={short}: a secret of at least 16 bytes" in broker.tail_log()
    assert "too-short" not in broker.tail_log()


# -- in process: forged masters, silence, the frames -------------------------------------------
@pytest.fixture
async def authed(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    started: list[Node] = []

    async def make(kind: str, master: Node | None = None, secret: str = SECRET, **kw: Any) -> Node:
        root = tmp_path / f"{kind}{len(started)}"
        auth = HAAuth(_secret_file(tmp_path, f"secret{len(started)}", secret), BROKER)
        if kind == "master":
            config = master_config(root, **kw)
            store = await open_store(config)
            service = HAService(config, store, auth)
            await service.start()
            node = Node(config, store, service=service)
        else:
            config = slave_config(root, master.config if master else None, **kw)
            store = await open_store(config)
            client = HAClient(config, store, auth=auth)
            await client.start()
            node = Node(config, store, client=client)
        started.append(node)
        return node

    yield make
    for node in reversed(started):
        await node.stop()


def _proof(role: bytes, nm: bytes, ns: bytes, secret: str = SECRET) -> bytes:
    text = b"habroker-ha-auth-v1\x00" + role + b"\x00" + BROKER.encode() + b"\x00" + nm + ns
    return hmac.new(secret.encode(), text, hashlib.sha256).digest()


async def test_the_handshake_frames_on_the_wire(authed) -> None:
    """A hand-written slave, byte by byte as docs/wire-layouts.md has them: the master's
    CHALLENGE, our RESPONSE, the master's PROOF, then the classic protocol as before."""
    master = await authed("master", brokerRole=BrokerRole.SYNC_MASTER)
    top = produce(master.store, 5000)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    challenge = await asyncio.wait_for(peer.reader.readexactly(CHALLENGE_SIZE), 5)
    assert challenge[:12] == MAGIC + b"\x01\x01\x00\x00" + M1
    nm, ns = challenge[12:], bytes(range(32))
    await peer.send_raw(MAGIC + b"\x01\x02\x00\x00" + M1 + ns + _proof(b"slave", nm, ns))
    proof = await asyncio.wait_for(peer.reader.readexactly(PROOF_SIZE), 5)
    assert proof == MAGIC + b"\x01\x03\x00\x00" + M1 + _proof(b"master", nm, ns)
    assert (CHALLENGE_SIZE, RESPONSE_SIZE, PROOF_SIZE, HEADER.size) == (44, 76, 44, 12)
    await peer.report(0)
    offset, body = await peer.read_frame()
    assert offset == 0 and len(body) == top
    await wait_until(lambda: master.ha.connection_count == 1, what="slave counted")
    await peer.close()


@pytest.mark.parametrize("file_size", [1 << 12, 1 << 16, 1 << 20, 1 << 30])
async def test_a_classic_slave_never_takes_the_challenge_for_data(authed, file_size: int) -> None:
    """What a classic slave does with the CHALLENGE: read as a transfer header it claims a body
    of 1 GiB, which habroker's check refuses whatever the nonce and the file size (a Java slave
    waits for it until the master closes: tests/interop, test_habroker_java_clients)."""
    from habroker.ha.protocol import HEADER as TRANSFER
    from habroker.ha.protocol import ProtocolError, check_header

    master = await authed("master")
    for _ in range(5):
        peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
        challenge = await asyncio.wait_for(peer.reader.readexactly(CHALLENGE_SIZE), 5)
        offset, size = TRANSFER.unpack_from(challenge)
        assert size == 1 << 30
        with pytest.raises(ProtocolError):
            check_header(offset, size, 0, file_size)
        await peer.close()


async def test_refusals_are_logged_at_most_once_a_second(authed, caplog) -> None:
    """A refused peer may reconnect at once, over and over: every refusal is counted, but the
    log gets the first line and then at most one a second with a count."""
    caplog.set_level(logging.WARNING, logger="habroker.ha")
    master = await authed("master")
    started = time.monotonic()
    for _ in range(60):
        peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
        await peer.report(0)
        assert await peer.closed_by_peer(within=HANDSHAKE_TIMEOUT - 1)
        await peer.close()
    await wait_until(lambda: master.ha.auth is not None and master.ha.auth.refused == 60)
    took = time.monotonic() - started
    lines = [r.getMessage() for r in caplog.records if "HA handshake refused" in r.getMessage()]
    assert 1 <= len(lines) <= took + 2, (took, lines)
    assert lines[0].startswith("HA connection from slave 127.0.0.1:")
    if len(lines) > 1:
        assert "more refused at the handshake since the last such line" in lines[-1]


async def test_a_silent_peer_is_closed_after_the_timeout(authed) -> None:
    master = await authed("master", haHousekeepingInterval=60_000)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    started = time.monotonic()
    assert await peer.closed_by_peer(within=HANDSHAKE_TIMEOUT + 10)
    took = time.monotonic() - started
    assert HANDSHAKE_TIMEOUT - 0.5 <= took < HANDSHAKE_TIMEOUT + 5, took
    assert master.ha.auth is not None and master.ha.auth.refused == 1
    assert master.ha.connection_count == 0
    await peer.close()


async def test_a_forged_report_never_becomes_a_slave(authed) -> None:
    """No real slave at all: the forged report is refused, so a SYNC put answers
    SLAVE_NOT_AVAILABLE at once instead of waiting for the stranger."""
    master = await authed("master", brokerRole=BrokerRole.SYNC_MASTER, syncFlushTimeout=5000)
    top = produce(master.store, 5000)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(top)
    assert await peer.closed_by_peer(within=HANDSHAKE_TIMEOUT - 1)
    assert master.ha.connection_count == 0
    result = master.store.put_messages(
        "T", 0, [BatchEntry(0, b"x" * 100, b"")], born_host=("127.0.0.1", 1)
    )
    assert await master.ha.handle_put(result) is PutStatus.SLAVE_NOT_AVAILABLE
    await peer.close()


@pytest.mark.parametrize("forgery", ["classic", "wrong-proof", "replayed-proof"])
async def test_slave_refuses_a_forged_master(authed, caplog, forgery: str) -> None:
    """A rogue master: one that streams at once (classic), one that answers with a proof made
    with another secret, one that replays a proof from another connection. The slave appends
    nothing and never reports an offset to it."""
    caplog.set_level(logging.INFO, logger="habroker.ha")
    rogue = JavaMasterStandIn()
    await rogue.start()
    slave = await authed("slave", haMasterAddress=rogue.address)
    reader, writer = await rogue.accept()
    if forgery == "classic":
        writer.write(struct.pack(">qi", 0, 4) + b"evil")
    else:
        nm = bytes(32)
        writer.write(MAGIC + b"\x01\x01\x00\x00" + M1 + nm)
        response = await asyncio.wait_for(reader.readexactly(RESPONSE_SIZE), 5)
        assert response[:12] == MAGIC + b"\x01\x02\x00\x00" + M1
        ns = response[12:44]
        if forgery == "wrong-proof":
            mac = _proof(b"master", nm, ns, secret="not-the-groups-secret-at-all")
        else:  # a proof the real master gave for other nonces
            mac = _proof(b"master", nm, bytes(32))
        writer.write(MAGIC + b"\x01\x03\x00\x00" + M1 + mac)
    await writer.drain()
    try:  # EOF (or a reset: our frame was unread): the slave closed, reported nothing
        rest = await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:
        rest = b""
    assert rest == b""
    assert slave.store.max_phy_offset == 0
    assert slave.cl.auth is not None and slave.cl.auth.refused >= 1
    assert slave.cl.status()["connected"] is False
    wanted = (
        "master does not speak the HA handshake"
        if forgery == "classic"
        else "master's proof does not match"
    )
    assert any(wanted in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    writer.close()
    await rogue.stop()


async def test_master_and_slave_with_the_secret_replicate_in_process(authed) -> None:
    master = await authed("master")
    top = produce(master.store, 3 * 64 * 1024)
    slave = await authed("slave", master)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="replicated")
    other = await authed("slave", master, secret="a-different-secret-for-this-one")
    await wait_until(lambda: other.cl.auth is not None and other.cl.auth.refused >= 1)
    assert other.store.max_phy_offset == 0
    assert master.ha.connection_count == 1
