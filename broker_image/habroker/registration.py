"""Registration with name servers (RocketMQ's BrokerOuterAPI): REGISTER_BROKER / UNREGISTER_BROKER.

A broker with ``namesrvAddr`` registers with every listed name server at start and every
``registerNameServerPeriod``, exactly as a Java broker does, so a real RocketMQ NameServer routes
clients to habroker groups.  A slave without ``haMasterAddress`` takes its master's HA address
from the answer (RocketMQ's updateMasterHAServerAddrPeriodically).  Slaves also register with
their own master (see :mod:`habroker.slave_sync`), which answers for the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from typing import TYPE_CHECKING, Any

from habroker import fastjson
from habroker.metadata import TopicConfigManager, registered_perm
from habroker.remoting.channel import RemotingError
from habroker.remoting.client import BrokerResponseError, RemotingClient
from habroker.remoting.codes import RequestCode
from habroker.remoting.command import RemotingCommand
from habroker.tls_config import client_tls

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)


def register_header(
    broker: BrokerController, extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bytes]:
    """REGISTER_BROKER's custom header and body (RegisterBrokerBody) for this broker."""
    cfg = broker.config
    topics = broker.topics.to_json()
    for entry in topics[TopicConfigManager.TABLE_KEY].values():  # fresh dicts: ours to change
        entry["perm"] = registered_perm(entry["perm"], cfg.brokerPermission)
    payload = fastjson.dumps(
        {"filterServerList": [], "topicConfigSerializeWrapper": topics}
    ).encode()
    header: dict[str, Any] = {
        "brokerName": cfg.brokerName,
        "brokerAddr": broker.address,
        "clusterName": cfg.brokerClusterName,
        "haServerAddr": f"{cfg.brokerIP1}:{cfg.haListenPort}",
        "brokerId": cfg.brokerId,
        "compressed": False,
        "bodyCrc32": zlib.crc32(payload) & 0x7FFFFFFF,
        **(extra or {}),
    }
    return header, payload


def namesrv_addresses(text: str) -> list[str]:
    return [a.strip() for a in text.split(";") if a.strip()]


class NameServerRegistration:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.client = RemotingClient(
            timeout=6.0, tls=client_tls(broker.config)
        )  # registerBrokerTimeoutMills
        self.last_error: dict[str, str] = {}
        self.registrations = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def period(self) -> float:
        # RocketMQ clamps registerNameServerPeriod to 10..60 s
        return min(max(self.broker.config.registerNameServerPeriod, 10_000), 60_000) / 1000

    @property
    def enabled(self) -> bool:
        return bool(namesrv_addresses(self.broker.config.namesrvAddr))

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._run(), name="namesrv-registration")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self._unregister_all()
        await self.client.close()

    async def _run(self) -> None:
        while True:
            await self.register_all()
            await asyncio.sleep(self.period)

    async def register_all(self) -> None:
        await asyncio.gather(
            *(self._register(a) for a in namesrv_addresses(self.broker.config.namesrvAddr))
        )

    async def _register(self, address: str) -> None:
        header, payload = register_header(self.broker)
        try:
            answer = await self.client.call(address, RequestCode.REGISTER_BROKER, header, payload)
        except (RemotingError, BrokerResponseError) as exc:
            if self.last_error.get(address) != str(exc):
                log.warning("register with name server %s failed: %s", address, exc)
            self.last_error[address] = str(exc)
            return
        if address in self.last_error or not self.registrations:
            log.info("registered with name server %s", address)
        self.last_error.pop(address, None)
        self.registrations += 1
        self._adopt(answer)

    def _adopt(self, answer: RemotingCommand) -> None:
        broker = self.broker
        if not broker.is_slave:
            return
        master = answer.ext_fields.get("masterAddr", "")
        if master and master != broker.registered_master_address:
            log.info("name server says the master's client address is %s", master)
            broker.registered_master_address = master
        ha = answer.ext_fields.get("haServerAddr", "")
        if ha and not broker.config.haMasterAddress:
            log.info("name server says the master's HA address is %s", ha)
            broker.set_master_address(ha, None)

    async def _unregister_all(self) -> None:
        cfg = self.broker.config
        header = {
            "brokerName": cfg.brokerName,
            "brokerAddr": self.broker.address,
            "clusterName": cfg.brokerClusterName,
            "brokerId": cfg.brokerId,
        }
        for address in namesrv_addresses(cfg.namesrvAddr):
            with contextlib.suppress(RemotingError, BrokerResponseError):
                await self.client.call(address, RequestCode.UNREGISTER_BROKER, header, timeout=2.0)
