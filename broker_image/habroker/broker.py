"""BrokerController: one broker's parts and the rules between them.

The store appends and reads, HA replicates, metadata managers keep topics, groups and offsets;
this class decides who may write, how long a producer waits, and where a consumer is sent.
HTTP lives in :mod:`habroker.server` and only translates.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack, cast

from habroker import __version__
from habroker.admin_auth import AdminToken
from habroker.config import BrokerConfig, BrokerRole, FlushDiskType, broker_id_of, parse_host_port
from habroker.dledger.dledger_server import NotLeader
from habroker.dledger.message_store import DLedgerMessageStore
from habroker.dledger.protocol import Body, DLedgerResponseCode
from habroker.dledger_role_change import DLedgerRoleChangeHandler
from habroker.ha import HAAuth, HAClient, HAService
from habroker.metadata import (
    AUTO_CREATE_TOPIC_KEY,
    GROUP_NAME,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    ConsumerOffsetManager,
    DelayOffsetManager,
    MetadataError,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
    system_topics,
)
from habroker.metrics import BrokerCollector, BrokerStats
from habroker.read_policy import suggest_pulling_from_slave, suggest_which_broker
from habroker.registration import NameServerRegistration
from habroker.replicas_manager import ReplicasManager
from habroker.route_info import RouteInfoManager
from habroker.schedule import BadDelayLevel, ScheduleMessageService
from habroker.slave_sync import SlaveSynchronize
from habroker.store import (
    BatchEntry,
    GetMessageResult,
    MessageStore,
    PutResult,
    PutStatus,
)
from habroker.store.store_util import in_memory_span

log = logging.getLogger(__name__)

CONSUMER_OFFSET_PERSIST_INTERVAL = 5.0
SLAVE_READY_GRACE = 30.0


class BrokerError(Exception):
    """A refused request; ``code`` and ``http_status`` shape the HTTP error."""

    def __init__(self, code: str, message: str, http_status: int = 400, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status
        self.details = details


@dataclass(slots=True)
class PullOutcome:
    result: GetMessageResult
    suggest_which_broker_id: int
    retry_immediately: bool = False


class PutOptions(TypedDict, total=False):
    """``produce``'s and ``put_now``'s keyword arguments past the batch and its origin."""

    born_timestamp: int | None
    sys_flag: int  # the producer's bits (COMPRESSED, MULTI_TAGS, ...)
    reconsume_times: int
    wait: bool | None  # the producer's WAIT (None: read from the first entry)
    delay: bool  # a single message whose DELAY property schedules it
    default_queue_nums: int | None  # an auto-created topic's queues
    default_topic: str | None  # the template of an auto-created topic (TBW102)


@dataclass(slots=True)
class PendingPut:
    """A stored put and what its answer still waits for (``ack``)."""

    result: PutResult
    queue_id: int
    started: float  # when the request reached the broker (the produce latency histogram)
    ack: asyncio.Future[Any] | None  # a SYNC slave's PutStatus, or a DLedger quorum's answer
    quorum: bool = False  # ``ack`` is a DLedger answer
    flush_first: bool = False  # classic SYNC_FLUSH: ``flush_then_wait`` before any ack
    waited: float = field(default_factory=time.perf_counter)  # the ack wait's start


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # read first: a broker whose admin token cannot be read refuses to start
        self.admin_token = AdminToken(config.adminTokenFile) if config.adminTokenFile else None
        #: haAuthSecretFile: the authenticated HA handshake (a bad file: no start either)
        self.ha_auth = (
            HAAuth(config.haAuthSecretFile, config.brokerName) if config.haAuthSecretFile else None
        )
        self.dledger_store: DLedgerMessageStore | None = None
        self.dledger_roles: DLedgerRoleChangeHandler | None = None
        if config.enableDLegerCommitLog:
            # an elected leader is the master: every peer starts as a slave (RocketMQ too)
            config = self.config = dataclasses.replace(
                config, brokerRole=BrokerRole.SLAVE, brokerId=broker_id_of(config.dLegerSelfId)
            )
            self.dledger_store = DLedgerMessageStore(config)
            self.store: MessageStore = self.dledger_store
            self.dledger_roles = DLedgerRoleChangeHandler(self, self.dledger_store)
            self.dledger_store.dledger.listeners.append(self.dledger_roles)
        else:
            self.store = MessageStore(config)
        meta_dir = config.metadata_dir
        self.topics = TopicConfigManager(meta_dir)
        if config.autoCreateTopicEnable and self.topics.get(AUTO_CREATE_TOPIC_KEY) is None:
            # RocketMQ's TopicConfigManager: TBW102 is registered like any topic, so a client
            # finds a route for a topic nobody created and sends there with defaultTopic=TBW102
            n = config.defaultTopicQueueNums
            self.topics.create(AUTO_CREATE_TOPIC_KEY, n, n, PERM_READ | PERM_WRITE | PERM_INHERIT)
        own = system_topics(
            config.brokerClusterName,
            config.brokerName,
            cluster_topic=config.clusterTopicEnable,
            broker_topic=config.brokerTopicEnable,
            trace_topic=config.msgTraceTopicName if config.traceTopicEnable else None,
        )
        self.topics.add_missing(own)
        #: TopicValidator's system topics plus those this broker's table was given
        self.system_topic_names = SYSTEM_TOPICS | {c.topicName for c in own}
        self.groups = SubscriptionGroupManager(meta_dir)
        self.offsets = ConsumerOffsetManager(meta_dir)
        self.delays = DelayOffsetManager(meta_dir)
        self.schedule = ScheduleMessageService(config, self.store, self.delays)
        self.stats = BrokerStats()
        self.stats.registry.register(BrokerCollector(self))
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.master_http_address = ""
        self.registered_master_address = ""  # masterAddr from our last REGISTER_BROKER answer
        # a slave: its master's brokerPermission, from the metadata copy (routes show it)
        self.master_broker_permission: int | None = None
        self.routes = RouteInfoManager(self)
        self.registration = NameServerRegistration(self)
        self.started_at = time.monotonic()
        self.ready = False
        self._round_robin: dict[str, int] = {}
        # HA peer address -> (brokerId, listen address, HTTP address), as slaves announce them
        self.slave_identities: dict[str, tuple[int, str, str]] = {}
        self.replicas = ReplicasManager(self)
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def role(self) -> BrokerRole:
        return self.config.brokerRole

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    @property
    def address(self) -> str:
        """This broker's client (remoting) address, as routes and msgIds name it."""
        return f"{self.config.brokerIP1}:{self.config.listenPort}"

    @property
    def store_host(self) -> tuple[str, int]:
        return self.config.brokerIP1, self.config.listenPort

    @property
    def master_address(self) -> str:
        """A slave's master's client address: as its master said when this slave registered,
        else the HA master's host with this broker's listenPort (a group shares its ports)."""
        if not self.is_slave:
            return self.address
        return self.registered_master_address or self.configured_master_address

    @property
    def configured_master_address(self) -> str:
        """The master's client address from configuration alone (masterAddress, else the HA
        master's host with this broker's listenPort)."""
        if self.config.masterAddress:
            return self.config.masterAddress
        if not self.config.haMasterAddress:
            return ""
        host, _ = parse_host_port(self.config.haMasterAddress, key="haMasterAddress")
        return f"{host}:{self.config.listenPort}"

    async def start(self) -> None:
        await self.store.start()
        self.schedule.correct_offsets()  # delayOffset.json fitted to the recovered queues
        self.replicas.load()
        if self.dledger_store is not None:
            pass  # the elections decide (DLedgerRoleChangeHandler)
        elif self.is_slave:
            await self.start_slave()
        else:
            await self.start_master()
        self._tasks.append(
            asyncio.create_task(self._persist_offsets_loop(), name="persist-offsets")
        )
        self.started_at = time.monotonic()
        self.ready = True
        cfg = self.config
        log.info(
            "broker %s id=%d role=%s started: client (remoting) %s:%d, http %s:%d, ha %s",
            cfg.brokerName,
            cfg.brokerId,
            self.role.value,
            cfg.bindAddress,
            cfg.listenPort,
            cfg.bindAddress,
            cfg.httpListenPort,
            f"{cfg.bindAddress}:{cfg.haListenPort}"
            if not self.is_slave
            else f"-> {cfg.haMasterAddress or '(no master address yet)'} "
            f"(a slave leaves haListenPort {cfg.haListenPort} unbound)",
        )

    async def stop(self) -> None:
        self.ready = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.dledger_roles is not None:
            await self.dledger_roles.close()
        await self.drain_slaves()
        await self.stop_slave()
        await self.stop_master()
        await self.replicas.close()
        self.offsets.persist()
        await self.store.shutdown()
        log.info("broker %s id=%d stopped", self.config.brokerName, self.config.brokerId)

    # -- role parts (started at startup, swapped by ReplicasManager at runtime) -------------
    async def start_master(self) -> None:
        self.ha_service = HAService(self.config, self.store, self.ha_auth)
        await self.ha_service.start()
        self.schedule.start()  # RocketMQ: delayed delivery runs on the master only

    async def drain_slaves(self) -> None:
        """A clean stop of a master: its slaves get its last bytes first (within
        ``haShutdownDrainTimeoutMs``), so a slave promoted while it is gone lacks nothing it
        acknowledged. The client faces are closed by now; delayed delivery stops first."""
        timeout_ms = self.config.haShutdownDrainTimeoutMs
        if self.ha_service is None or timeout_ms <= 0:
            return
        await self.schedule.stop()
        await self.ha_service.drain(timeout_ms / 1000)

    async def stop_master(self) -> None:
        """SYNC producers still waiting get FLUSH_SLAVE_TIMEOUT: nobody will ack them now."""
        await self.schedule.stop()
        if self.ha_service is not None:
            await self.ha_service.stop()
            self.ha_service = None

    async def start_slave(self) -> None:
        self.ha_client = HAClient(
            self.config, self.store, self.replicas.check_history, auth=self.ha_auth
        )
        await self.ha_client.start()
        self.master_http_address = self.config.masterHttpAddress or self._default_master_http(
            self.config.haMasterAddress
        )
        self.slave_sync = SlaveSynchronize(self, interval=self.config.metaSyncInterval / 1000)
        self.slave_sync.start()

    async def stop_slave(self) -> None:
        if self.slave_sync is not None:
            await self.slave_sync.stop()
            self.slave_sync = None
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None
        self.registered_master_address = ""

    def reconfigure(self, **updates: Any) -> None:
        """Identity keys changed by a role call, everywhere the config is held."""
        self.config = dataclasses.replace(self.config, **updates)
        self.store.config = self.config
        if self.ha_service is not None:
            self.ha_service.config = self.config
        if self.ha_client is not None:
            self.ha_client.config = self.config

    @property
    def route_broker_permission(self) -> int:
        """The brokerPermission routes of this group show: the master's, also when a slave
        answers (a name server takes queue data from the master alone)."""
        if self.is_slave and self.master_broker_permission is not None:
            return self.master_broker_permission
        return self.config.brokerPermission

    def register_now(self) -> None:
        """Tell the name servers (and, for a slave, its master) about a new role at once."""
        if self.registration.enabled:
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(
                asyncio.create_task(self.registration.register_all(), name="register-now")
            )
        if self.slave_sync is not None:
            self.slave_sync.trigger()

    async def _persist_offsets_loop(self) -> None:
        while True:
            await asyncio.sleep(CONSUMER_OFFSET_PERSIST_INTERVAL)
            try:
                self.offsets.persist()
            except OSError as exc:  # keep serving; the next round tries again
                log.error("cannot persist consumer offsets: %s", exc)

    def readiness(self) -> tuple[bool, str]:
        if not self.ready:
            return False, "starting"
        if self.is_slave and self.ha_client and not self.ha_client.connected:
            if self.replicas.divergence is not None:
                return True, "serving reads; not replicating: " + self.replicas.divergence["reason"]
            if not self.config.haMasterAddress:
                return False, "no haMasterAddress configured"
            if time.monotonic() - self.started_at < SLAVE_READY_GRACE:
                return False, f"not yet connected to master {self.config.haMasterAddress}"
        return True, "ok"

    # -- topics ----------------------------------------------------------------------------
    def is_system_topic(self, topic: str) -> bool:
        """TopicValidator.isSystemTopic: its list, ``rmq_sys_`` names, and the topics this
        broker keeps (its cluster's and its group's, the reply topic, the trace topic)."""
        return topic in self.system_topic_names or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int,
        order: bool = False,
    ) -> tuple[TopicConfig, bool]:
        """An admin's create or update (UPDATE_AND_CREATE_TOPIC, ``POST /v1/topics``): refused
        for a system topic, as AdminBrokerProcessor refuses it; returns (config, changed)."""
        if self.is_system_topic(topic):
            raise BrokerError(
                "system_topic", f"The topic[{topic}] is conflict with system topic.", 400
            )
        return self.topics.create(topic, read_queue_nums, write_queue_nums, perm, order=order)

    def topic_for_write(
        self,
        topic: str,
        client_queue_nums: int | None = None,
        default_topic: str | None = None,
    ) -> TopicConfig:
        """The topic's config, an unknown topic created first when that is allowed.

        A remoting send names ``default_topic`` (TBW102 from the Java client) and its
        ``client_queue_nums``: as RocketMQ's createTopicInSendMessageMethod, the topic is made
        from that template if it exists and may be inherited from (perm 1; TBW102 only while
        autoCreateTopicEnable), with min(client_queue_nums, the template's write queues) queues
        and the template's permission less inherit.  An HTTP produce names no template: with
        autoCreateTopicEnable the topic gets defaultTopicQueueNums queues, read and write.
        A created topic is registered at once."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg
        auto = self.config.autoCreateTopicEnable
        if default_topic is None:
            n, perm = self.config.defaultTopicQueueNums, PERM_READ | PERM_WRITE
            allowed = auto
        else:
            template = self.topics.get(default_topic)
            allowed = (
                template is not None
                and bool(template.perm & PERM_INHERIT)
                and (auto or default_topic != AUTO_CREATE_TOPIC_KEY)
            )
            if template is not None:
                n = template.writeQueueNums
                if client_queue_nums is not None and client_queue_nums > 0:
                    n = min(client_queue_nums, n)
                perm = template.perm & ~PERM_INHERIT
        if not allowed:
            how = "set autoCreateTopicEnable=true"
            if default_topic not in (None, AUTO_CREATE_TOPIC_KEY):
                how = f"give {default_topic} perm 7 (inherit)"
            raise BrokerError(
                "unknown_topic",
                f"topic {topic!r} does not exist (create it with POST /v1/topics or mqadmin "
                f"updateTopic, or {how})",
                404,
            )
        try:
            cfg, _ = self.topics.create(topic, n, n, perm)
        except MetadataError as exc:
            raise BrokerError(exc.code, str(exc)) from None
        self.register_now()  # routes name the new topic before the next round
        return cfg

    def topic_for_read(self, topic: str) -> TopicConfig:
        cfg = self.topics.get(topic)
        if cfg is None and self.is_slave:
            # Created on the master after our last metadata copy: the replicated consume queues
            # are here already, so serve them, and copy the metadata now rather than later.
            queue_ids = self.store.queue_ids(topic)
            if self.slave_sync is not None:
                self.slave_sync.trigger()
            if queue_ids:
                n = max(queue_ids) + 1
                return TopicConfig(topic, n, n)
        if cfg is None:
            raise BrokerError("unknown_topic", f"topic {topic!r} does not exist", 404)
        return cfg

    def _refuse_if_fenced(self, what: str) -> None:
        if self.replicas.fenced:
            raise BrokerError(
                "fenced",
                f"this broker is fenced ({self.replicas.fence_reason}; known epoch "
                f"{self.replicas.known_epoch}) and refuses {what}; use the current master",
                503,
            )

    # -- produce ---------------------------------------------------------------------------
    async def produce(
        self,
        topic: str,
        queue_id: int | None,
        entries: Sequence[BatchEntry],
        born_host: tuple[str, int],
        **options: Unpack[PutOptions],
    ) -> tuple[PutResult, int]:
        """Append a batch and wait as the role and flush type require; returns (result, queueId).

        ``wait`` is the producer's WAIT property (None: read it from the first entry).
        ``delay``: a single message (not a batch) with a DELAY property is stored for delayed
        delivery (SCHEDULE_TOPIC_XXXX, see :mod:`habroker.schedule`), as RocketMQ's put does;
        the queueId returned is still the real one.
        """
        pending = self.put_now(topic, queue_id, entries, born_host, **options)
        if pending.flush_first:
            await self.flush_then_wait(pending)
        outcome = await pending.ack if pending.ack is not None else None
        return self.put_done(pending, outcome), pending.queue_id

    def put_now(
        self,
        topic: str,
        queue_id: int | None,
        entries: Sequence[BatchEntry],
        born_host: tuple[str, int],
        **options: Unpack[PutOptions],
    ) -> PendingPut:
        """``produce`` up to its wait: the batch is stored when this returns, and what the
        answer still waits for is ``ack`` (after ``flush_then_wait`` if ``flush_first``).
        ``put_done`` turns the ack's outcome into the final result. The client port answers
        from the ack's done callback this way, with no task per request."""
        started = time.perf_counter()
        wait = options.get("wait")
        store_topic, store_queue, queue_id, entries = self._route_put(
            topic,
            queue_id,
            entries,
            wait,
            options.get("delay", False),
            options.get("default_queue_nums"),
            options.get("default_topic"),
        )
        record: dict[str, Any] = {  # the stored records' own fields
            "born_host": born_host,
            "born_timestamp": options.get("born_timestamp"),
            "sys_flag": options.get("sys_flag", 0),
            "reconsume_times": options.get("reconsume_times", 0),
        }
        if self.dledger_store is not None:
            # acknowledged once a quorum holds every message, whatever the producer's WAIT:
            # RocketMQ's DLedger commit log waits the same way
            try:
                put = self.dledger_store.put_dledger(store_topic, store_queue, entries, **record)
            except NotLeader as exc:
                raise BrokerError(
                    "not_master", f"this DLedger peer is not the leader: {exc}", 503
                ) from None
            (ack,) = put.acks
            return PendingPut(put.result, queue_id, started, ack, quorum=True)
        result = self.store.put_messages(store_topic, store_queue, entries, **record)
        if wait is None:
            wait = not entries or b"WAIT\x01false" not in entries[0].properties
        if wait and self.config.flushDiskType is FlushDiskType.SYNC_FLUSH:
            return PendingPut(result, queue_id, started, None, flush_first=True)
        return PendingPut(result, queue_id, started, self._replica_wait(result, wait))

    async def flush_then_wait(self, pending: PendingPut) -> None:
        """Classic SYNC_FLUSH: the flush first (FLUSH_DISK_TIMEOUT when it is late), then the
        SYNC slave's ack, if the role asks for one, becomes ``pending.ack``."""
        result = pending.result
        flushed = await self.store.wait_flushed(
            result.next_offset, self.config.syncFlushTimeout / 1000
        )
        if not flushed:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        pending.waited = time.perf_counter()
        pending.ack = self._replica_wait(result, True)

    def put_done(self, pending: PendingPut, outcome: PutStatus | Body | None) -> PutResult:
        """The put's final result from what it waited for, counted. A slave's non-OK status
        replaces the store's; a DLedger answer other than SUCCESS makes it
        FLUSH_SLAVE_TIMEOUT (the entry may still commit under a later leader, or be cut)."""
        result = pending.result
        if pending.quorum:
            self._observe_wait(pending)
            code = int(outcome.get("code", -1)) if isinstance(outcome, dict) else -1
            if code != DLedgerResponseCode.SUCCESS:
                result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
                log.warning(
                    "DLedger put of %d message(s) at %d not acknowledged by a quorum: %s",
                    result.count,
                    result.wrote_offset,
                    DLedgerResponseCode.name_of(code),
                )
        elif isinstance(outcome, PutStatus):
            if outcome is not PutStatus.SLAVE_NOT_AVAILABLE:  # refused at once: no wait
                self._observe_wait(pending)
            if outcome is not PutStatus.PUT_OK:
                result.status = outcome
        self._count_put(result, pending.started)
        return result

    def _observe_wait(self, pending: PendingPut) -> None:
        self.stats.observe(
            self.stats.sync_wait, self._metric_labels(), time.perf_counter() - pending.waited
        )

    def _route_put(
        self,
        topic: str,
        queue_id: int | None,
        entries: Sequence[BatchEntry],
        wait: bool | None,
        delay: bool,
        default_queue_nums: int | None,
        default_topic: str | None,
    ) -> tuple[str, int, int, Sequence[BatchEntry]]:
        """The checks before a put, and where it goes: (store topic, store queue, the queue
        the producer is told, entries). A delayed message is stored in SCHEDULE_TOPIC_XXXX."""
        self._refuse_if_fenced("writes")
        if self.is_slave:
            raise BrokerError(
                "not_master",
                "this broker is a SLAVE and refuses writes; produce to the master",
                403,
                masterAddress=self.master_http_address or None,
            )
        if topic in NOT_ALLOWED_SEND_TOPICS:  # the broker's own (TopicValidator)
            raise BrokerError(
                "topic_not_writable", f"Sending message to topic[{topic}] is forbidden.", 403
            )
        cfg = self.topic_for_write(topic, default_queue_nums, default_topic)
        if not cfg.writable:
            raise BrokerError(
                "topic_not_writable", f"topic {topic!r} has perm={cfg.perm} (no write)", 403
            )
        if queue_id is None or queue_id < 0:
            queue_id = self._round_robin.get(topic, -1) + 1
            queue_id %= cfg.writeQueueNums
            self._round_robin[topic] = queue_id
        elif queue_id >= cfg.writeQueueNums:
            raise BrokerError(
                "unknown_queue",
                f"queueId {queue_id} is out of range: topic {topic!r} has "
                f"{cfg.writeQueueNums} write queues (0..{cfg.writeQueueNums - 1})",
            )
        store_topic, store_queue = topic, queue_id
        if delay and len(entries) == 1:
            try:
                redirected = self.schedule.redirect(topic, queue_id, entries[0], wait)
            except BadDelayLevel as exc:
                raise BrokerError("bad_request", str(exc)) from None
            if redirected is not None:
                store_topic, store_queue, entry = redirected
                entries = [entry]
        return store_topic, store_queue, queue_id, entries

    def _replica_wait(self, result: PutResult, wait: bool) -> asyncio.Future[PutStatus] | None:
        """Classic groups: the SYNC slave's ack the role asks for, as a future."""
        if wait and self.role is BrokerRole.SYNC_MASTER and self.ha_service is not None:
            return self.ha_service.handle_put(result)
        return None

    def _count_put(self, result: PutResult, started: float) -> None:
        self.stats.put_requests += 1
        self.stats.put_messages += result.count
        self.stats.put_bytes += result.wrote_bytes
        self.stats.put_status[result.status.value] += 1
        self.stats.observe(
            self.stats.produce_latency, self._metric_labels(), time.perf_counter() - started
        )

    def _metric_labels(self) -> tuple[str, str]:
        """(broker, brokerId) for the latency histograms; brokerId changes on promotion."""
        return self.config.brokerName, str(self.config.brokerId)

    # -- pull ------------------------------------------------------------------------------
    def check_pull(self, group: str | None) -> None:
        """What a pull passes before the topic's checks, on either face (PullMessageProcessor's
        order): the broker is readable (brokerPermission), and a named group is known (or
        auto-created: autoCreateSubscriptionGroup) and may consume (consumeEnable).  An HTTP
        pull without a group (a reader that keeps its own offsets) skips the group's checks."""
        perm = self.config.brokerPermission
        if not perm & PERM_READ:
            raise BrokerError(
                "broker_not_readable",
                f"the broker[{self.config.brokerIP1}] pulling message is forbidden "
                f"(brokerPermission={perm})",
                403,
            )
        if group is None:
            return
        if not GROUP_NAME.match(group):
            raise BrokerError(
                "bad_group", f"group {group!r}: 1-255 characters of [%|a-zA-Z0-9_-]", 400
            )
        cfg = self.groups.find_config(group, self.config.autoCreateSubscriptionGroup)
        if cfg is None:
            raise BrokerError(
                "unknown_group",
                f"subscription group [{group}] does not exist (autoCreateSubscriptionGroup="
                "false: create it with UPDATE_AND_CREATE_SUBSCRIPTIONGROUP or PUT "
                f"/v1/subscription-groups/{group})",
                404,
            )
        if not cfg.consumeEnable:
            raise BrokerError(
                "group_not_consumable", f"subscription group no permission, {group}", 403
            )

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        group: str | None,
        max_bytes: int,
        tags_codes: Collection[int] | None = None,
        *,
        capped: bool = False,
    ) -> PullOutcome:
        """One pull; ``capped`` applies the ``maxTransfer*`` keys (PULL_MESSAGE, as RocketMQ's
        store does; the HTTP API's caller sets ``max_bytes`` itself)."""
        started = time.perf_counter()
        cfg = self.topic_for_read(topic)
        if not cfg.readable:
            raise BrokerError(
                "topic_not_readable", f"topic {topic!r} has perm={cfg.perm} (no read)", 403
            )
        if not 0 <= queue_id < cfg.readQueueNums:
            raise BrokerError(
                "unknown_queue",
                f"queueId {queue_id} is out of range: topic {topic!r} has "
                f"{cfg.readQueueNums} read queues (0..{cfg.readQueueNums - 1})",
            )
        if offset < 0:
            raise BrokerError("bad_request", f"offset={offset}: must be >= 0")
        if self.is_slave and not self.config.slaveReadEnable:
            # RocketMQ 4.9: PULL_RETRY_IMMEDIATELY, suggest the master; offsets still reported
            result = self.store.get_messages(topic, queue_id, offset, 1)
            result.records = []
            result.message_count = 0
            # 4.9 reports the store's nextBeginOffset here, and a Java push consumer then skips
            # what it never got; the consumer's own offset is the one to retry at the master
            result.next_begin_offset = offset
            return PullOutcome(result, 0, retry_immediately=True)
        result = self.store.get_messages(
            topic, queue_id, offset, max_msgs, max_bytes, tags_codes=tags_codes, capped=capped
        )
        group_cfg = self.groups.find(group)
        span = in_memory_span(
            self.config.totalPhysicalMemorySize, self.config.accessMessageInMemoryMaxRatio
        )
        from_slave = suggest_pulling_from_slave(
            self.store.max_phy_offset, result.max_phy_offset_pulling, span
        )
        suggestion = suggest_which_broker(
            is_slave=self.is_slave,
            slave_read_enable=self.config.slaveReadEnable,
            from_slave=from_slave,
            group_broker_id=group_cfg.brokerId,
            which_broker_when_slow=group_cfg.whichBrokerWhenConsumeSlowly,
        )
        self.stats.pull_requests += 1
        self.stats.pull_messages += result.message_count
        self.stats.observe(
            self.stats.pull_latency, self._metric_labels(), time.perf_counter() - started
        )
        return PullOutcome(result, suggestion)

    def queue_offsets(self, topic: str) -> dict[str, Any]:
        """Min and max queue offset of every read queue (RocketMQ's topic stats)."""
        cfg = self.topic_for_read(topic)
        store = self.store
        return {
            "topic": topic,
            "brokerId": self.config.brokerId,
            "queues": {
                str(q): {
                    "minOffset": store.min_offset_in_queue(topic, q),
                    "maxOffset": store.max_offset_in_queue(topic, q),
                }
                for q in range(cfg.readQueueNums)
            },
        }

    # -- consumer offsets ------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._refuse_if_fenced("consumer offset commits")
        if self.is_slave:
            raise BrokerError(
                "not_master",
                "consumer offsets are committed to the master; slaves copy them",
                403,
                masterAddress=self.master_http_address or None,
            )
        self.topic_for_read(topic)
        try:
            self.offsets.commit(group, topic, queue_id, offset)
        except MetadataError as exc:
            raise BrokerError(exc.code, str(exc)) from None

    # -- admin -----------------------------------------------------------------------------
    def update_config(self, updates: dict[str, Any]) -> BrokerConfig:
        new = self.config.with_updates(updates)
        old_master = self.config.haMasterAddress
        self.config = new
        self.store.config = new
        if self.ha_service is not None:
            self.ha_service.config = new
        if "haMasterAddress" in updates and new.haMasterAddress != old_master:
            self.set_master_address(new.haMasterAddress, None)
        if "brokerPermission" in updates:
            # as RocketMQ: a new topic data version, so name servers take the changed routes
            self.topics.data_version.next()
            self.topics.persist()
            self.register_now()
        log.info("runtime config updated: %s", {k: getattr(new, k) for k in updates})
        return new

    def set_master_address(self, ha_address: str, http_address: str | None) -> None:
        if ha_address:
            parse_host_port(ha_address, key="haMasterAddress")
        if http_address:
            parse_host_port(http_address, key="masterHttpAddress")
        if not self.is_slave or self.ha_client is None:
            raise BrokerError(
                "not_slave",
                f"this broker is {self.role.value}; only a SLAVE has a master address",
                409,
            )
        self.master_http_address = http_address or self._default_master_http(ha_address)
        self.registered_master_address = ""  # until the new master answers a registration
        self.config = dataclasses.replace(
            self.config, haMasterAddress=ha_address, masterHttpAddress=self.master_http_address
        )
        self.store.config = self.config
        self.ha_client.set_master_address(ha_address)
        if self.slave_sync is not None:
            self.slave_sync.trigger()
        log.info(
            "master address set: ha=%s http=%s",
            ha_address or "(none)",
            self.master_http_address or "(none)",
        )

    def _default_master_http(self, ha_address: str) -> str:
        if not ha_address:
            return ""
        host, _ = parse_host_port(ha_address, key="haMasterAddress")
        return f"{host}:{self.config.httpListenPort}"

    def adopt_delay_offsets(self, data: dict[str, Any]) -> None:
        """Slave sync: keep the master's delay-level progress (written only when it moved)."""
        if {
            int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()
        } != self.delays.table:
            self.delays.replace_all(data)

    def note_slave_identity(
        self, ha_address: str, broker_id: int, listen_address: str, http_address: str = ""
    ) -> None:
        """A slave said which HA connection is its own (see SlaveSynchronize). A caller that
        does not know the slave's HTTP address (empty) keeps the one already known."""
        known = self.slave_identities.get(ha_address)
        if not http_address and known is not None and known[:2] == (broker_id, listen_address):
            http_address = known[2]
        identity = (broker_id, listen_address, http_address)
        if known != identity:
            live = (
                {row["address"] for row in self._slave_rows(self.ha_service.status())}
                if self.ha_service
                else set()
            )
            # forget connections that are gone, so the table stays the size of the group
            self.slave_identities = {k: v for k, v in self.slave_identities.items() if k in live}
            self.slave_identities[ha_address] = identity
            log.info(
                "slave brokerId=%d (client %s, http %s) is HA connection %s",
                broker_id,
                listen_address,
                http_address or "?",
                ha_address,
            )

    @staticmethod
    def _slave_rows(master_status: dict[str, object]) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], master_status["slaves"])

    async def transfer_leadership(self, transferee: str) -> dict[str, Any]:
        """DLedger: make ``transferee`` the leader; returns {leaderId, term} once it is."""
        if self.dledger_store is None:
            raise BrokerError("not_dledger", "this broker is not in DLedger mode", 409)
        server = self.dledger_store.dledger
        state = server.state
        if transferee not in state.peers:
            raise BrokerError(
                "unknown_peer",
                f"{transferee!r} is not one of dLegerPeers ({', '.join(state.peers)})",
            )
        if not state.is_leader:
            raise BrokerError(
                "not_leader",
                f"{state.self_id} is not the leader (leader: {state.leader_id or 'none'})",
                409,
                leaderId=state.leader_id,
            )
        if transferee == state.self_id:
            return {"leaderId": state.self_id, "term": state.term}
        answer = await server.transfer_leadership(transferee)
        code = int(answer.get("code", -1))
        if code != DLedgerResponseCode.SUCCESS:
            raise BrokerError(
                "transfer_failed",
                f"leadership transfer to {transferee} failed: {DLedgerResponseCode.name_of(code)}",
                504
                if code
                in (DLedgerResponseCode.TAKE_LEADERSHIP_FAILED, DLedgerResponseCode.NETWORK_ERROR)
                else 409,
            )
        return {"leaderId": transferee, "term": int(answer.get("term", state.term))}

    async def hand_off_leadership(self) -> None:
        """Before a clean stop (SIGTERM: a pod deleted, evicted or rolled) a DLedger leader
        hands leadership to its least-behind live follower, so writes pause for a transfer
        (well under a second) instead of the followers' heartbeat timeout and an election.
        Bounded by ``dLegerShutdownTransferTimeoutMs``; whatever happens, the stop goes on."""
        timeout_ms = self.config.dLegerShutdownTransferTimeoutMs
        if self.dledger_store is None or timeout_ms <= 0:
            return
        server = self.dledger_store.dledger
        if not server.state.is_leader:
            return
        choice = server.shutdown_transferee()
        if choice is None:
            log.warning(
                "stopping as DLedger leader of term %d without handing off: no live peer is "
                "caught up (the others elect after their heartbeat timeout)",
                server.state.term,
            )
            return
        transferee, behind = choice
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                answer = await self.transfer_leadership(transferee)
        except (TimeoutError, BrokerError) as exc:
            log.warning(
                "stopping: leadership transfer to %s (%d entries behind) failed: %s; the others "
                "elect after their heartbeat timeout",
                transferee,
                behind,
                exc or f"no answer within {timeout_ms} ms",
            )
            return
        log.warning(
            "stopping: handed DLedger leadership to %s (term %d) in %.0f ms",
            transferee,
            answer["term"],
            (time.monotonic() - started) * 1000,
        )

    def set_dledger_peers(self, peers: str) -> dict[str, Any]:
        """DLedger: the membership change the operator drives one peer at a time."""
        if self.dledger_store is None:
            raise BrokerError("not_dledger", "this broker is not in DLedger mode", 409)
        server = self.dledger_store.dledger
        try:
            members = server.set_peers(peers)
        except ValueError as exc:
            raise BrokerError("bad_peers", str(exc)) from None
        return {
            "peers": ";".join(f"{k}-{v}" for k, v in members.items()),
            "member": server.state.is_member,
        }

    # -- status ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        cfg = self.config
        store = self.store
        out: dict[str, Any] = {
            "brokerClusterName": cfg.brokerClusterName,
            "brokerName": cfg.brokerName,
            "brokerId": cfg.brokerId,
            "role": cfg.brokerRole.value,
            "flushDiskType": cfg.flushDiskType.value,
            "version": __version__,
            "listenAddress": f"{cfg.brokerIP1}:{cfg.listenPort}",
            "httpAddress": f"{cfg.brokerIP1}:{cfg.httpListenPort}",
            "haListenAddress": f"{cfg.brokerIP1}:{cfg.haListenPort}",
            "externalAddrs": {str(k): v for k, v in self.routes.external.items()},
            "externalPeerAddrs": dict(self.routes.external_peers),
            "minOffset": store.min_phy_offset,
            "maxOffset": store.max_phy_offset,
            "flushedOffset": store.flushed_offset,
            "dispatchedOffset": store.dispatched_offset,
            "confirmOffset": store.max_phy_offset,
            "mappedFileSizeCommitLog": store.mapped_file_size,
            "readPolicy": {
                "slaveReadEnable": cfg.slaveReadEnable,
                "accessMessageInMemoryMaxRatio": cfg.accessMessageInMemoryMaxRatio,
            },
            "ready": self.readiness()[0],
            "uptimeSeconds": round(time.monotonic() - self.started_at, 3),
        }
        out.update(self.replicas.status())
        out["dledger"] = (
            self.dledger_store.dledger.status() if self.dledger_store is not None else None
        )
        if self.ha_service is not None:
            master = self.ha_service.status()
            in_sync = []
            for row in self._slave_rows(master):
                broker_id, listen, http = self.slave_identities.get(
                    row["address"], (None, None, None)
                )
                row["brokerId"] = broker_id
                row["listenAddress"] = listen
                row["httpAddress"] = http or None
                if row["inSync"] and broker_id is not None:
                    in_sync.append(broker_id)
            master["inSyncSet"] = sorted(set(in_sync))
            out["master"] = master
        if self.ha_client is not None:
            slave = dict(self.ha_client.status())
            slave["metadata"] = self.slave_sync.status() if self.slave_sync else None
            slave["divergence"] = self.replicas.divergence
            slave["truncatedBytesTotal"] = self.replicas.truncated_bytes_total
            out["slave"] = slave
        return out
