"""RouteInfoManager: which broker of this group is where, for the group's own route answers.

The master is always brokerId 0; slaves are whoever registered (REGISTER_BROKER, the way a
RocketMQ broker registers with its name server) and kept registering.  A slave has no
registrations of its own: it keeps the member table its master last gave it.

Route answers on externalListenPort name the addresses clients outside the cluster reach
(the operator tells them).  In a classic group they are told by brokerId.  In a DLedger group
brokerIds follow the leader, so they are told by peer (dLegerSelfId) and mapped here, at answer
time, from what this peer knows: brokerId 0 is the leader, a follower is ``selfId[1:] + 1``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from habroker.config import ConfigError, broker_id_of

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_SECONDS = 120.0  # RouteInfoManager's BROKER_CHANNEL_EXPIRED_TIME


@dataclass(slots=True)
class BrokerLiveInfo:
    broker_id: int
    address: str
    ha_server_address: str
    last_update: float


class RouteInfoManager:
    """brokerId → address for this group; the master is always itself or its known master."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.registered: dict[int, BrokerLiveInfo] = {}
        # a slave's copy of its master's member table (GET_BROKER_CLUSTER_INFO)
        self.from_master: dict[int, str] = {}
        # brokerId -> the address a client outside the cluster reaches it at (told by the
        # operator); answered on externalListenPort instead of the brokers' own addresses
        self.external: dict[int, str] = {}
        # DLedger: dLegerSelfId -> the address a client outside reaches that peer at
        self.external_peers: dict[str, str] = {}

    def set_external(self, addrs: dict[int, str], peers: dict[str, str] | None = None) -> None:
        peers = peers or {}
        if addrs != self.external:
            log.info("external addresses: %s", addrs or "none")
        if peers != self.external_peers:
            log.info("external addresses by DLedger peer: %s", peers or "none")
        self.external = dict(sorted(addrs.items()))
        self.external_peers = dict(sorted(peers.items()))

    def register(self, info: BrokerLiveInfo) -> bool:
        old = self.registered.get(info.broker_id)
        self.registered[info.broker_id] = info
        if old is None or old.address != info.address:
            log.info(
                "broker %d of group %s registered at %s",
                info.broker_id,
                self.broker.config.brokerName,
                info.address,
            )
            return True
        return False

    def unregister(self, broker_id: int, address: str) -> None:
        info = self.registered.get(broker_id)
        if info is not None and info.address == address:
            del self.registered[broker_id]
            log.info("broker %d (%s) unregistered", broker_id, address)

    def broker_addrs(self) -> dict[int, str]:
        now = time.monotonic()
        for broker_id, info in list(self.registered.items()):
            if now - info.last_update > BROKER_CHANNEL_EXPIRED_SECONDS:
                log.warning(
                    "broker %d (%s) stopped registering; dropped from routes",
                    broker_id,
                    info.address,
                )
                del self.registered[broker_id]
        broker = self.broker
        addrs: dict[int, str] = {}
        if broker.is_slave:
            addrs.update(self.from_master)
            master = broker.master_address
            if master:
                addrs[0] = master
        addrs.update({i: info.address for i, info in self.registered.items()})
        addrs[broker.config.brokerId] = broker.address
        return dict(sorted(addrs.items()))

    def external_addrs(self) -> dict[int, str]:
        """What a client outside the cluster is told: only brokers it can reach (a broker
        without an external address is left out rather than named by an address it cannot
        dial)."""
        known = {**self.external, **self._external_by_peer()}
        return {i: known[i] for i in self.broker_addrs() if i in known}

    def _external_by_peer(self) -> dict[int, str]:
        """brokerId -> external address from the per-peer map (DLedger): the leader this peer
        knows is 0, every other peer its follower id."""
        store = self.broker.dledger_store
        if not self.external_peers or store is None:
            return {}
        state = store.dledger.state
        out: dict[int, str] = {}
        for self_id, address in self.external_peers.items():
            if self_id == state.leader_id:
                out[0] = address
                continue
            try:
                out[broker_id_of(self_id)] = address
            except ConfigError:
                continue  # not a peer id RocketMQ can number (refused when told)
        return out

    def broker_data(self, external: bool = False) -> dict[str, Any]:
        cfg = self.broker.config
        return {
            "brokerAddrs": self.external_addrs() if external else self.broker_addrs(),
            "brokerName": cfg.brokerName,
            "cluster": cfg.brokerClusterName,
        }
