"""Classic RocketMQ master/slave HA replication (spec §3): master HAService, slave HAClient."""

from habroker.ha.group_transfer import GroupTransferService
from habroker.ha.ha_client import HAClient
from habroker.ha.ha_service import HAService
from habroker.ha.handshake import HAAuth, HandshakeError

__all__ = ["GroupTransferService", "HAAuth", "HAClient", "HAService", "HandshakeError"]
