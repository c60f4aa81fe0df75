"""ReplicasManager: this broker's place in its group — role, epoch, fencing, and the history
check a slave makes before it takes a single byte from a master.

RocketMQ 5 gives these jobs to a class of this name driven by its controller; here the
controller is the operator (``PUT /v1/admin/role``, ``POST /v1/admin/fence``) and the HA
protocol stays classic. Epochs (``epochFileCheckpoint``, :mod:`habroker.ha.epoch_file`) say
which master wrote which part of the log; the known epoch is the highest one this broker was
told, and nothing older is obeyed.

Rules (docs/failover.md):
* a fenced broker refuses every produce at once; a controller-mode broker starts fenced;
* becoming master at epoch E cuts a half-received record, and starts epoch E at the max offset;
* a slave joining a master compares epochs (GET_BROKER_EPOCH_CACHE) and, in controller mode
  only, cuts the tail its master never had; in every mode it then proves that the master holds
  its last record byte for byte (VIEW_MESSAGE_BY_ID): otherwise it stops, with
  ``slave.divergence`` saying why, and never appends a different history.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from habroker import fastjson
from habroker.config import BrokerRole, parse_host_port
from habroker.ha.epoch_file import EpochEntry, EpochFileCache, consistent_point
from habroker.metadata import MetadataError
from habroker.remoting import RequestCode, ResponseCode
from habroker.remoting.channel import RemotingError
from habroker.remoting.client import RemotingClient
from habroker.tls_config import client_tls

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)

KNOWN_EPOCH_FILE = "habroker-epoch.json"
AWAITING_ROLE = "awaiting role from controller"


class RoleError(Exception):
    """A role or fence call refused; ``code`` is the HTTP API's error code."""

    def __init__(self, code: str, message: str, http_status: int) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status


#: RocketMQ keeps an epoch in a Java int (EpochEntry) and a brokerId in a long
MAX_EPOCH = 2**31 - 1
MAX_BROKER_ID = 2**63 - 1


@dataclass(frozen=True)
class RoleRequest:
    role: BrokerRole
    epoch: int
    broker_id: int
    ha_master_address: str = ""
    master_http_address: str = ""
    master_address: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoleRequest:
        fields = f"role, epoch (int 1..{MAX_EPOCH}), brokerId (int 0..{MAX_BROKER_ID}), and "
        fields += "for SLAVE haMasterAddress, "
        fields += "masterHttpAddress, masterAddress (host:port)"
        try:
            role = BrokerRole(str(data["role"]))
            epoch, broker_id = data["epoch"], data["brokerId"]
            if type(epoch) is not int or type(broker_id) is not int:
                raise ValueError
            if not (1 <= epoch <= MAX_EPOCH and 0 <= broker_id <= MAX_BROKER_ID):
                raise ValueError
            addresses = [
                data.get(k, "") for k in ("haMasterAddress", "masterHttpAddress", "masterAddress")
            ]
            if not all(isinstance(address, str) for address in addresses):
                raise TypeError
        except (KeyError, ValueError, TypeError):
            raise RoleError("bad_request", f"fields: {fields}", 400) from None
        if role is BrokerRole.SLAVE:
            if broker_id < 1 or not all(addresses):
                raise RoleError("bad_request", f"a SLAVE needs brokerId >= 1; {fields}", 400)
            for key, value in zip(
                ("haMasterAddress", "masterHttpAddress", "masterAddress"), addresses, strict=True
            ):
                try:
                    parse_host_port(value, key=key)
                except ValueError as exc:
                    raise RoleError("bad_request", str(exc), 400) from None
        elif broker_id != 0 or any(addresses):
            raise RoleError("bad_request", "a master has brokerId 0 and no master addresses", 400)
        return cls(role, epoch, broker_id, *addresses)


class ReplicasManager:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        root = broker.config.store_root
        self.epochs = EpochFileCache(root)
        self._known_path = root / KNOWN_EPOCH_FILE
        self.known_epoch = 0
        self.fence_reason: str | None = None
        self.divergence: dict[str, Any] | None = None
        self.truncated_bytes_total = 0
        self._lock = asyncio.Lock()
        self._client = RemotingClient(timeout=3.0, tls=client_tls(broker.config))

    # -- state -------------------------------------------------------------------------------
    @property
    def controller_mode(self) -> bool:
        return self.broker.config.enableControllerMode

    @property
    def fenced(self) -> bool:
        return self.fence_reason is not None

    def load(self) -> None:
        """At startup, after the store: epochs, the known epoch, the initial fence."""
        self.epochs.load()
        try:
            self.known_epoch = int(json.loads(self._known_path.read_text())["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            self.known_epoch = 0
        self.known_epoch = max(self.known_epoch, self.epochs.last_epoch)
        store = self.broker.store
        self.epochs.truncate_from(store.max_phy_offset)
        if self.controller_mode:
            self.fence_reason = AWAITING_ROLE
        elif not self.broker.is_slave and not self.epochs.entries:
            self.epochs.append(1, store.max_phy_offset)  # a classic master's first epoch
            self._know(1)

    def _know(self, epoch: int) -> None:
        if epoch > self.known_epoch:
            self.known_epoch = epoch
            tmp = self._known_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"epoch": epoch}))
            os.replace(tmp, self._known_path)

    def _check_epoch(self, epoch: int) -> None:
        if epoch < self.known_epoch:
            raise RoleError(
                "stale_epoch",
                f"epoch {epoch} is older than the known epoch {self.known_epoch}",
                409,
            )

    def status(self) -> dict[str, Any]:
        return {
            "epoch": self.known_epoch,
            "fenced": self.fenced,
            "fenceReason": self.fence_reason,
            "controllerMode": self.controller_mode,
            "epochEntries": [
                e.to_json() for e in self.epochs.closed(self.broker.store.max_phy_offset)
            ],
        }

    def entry_cache(self) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE's body (EpochEntryCache)."""
        cfg = self.broker.config
        return {
            "clusterName": cfg.brokerClusterName,
            "brokerName": cfg.brokerName,
            "brokerId": cfg.brokerId,
            "epochList": [e.to_json() for e in self.epochs.entries],
            "maxOffset": self.broker.store.max_phy_offset,
        }

    # -- the controller's calls ----------------------------------------------------------------
    async def fence(self, epoch: int) -> dict[str, Any]:
        """Refuse writes from now on; a slave also stops taking bytes from an older master."""
        async with self._lock:
            self._check_epoch(epoch)
            self._know(epoch)
            broker = self.broker
            if broker.is_slave:
                if self.controller_mode and broker.ha_client is not None:
                    broker.ha_client.set_master_address("")  # until told its new master
                    log.warning("fenced at epoch %d: stopped replicating", epoch)
            elif not self.fenced or self.fence_reason == AWAITING_ROLE:
                self.fence_reason = f"fenced at epoch {epoch}"
                log.warning("fenced at epoch %d: writes refused from now on", epoch)
            return {
                "epoch": self.known_epoch,
                "fenced": True,
                "maxOffset": broker.store.max_phy_offset,
            }

    async def set_role(self, req: RoleRequest) -> None:
        async with self._lock:
            self._check_epoch(req.epoch)
            if req.role is BrokerRole.SLAVE:
                await self._become_slave(req)
            else:
                if self.epochs.last_epoch > req.epoch:
                    raise RoleError(
                        "stale_epoch",
                        f"this log already has epoch {self.epochs.last_epoch} > {req.epoch}",
                        409,
                    )
                await self._become_master(req)

    async def _become_master(self, req: RoleRequest) -> None:
        broker = self.broker
        self._know(req.epoch)
        was = broker.role
        if broker.is_slave:
            await broker.stop_slave()
            cut = broker.store.cut_partial_record()
            if cut:
                log.warning("cut %d bytes of a half-received record before taking writes", cut)
        broker.reconfigure(brokerRole=req.role, brokerId=0, haMasterAddress="", masterAddress="")
        self.adopt_replicated_topics()
        if broker.ha_service is None:
            await broker.start_master()
        max_offset = broker.store.max_phy_offset
        self.epochs.truncate_from(max_offset)
        if self.epochs.last_epoch != req.epoch:
            self.epochs.append(req.epoch, max_offset)
        self.fence_reason = None
        self.divergence = None
        log.warning(
            "now %s (brokerId 0) at epoch %d from offset %d (was %s)",
            req.role.value, req.epoch, max_offset, was.value,
        )  # fmt: skip
        broker.register_now()

    def adopt_replicated_topics(self) -> None:
        """Topics whose messages this log holds but whose config the slave had not copied yet
        (metadata is copied every metaSyncInterval): a new master must take writes for them."""
        broker = self.broker
        for topic in broker.store.topics():
            if broker.topics.get(topic) is not None or topic.startswith(("%RETRY%", "%DLQ%")):
                continue
            queues = max(broker.store.queue_ids(topic), default=-1) + 1
            if queues <= 0 or topic == "SCHEDULE_TOPIC_XXXX":
                continue
            try:
                broker.topics.create(topic, queues, queues, 6)
            except MetadataError as exc:
                log.warning("cannot adopt topic %s from the log: %s", topic, exc)
                continue
            log.warning("topic %s adopted from the log with %d queues (its config had not "
                        "reached this slave yet)", topic, queues)  # fmt: skip

    async def _become_slave(self, req: RoleRequest) -> None:
        broker = self.broker
        self._know(req.epoch)
        was = broker.role
        if not broker.is_slave:
            self.fence_reason = f"demoted at epoch {req.epoch}"
            await broker.stop_master()
        broker.reconfigure(
            brokerRole=BrokerRole.SLAVE,
            brokerId=req.broker_id,
            masterAddress=req.master_address,
            masterHttpAddress=req.master_http_address,
        )
        self.fence_reason = None  # a slave refuses writes as a slave
        if broker.ha_client is None:
            broker.reconfigure(haMasterAddress=req.ha_master_address)
            await broker.start_slave()
        else:
            broker.set_master_address(req.ha_master_address, req.master_http_address)
            broker.ha_client.reconnect()
        if was is not BrokerRole.SLAVE:
            log.warning(
                "now SLAVE brokerId %d at epoch %d following %s (was %s)",
                req.broker_id, req.epoch, req.ha_master_address, was.value,
            )  # fmt: skip
        broker.register_now()

    # -- a slave's history check -------------------------------------------------------------
    async def check_history(self, ha_address: str) -> str | None:
        """Before streaming from a master: None to go on, else why not (retried later)."""
        broker = self.broker
        master = broker.master_address
        if not master:
            return None
        store = broker.store
        try:
            answer = await self._client.invoke(master, RequestCode.GET_BROKER_EPOCH_CACHE)
        except RemotingError as exc:
            if self.controller_mode:
                return f"cannot ask master {master} for its epochs: {exc}"
            # classic mode keeps replicating from an HA address whose client port it cannot
            # reach (a stale masterAddress), as RocketMQ does, unchecked
            log.warning("history not checked: master %s does not answer: %s", master, exc)
            return None
        if answer.code == ResponseCode.SUCCESS and answer.body:
            cache = fastjson.loads(answer.body)
            theirs = [EpochEntry.from_json(e) for e in cache.get("epochList") or []]
            their_max = int(cache.get("maxOffset", 0))
            their_last = theirs[-1].epoch if theirs else 0
            if self.controller_mode and their_last < self.known_epoch:
                return f"waiting for master {master} to reach epoch {self.known_epoch}"
            local_max = store.max_phy_offset
            if self.epochs.entries and theirs and local_max > 0:
                point = consistent_point(self.epochs.entries, local_max, theirs, their_max)
                if point < local_max:
                    if point < 0 or not self.controller_mode:
                        return self._diverged(
                            "its epochs are not this log's" if point < 0
                            else "this log has a tail the master never had",
                            local_max, point, their_max,
                        )  # fmt: skip
                    cut = store.truncate_to(point)
                    self.truncated_bytes_total += cut
                    log.warning(
                        "cut %d bytes this log had beyond master %s's history (offset %d to "
                        "%d): never acknowledged by a SYNC master",
                        cut, master, point, local_max,
                    )  # fmt: skip
            local_max = store.max_phy_offset
            self.epochs.replace([e for e in theirs if e.start_offset <= local_max])
        why = await self._verify_tail(master)
        if why is not None:
            return self._diverged(why, store.max_phy_offset, -1, -1)
        if self.divergence is not None:
            log.warning("master %s now holds this log's history; replicating again", master)
        self.divergence = None
        return None

    async def _verify_tail(self, master: str) -> str | None:
        """The master must hold this log's last record byte for byte."""
        store = self.broker.store
        offset = store.last_record_offset()
        if offset is None:
            return None
        mine = store.read_record(offset)
        if mine is None:
            return None
        try:
            answer = await self._client.invoke(
                master, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}
            )
        except RemotingError as exc:
            return f"cannot read the master's record at {offset}: {exc}"
        if answer.code != ResponseCode.SUCCESS:
            return f"the master has no record at this log's last record offset {offset}"
        if bytes(answer.body or b"") != mine:
            return f"the master's record at offset {offset} differs from this log's"
        return None

    def _diverged(self, why: str, local_max: int, point: int, master_max: int) -> str:
        text = f"master's history is not this log's: {why}; not replicating"
        record = {
            "reason": text,
            "localMaxOffset": local_max,
            "consistentOffset": point,
            "masterMaxOffset": master_max,
        }
        if self.divergence != record:
            log.error("%s (local max %d, consistent up to %d)", text, local_max, point)
        self.divergence = record
        return text

    async def close(self) -> None:
        await self._client.close()
