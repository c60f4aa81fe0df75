"""The name server's answers for this broker's own group, served on the broker's client port.

An application sets ``namesrvAddr`` to the group (in Kubernetes the ``<group>-namesrv`` Service
over all its pods) and gets routes from whichever broker answers: the master's address as
brokerId 0 and each slave that registered (REGISTER_BROKER, as a Java slave does with its name
server, and as habroker slaves do with their master) under its brokerId.  A slave answers from
the member table its master last gave it.  No separate name-server cluster is needed.
"""

from __future__ import annotations

import logging
import time

from habroker.broker import BrokerController
from habroker.metadata import registered_perm
from habroker.processor import body
from habroker.processor.headers import Header
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.server import RemotingServer
from habroker.route_info import BrokerLiveInfo, RouteInfoManager

log = logging.getLogger(__name__)

SLAVE_SYNC_WAIT = 2.0  # how long a slave's route answer may wait for a metadata copy


class NameServerProcessor:
    def __init__(self, broker: BrokerController, routes: RouteInfoManager) -> None:
        self.broker = broker
        self.routes = routes

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route_info)
        server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info)
        server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.topic_list)
        server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self.topic_list)
        server.register(RequestCode.REGISTER_BROKER, self.register_broker)
        server.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        server.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)
        server.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        server.register(RequestCode.GET_KV_CONFIG, self.kv_config)
        server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.kv_config)

    def _external(self, channel: Channel) -> bool:
        """Whether the request came in on externalListenPort (a client outside the cluster)."""
        port = self.broker.config.externalListenPort
        return bool(port) and channel.local_address.rpartition(":")[2] == str(port)

    async def route_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        topic = Header(request).text("topic")
        cfg = self.broker.topics.get(topic)
        if cfg is None and self.broker.slave_sync is not None:
            # created on the master since our last copy? copy now rather than say "no route"
            await self.broker.slave_sync.sync_now(timeout=SLAVE_SYNC_WAIT)
            cfg = self.broker.topics.get(topic)
        if cfg is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        route = {
            "brokerDatas": [self.routes.broker_data(self._external(channel))],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": self.broker.config.brokerName,
                    "perm": registered_perm(cfg.perm, self.broker.route_broker_permission),
                    "readQueueNums": cfg.readQueueNums,
                    "topicSysFlag": cfg.topicSysFlag,
                    "writeQueueNums": cfg.writeQueueNums,
                }
            ],
        }
        return request.response(body=body.dump_bytes(route))

    def cluster_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        cfg = self.broker.config
        info = {
            "brokerAddrTable": {cfg.brokerName: self.routes.broker_data(self._external(channel))},
            "clusterAddrTable": {cfg.brokerClusterName: [cfg.brokerName]},
        }
        return request.response(body=body.dump_bytes(info))

    def topic_list(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return request.response(
            body=body.dump_bytes({"topicList": sorted(self.broker.topics.table)})
        )

    def register_broker(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        cfg = self.broker.config
        name, cluster = h.text("brokerName"), h.text("clusterName")
        if name != cfg.brokerName or cluster != cfg.brokerClusterName:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"this name server serves only broker {cfg.brokerClusterName}/{cfg.brokerName}, "
                f"not {cluster}/{name}",
            )
        broker_id = h.int64("brokerId")
        address = h.text("brokerAddr")
        ha_address = h.text("haServerAddr", "")
        if broker_id != cfg.brokerId:
            self.routes.register(BrokerLiveInfo(broker_id, address, ha_address, time.monotonic()))
        ha_client = h.opt_text("haClientAddress")
        if ha_client and broker_id > 0 and not self.broker.is_slave:
            self.broker.note_slave_identity(
                ha_client, broker_id, address, h.opt_text("httpAddress") or ""
            )
        master_ha = ""
        if not self.broker.is_slave:
            master_ha = f"{cfg.brokerIP1}:{cfg.haListenPort}"
        return request.response(
            header={
                "haServerAddr": master_ha if broker_id != 0 else "",
                "masterAddr": self.broker.address
                if not self.broker.is_slave
                else self.broker.master_address,
            }
        )

    def unregister_broker(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        self.routes.unregister(h.int64("brokerId"), h.text("brokerAddr"))
        return request.response()

    @staticmethod
    def query_data_version(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        # always "changed": brokers then send a full registration, which is cheap here
        return request.response(header={"changed": True})

    @staticmethod
    def delete_topic(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        # routes are derived from the broker's own topic table: nothing to delete here
        return request.response()

    @staticmethod
    def kv_config(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        namespace = request.ext_fields.get("namespace", "")
        return request.response(
            ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
        )
