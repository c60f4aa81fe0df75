"""Classic RocketMQ master/slave HA replication (spec §3): master HAService, slave HAClient."""

from habroker.ha.group_transfer import GroupTransferService
from habroker.ha.ha_client import HAClient
from habroker.ha.ha_service import HAService

__all__ = ["GroupTransferService", "HAClient", "HAService"]
