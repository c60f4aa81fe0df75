"""DLedgerRoleChangeHandler: a DLedger election decides who is master, RocketMQ's way.

LEADER: first every entry of the log must be committed and indexed (a predecessor's tail is
committed by this term's quorum), then queue offsets are taken from the consume queues and the
broker becomes SYNC_MASTER with brokerId 0 and registers.  FOLLOWER / CANDIDATE: SLAVE with
brokerId ``selfId[1:] + 1``; a follower copies metadata from its leader and registers with it,
as classic slaves do.  Role changes are handled one at a time, newest wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from habroker.config import BrokerRole, broker_id_of, parse_host_port
from habroker.dledger.member_state import Role
from habroker.dledger.message_store import DLedgerMessageStore
from habroker.slave_sync import SlaveSynchronize

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)


class DLedgerRoleChangeHandler:
    def __init__(self, broker: BrokerController, store: DLedgerMessageStore) -> None:
        self.broker = broker
        self.store = store
        self.dledger = store.dledger
        self.follower_id = broker_id_of(broker.config.dLegerSelfId)
        self._task: asyncio.Task[None] | None = None
        self.became_master_at_term = -1

    def __call__(self, term: int, role: Role) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = asyncio.create_task(self._handle(term, role), name=f"role-{role}-{term}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def leader_client_address(self) -> str:
        """The leader's client address: from the name server when it told us, else the
        leader's DLedger host, and its DLedger port moved by the distance between this peer's
        own DLedger port and listenPort (peers of a group share that layout: 40911 / 10911)."""
        broker = self.broker
        if broker.registered_master_address:
            return broker.registered_master_address
        state = self.dledger.state
        leader = state.leader_address
        if leader is None:
            return ""
        host, port = parse_host_port(leader, key="dLegerPeers")
        _, own_port = parse_host_port(state.self_address, key="dLegerPeers")
        return f"{host}:{port - own_port + broker.config.listenPort}"

    async def _handle(self, term: int, role: Role) -> None:
        try:
            if role == Role.LEADER:
                await self._become_master(term)
            else:
                await self._become_slave(term, role)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("DLedger role change to %s in term %d failed", role, term)

    async def _become_master(self, term: int) -> None:
        state = self.dledger.state
        waited = 0.0
        while not self.store.dispatched_all:
            if not state.is_leader or state.term != term:
                return
            await asyncio.sleep(0.01)
            waited += 0.01
            if waited and int(waited * 100) % 500 == 0:
                log.info(
                    "leader of term %d: waiting for entries up to %d to commit (at %d)",
                    term,
                    self.dledger.store.ledger_end_index,
                    self.dledger.store.committed_index,
                )
        broker = self.broker
        if broker.slave_sync is not None:
            await broker.slave_sync.stop()
            broker.slave_sync = None
        self.store.reset_queue_offsets()
        broker.reconfigure(brokerRole=BrokerRole.SYNC_MASTER, brokerId=0, masterAddress="")
        broker.replicas.adopt_replicated_topics()
        broker.schedule.start()
        broker.registered_master_address = ""
        self.became_master_at_term = term
        log.warning(
            "DLedger leader of term %d: now master (brokerId 0), taking writes at index %d",
            term,
            self.dledger.store.ledger_end_index,
        )
        broker.register_now()

    async def _become_slave(self, term: int, role: Role) -> None:
        broker = self.broker
        if not broker.is_slave:
            await broker.schedule.stop()
            broker.reconfigure(brokerRole=BrokerRole.SLAVE, brokerId=self.follower_id)
            log.warning(
                "DLedger %s in term %d: now slave (brokerId %d)", role, term, self.follower_id
            )
        if role != Role.FOLLOWER:
            return
        broker.registered_master_address = ""
        broker.reconfigure(masterAddress=self.leader_client_address())
        if broker.slave_sync is None:
            broker.slave_sync = SlaveSynchronize(
                broker, interval=broker.config.metaSyncInterval / 1000
            )
            broker.slave_sync.start()
        broker.register_now()
