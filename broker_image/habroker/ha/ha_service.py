"""HAService: the master side of classic replication (spec §3.4, §3.5, §3.9).

It owns the HA listener, the per-slave connections, and push2SlaveMaxOffset, the highest
offset any slave has acknowledged. That one number decides SYNC_MASTER producers: it only
ever moves forward and each move releases the waiters it covers (GroupTransferService).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING

from habroker.config import BrokerConfig, BrokerRole
from habroker.ha.accept_socket_service import AcceptSocketService
from habroker.ha.group_transfer import GroupTransferService
from habroker.ha.ha_connection import HAConnection
from habroker.ha.handshake import HAAuth
from habroker.store.values import PutStatus

if TYPE_CHECKING:
    from habroker.store import MessageStore, PutResult

log = logging.getLogger(__name__)

_REFUSED_LOG_INTERVAL = 1.0  # seconds between "refused" lines during a connection flood
_DRAIN_POLL = 0.005  # seconds between looks at the slaves' acks during a shutdown drain


class _RefusalLog:
    """At most one log line a second for a kind of refusal, counting the ones left unlogged."""

    def __init__(self) -> None:
        self._unlogged = 0
        self._logged_at = -_REFUSED_LOG_INTERVAL

    def due(self) -> int | None:
        """None: do not log this one; else log it, and this many were refused unlogged before."""
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at < _REFUSED_LOG_INTERVAL:
            return None
        more, self._unlogged, self._logged_at = self._unlogged - 1, 0, now
        return more


class HAService:
    """Accepts slaves, streams the commit log to them, and tracks what they acknowledged."""

    def __init__(
        self, config: BrokerConfig, store: MessageStore, auth: HAAuth | None = None
    ) -> None:
        # ``config`` may be replaced by a newer copy (runtime keys such as syncFlushTimeout);
        # every use reads it afresh.
        self.config = config
        self.store = store
        #: haAuthSecretFile: every connection must pass the handshake before its first report
        self.auth = auth
        self.group_transfer = GroupTransferService()
        self.accept_service = AcceptSocketService(
            config.bindAddress, config.haListenPort, self._on_accept
        )
        self.connections: dict[HAConnection, asyncio.Task[None]] = {}
        self.dropped_total = 0
        self.slave_not_available_total = 0
        self.refused_total = 0
        self._cap_log = _RefusalLog()
        self._auth_log = _RefusalLog()
        self._housekeeping: asyncio.Task[None] | None = None
        self.draining = False  # a clean stop is waiting for the slaves: send without lingering

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind ``bindAddress:haListenPort`` and start accepting slaves."""
        await self.accept_service.start()
        self._housekeeping = asyncio.create_task(self._housekeeping_loop(), name="ha-housekeeping")

    async def stop(self) -> None:
        await self.accept_service.stop()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            await asyncio.gather(self._housekeeping, return_exceptions=True)
            self._housekeeping = None
        tasks = list(self.connections.values())
        for conn in list(self.connections):
            conn.close("master shutting down")
        await asyncio.gather(*tasks, return_exceptions=True)
        self.group_transfer.shutdown()

    async def drain(self, within: float) -> dict[str, int]:
        """Before a clean stop: wait, at most ``within`` s, until every connected slave has
        acknowledged the master's last byte.

        A slave promoted after this master's pod is gone (failover, or a re-pointed group)
        then holds every write it took, ASYNC ones included. Writers send without lingering
        meanwhile. Returns the slaves still behind at the end (address: acked offset).
        """
        target = self.store.max_phy_offset
        self.draining = True
        for conn in self.connections:
            conn.end_linger()
        started = time.monotonic()
        while True:
            slaves = [c for c in self.connections if c.is_slave]
            behind = {c.address: c.ack_offset for c in slaves if c.ack_offset < target}
            if not behind or time.monotonic() - started >= within:
                break
            await asyncio.sleep(_DRAIN_POLL)
        waited = (time.monotonic() - started) * 1000
        if behind:
            log.warning(
                "stopping: after %.0f ms, slave(s) still short of offset %d: %s; they catch up "
                "from this broker when it returns (haShutdownDrainTimeoutMs=%d)",
                waited,
                target,
                ", ".join(f"{a} at {o} ({target - o} bytes behind)" for a, o in behind.items()),
                self.config.haShutdownDrainTimeoutMs,
            )
        elif slaves:
            log.info(
                "stopping: %d slave(s) hold every byte up to offset %d (drained in %.0f ms)",
                len(slaves),
                target,
                waited,
            )
        else:
            log.info("stopping: no slave connected to drain to (max offset %d)", target)
        return behind

    @property
    def listen_address(self) -> tuple[str, int]:
        return self.accept_service.address

    def _on_accept(self, sock: socket.socket, address: str) -> None:
        limit = self.config.haMaxConnections
        if len(self.connections) >= limit:
            sock.close()
            self._refuse(address, limit)
            return
        conn = HAConnection(self, sock, address)
        log.info("HA connection from %s accepted", address)
        task = asyncio.create_task(conn.run(), name=f"ha-conn {address}")
        self.connections[conn] = task
        task.add_done_callback(lambda _t: self.forget(conn))

    def _refuse(self, address: str, limit: int) -> None:
        """Count a refused connection; log the first one, then at most a line a second."""
        self.refused_total += 1
        more = self._cap_log.due()
        if more is not None:
            log.warning(
                "HA connection from %s refused: %d connections open (haMaxConnections=%d)%s",
                address,
                len(self.connections),
                limit,
                f"; {more} more refused since the last such line" if more else "",
            )

    def log_auth_refusal(self, address: str, reason: str) -> None:
        """A connection closed at the handshake: the first one logged, then at most a line a
        second: a refused peer may reconnect at once, over and over (a classic slave or a scanner)."""
        more = self._auth_log.due()
        if more is not None:
            log.warning(
                "HA connection from slave %s closed: %s%s",
                address,
                reason,
                f"; {more} more refused at the handshake since the last such line" if more else "",
            )

    def forget(self, conn: HAConnection) -> None:
        """Drop a closed connection: it no longer counts as a slave or against the cap."""
        if self.connections.pop(conn, None) is not None:
            self.dropped_total += 1

    async def _housekeeping_loop(self) -> None:
        """Close connections the slave has not written to for haHousekeepingInterval."""
        while True:
            limit = self.config.haHousekeepingInterval / 1000.0
            await asyncio.sleep(min(1.0, limit / 4))
            now = time.monotonic()
            for conn in list(self.connections):
                silent = now - conn.last_read_at
                if silent > limit:
                    conn.close(
                        f"housekeeping: nothing read for {silent * 1000:.0f} ms "
                        f"(haHousekeepingInterval={self.config.haHousekeepingInterval})",
                        logging.WARNING,
                    )

    # -- acknowledgements --------------------------------------------------------------------
    @property
    def push2slave_max_offset(self) -> int:
        return self.group_transfer.acked_offset

    @property
    def connection_count(self) -> int:
        """Connected slaves that speak the protocol (have reported at least once).

        RocketMQ counts every accepted socket; a TCP probe or a garbage peer would then make a
        SYNC_MASTER wait for acks that never come instead of answering SLAVE_NOT_AVAILABLE.
        """
        return sum(1 for conn in self.connections if conn.is_slave)

    def notify_transfer_some(self, offset: int, since: int = 0) -> None:
        """A connection that sent the bytes from ``since`` on confirms them up to ``offset``."""
        self.group_transfer.notify_transfer_some(offset, since)

    def is_slave_ok(self, next_offset: int) -> bool:
        """A slave is connected and no further than haMaxGapNotInSync behind ``next_offset``.

        "Behind" is measured from the slaves' reports, first ones included (as RocketMQ does):
        this only decides whether a producer waits at all. What releases it is a confirmed ack.
        """
        reported = [conn.ack_offset for conn in self.connections if conn.is_slave]
        if not reported:
            return False
        position = max(max(reported), self.push2slave_max_offset)
        return next_offset - position < self.config.haMaxGapNotInSync

    async def wait_for_replication(self, next_offset: int, timeout: float) -> bool:  # noqa: ASYNC109
        """True once a slave acked every byte before ``next_offset``; False after ``timeout`` s.

        The timeout is a timer in the group-transfer heap, not a cancellation scope, so one ack
        releases every covered waiter without waking the others.
        """
        return await self.group_transfer.put_request(next_offset, timeout)

    def handle_put(
        self, result: PutResult, *, wait_store_ok: bool = True
    ) -> asyncio.Future[PutStatus]:
        """The replica part of a put's status (spec §3.9, 4.9 semantics).

        SYNC_MASTER with ``wait_store_ok`` (the message's WAIT property, true when absent) waits
        up to syncFlushTimeout for an ack covering the put's next offset; anything else returns
        the store's status at once. A non-OK replica status replaces the flush status.
        """
        status = result.status
        if (
            self.config.brokerRole is not BrokerRole.SYNC_MASTER
            or not wait_store_ok
            or status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)
        ):
            return _resolved(status)
        next_offset = result.next_offset
        if not self.is_slave_ok(next_offset):
            self.slave_not_available_total += 1
            return _resolved(PutStatus.SLAVE_NOT_AVAILABLE)
        return self.group_transfer.wait_for(
            next_offset,
            self.config.syncFlushTimeout / 1000.0,
            result.wrote_offset,
            status,
            PutStatus.FLUSH_SLAVE_TIMEOUT,
        )

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        """The ``master`` part of ``/v1/status`` plus counters for ``/metrics``."""
        master_max = self.store.max_phy_offset
        gap = self.config.haMaxGapNotInSync
        silence = self.config.haMaxTimeSlaveNotCatchup / 1000.0
        slaves = [
            conn.status(master_max, gap, silence) for conn in self.connections if conn.is_slave
        ]
        host, port = self.listen_address
        return {
            "push2SlaveMaxOffset": self.push2slave_max_offset,
            "connectionCount": len(slaves),
            "inSyncSlaves": sum(1 for s in slaves if s["inSync"]),
            "slaves": slaves,
            "boundAddress": f"{host}:{port}",
            "socketCount": len(self.connections),
            "acceptedConnectionsTotal": self.accept_service.accepted_total,
            "closedConnectionsTotal": self.dropped_total,
            "refusedConnectionsTotal": self.refused_total,
            "maxConnections": self.config.haMaxConnections,
            "authRequired": self.auth is not None,
            "waitingProducers": self.group_transfer.waiting,
            "syncReleasedTotal": self.group_transfer.released_total,
            "syncTimeoutTotal": self.group_transfer.timed_out_total,
            "slaveNotAvailableTotal": self.slave_not_available_total,
        }


def _resolved(status: PutStatus) -> asyncio.Future[PutStatus]:
    fut: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
    fut.set_result(status)
    return fut
