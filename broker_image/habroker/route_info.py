"""RouteInfoManager: which broker of this group is where, for the group's own route answers.

The master is always brokerId 0; slaves are whoever registered (REGISTER_BROKER, the way a
RocketMQ broker registers with its name server) and kept registering.  A slave has no
registrations of its own: it keeps the member table its master last gave it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

    def set_external(self, addrs: dict[int, str]) -> None:
        if addrs != self.external:
            log.info("external addresses: %s", addrs or "none")
        self.external = dict(sorted(addrs.items()))

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
        return {i: self.external[i] for i in self.broker_addrs() if i in self.external}

    def broker_data(self, external: bool = False) -> dict[str, Any]:
        cfg = self.broker.config
        return {
            "brokerAddrs": self.external_addrs() if external else self.broker_addrs(),
            "brokerName": cfg.brokerName,
            "cluster": cfg.brokerClusterName,
        }
