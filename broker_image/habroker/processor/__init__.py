"""The broker's remoting face: request processors mapping RocketMQ's codes onto the broker.

:class:`BrokerRemoting` builds the :class:`~habroker.remoting.server.RemotingServer` for
``listenPort`` with every processor registered; docs/remoting.md lists what each code does.
"""

from __future__ import annotations

import logging

from habroker.broker import BrokerController
from habroker.processor.admin_broker import AdminBrokerProcessor
from habroker.processor.client_manage import ClientManageProcessor
from habroker.processor.client_manager import ConsumerManager, ProducerManager
from habroker.processor.namesrv import NameServerProcessor
from habroker.processor.pull_message import PullMessageProcessor
from habroker.processor.send_message import SendMessageProcessor
from habroker.processor.send_msg_back import ConsumerSendMsgBackProcessor
from habroker.remoting.acl import PlainAccessValidator
from habroker.remoting.server import RemotingServer
from habroker.tls_config import server_tls

log = logging.getLogger(__name__)


class BrokerRemoting:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.server = RemotingServer(
            name=f"broker {broker.config.brokerName}",
            tls_mode=broker.config.tlsServerMode,
            tls_context=server_tls(broker.config),
        )
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.client_manage = ClientManageProcessor(broker, self.consumers, self.producers)
        self.pull = PullMessageProcessor(broker, self.consumers)
        self.send_back = ConsumerSendMsgBackProcessor(broker)
        for processor in (
            SendMessageProcessor(broker),
            self.send_back,
            self.pull,
            self.client_manage,
            AdminBrokerProcessor(broker, self.consumers, self.producers),
            NameServerProcessor(broker, broker.routes),
        ):
            processor.register(self.server)
        self.acl: PlainAccessValidator | None = None
        if broker.config.aclEnable:
            # a missing or invalid file fails the start (AclError), as it should: no open door
            self.acl = PlainAccessValidator(broker.config.acl_file, broker.stats.count_acl_refusal)
            self.server.request_check = self.acl.check
            log.info(
                "ACL enabled on the remoting ports: %s, %d accounts",
                self.acl.path,
                len(self.acl.config.accounts),
            )

    async def start(self, host: str, port: int, fast_port: int = 0, external_port: int = 0) -> None:
        """``fast_port``: RocketMQ's VIP channel (listenPort - 2), where Java slaves copy
        metadata and VIP-enabled clients send; ``external_port``: the listener for clients
        outside the cluster (route answers with external addresses); 0 for none."""
        await self.server.start(host, port)
        if fast_port:
            await self.server.start(host, fast_port)
        if external_port:
            await self.server.start(host, external_port)
        self.client_manage.start()

    async def stop(self) -> None:
        await self.client_manage.stop()
        await self.server.stop()
