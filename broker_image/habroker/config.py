"""Broker configuration: RocketMQ key names and defaults, a properties file, env overrides.

A RocketMQ user's ``broker.conf`` starts habroker as it is: every key a RocketMQ 4.9.7 or
5.3.1 broker reads (:mod:`habroker.rocketmq_keys`) is accepted. The keys habroker implements
are the :class:`BrokerConfig` fields; the others are kept on the config and named in one
startup warning. A broker that silently ignores a misspelt key runs with a configuration
nobody asked for, so a key neither RocketMQ nor habroker knows, or a value that does not parse,
stops startup with a message naming it (and the closest known key).
Environment variables ``HABROKER_<key>`` (exact key spelling, e.g. ``HABROKER_brokerId=1``)
override the file; that is how container images and the operator inject per-pod values.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, get_type_hints

from jproperties import ParseError, Properties

from habroker.remoting.tls import ClientAuth, TlsMode
from habroker.rocketmq_keys import LEGACY_KEYS, ROCKETMQ_KEYS

ENV_PREFIX = "HABROKER_"
log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration key or value the broker refuses to start with."""


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


# RocketMQ's MessageStoreConfig.messageDelayLevel default: level n is the n-th duration
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN = re.compile(r"^([0-9]{1,12})([smhd])$")


def _default_store_root() -> str:
    return str(Path.home() / "store")


#: the most a maxTransferBytes* key may say: a PULL_MESSAGE answer (one message may exceed the
#: cap, up to maxMessageSize) still has to fit the client's 16 MiB remoting frame
MAX_TRANSFER_BYTES = 8 * 1024 * 1024
#: keys whose values are secrets: shown as ``******`` by GET_BROKER_CONFIG and GET /v1/config
SECRET_KEYS = frozenset({"tls.server.keyPassword", "tls.client.keyPassword"})


@dataclass
class BrokerConfig:
    """Every key the broker understands, with RocketMQ's name and default.

    Keys marked *habroker* have no RocketMQ equivalent; everything else means what it means
    in RocketMQ 4.9 (``BrokerConfig``, ``MessageStoreConfig``, ``NettyServerConfig``).
    Any other RocketMQ key given lands in :attr:`unimplemented` (see :meth:`startup_warnings`).
    """

    # identity
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    brokerIP1: str = "127.0.0.1"
    namesrvAddr: str = ""  # name servers to register with, ``host:port;host:port``
    registerNameServerPeriod: int = 30000  # ms; RocketMQ clamps it to 10..60 s
    # network
    bindAddress: str = "127.0.0.1"
    listenPort: int = 10911
    haListenPort: int = 10912
    # habroker: RocketMQ's VIP channel; -1 = listenPort - 2 (what 4.x/5.x brokers open), 0 = none
    fastListenPort: int = -1
    httpListenPort: int = 10913  # habroker: HTTP API (admin, operator, /metrics, health)
    # habroker: a remoting listener for clients outside the cluster; its route answers carry
    # the brokers' external addresses (PUT /v1/admin/external-addresses). 0 = none
    externalListenPort: int = 0
    haMasterAddress: str = ""
    masterAddress: str = ""  # habroker: slave: master's client (remoting) address
    masterHttpAddress: str = (
        ""  # habroker: master's HTTP API (status, operator); default HA host + httpListenPort
    )
    # store
    storePathRootDir: str = field(default_factory=_default_store_root)
    storePathCommitLog: str = ""
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    maxMessageSize: int = 4 * 1024 * 1024
    flushDiskType: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushIntervalConsumeQueue: int = 1000
    syncFlushTimeout: int = 5000
    checkCRCOnRecover: bool = True
    fileReservedTime: int = 72
    deleteWhen: str = "04"
    cleanResourceInterval: int = 10000
    diskMaxUsedSpaceRatio: int = 75
    cleanFileForciblyEnable: bool = True  # above diskSpaceCleanForciblyRatio: the oldest go
    diskSpaceCleanForciblyRatio: int = 85  # (4.9.7: a system property, the same default)
    diskSpaceWarningLevelRatio: int = 90  # above it the store refuses writes (disk full)
    # topics
    autoCreateTopicEnable: bool = False
    defaultTopicQueueNums: int = 4
    autoCreateSubscriptionGroup: bool = True
    # RocketMQ's system topics named after the cluster and the broker group: RW as well as
    # inherit (sendMsgStatus, clusterRT) when on, inherit only when off
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    traceTopicEnable: bool = False  # keep the message-trace topic (msgTraceTopicName)
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    # 6 = read and write; 4 drains writes (routes lose write permission), 2 stops pulls
    brokerPermission: int = 6
    # delayed delivery (ScheduleMessageService) and consumer retries
    messageDelayLevel: str = DEFAULT_MESSAGE_DELAY_LEVEL
    flushDelayOffsetInterval: int = 10000
    # replication
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haTransferBatchSize: int = 32768
    haMaxGapNotInSync: int = 256 * 1024 * 1024
    # habroker: ms an ASYNC master lets new data gather before sending it to its slaves, so
    # one run of frames carries many produces (0 = at once; SYNC masters never wait)
    haAsyncTransferLingerMs: int = 2
    # habroker: on a clean stop (SIGTERM) a master waits this long for its connected slaves
    # to acknowledge its last byte before it closes their connections (0 = close at once)
    haShutdownDrainTimeoutMs: int = 3000
    # habroker: HA connections a master keeps open at once; more are closed at accept
    haMaxConnections: int = 32
    # habroker: a file holding the bearer token /v1/admin/* requires (empty: no check);
    # the operator mounts it from the group's Secret (docs/security.md)
    adminTokenFile: str = ""
    # habroker: a file holding the group's HA secret (empty: the classic, unauthenticated HA
    # protocol, which Java brokers speak); with it, HA connections start with an HMAC
    # challenge-response both ends must pass (docs/security.md, docs/wire-layouts.md)
    haAuthSecretFile: str = ""
    haSyncFromLastFile: bool = False  # habroker: RocketMQ's classic rule for a new slave
    # a slave silent this long (ms) leaves the master's in-sync set (RocketMQ 5's key)
    haMaxTimeSlaveNotCatchup: int = 15000
    # RocketMQ 5: the role comes from a controller (here: the operator, PUT /v1/admin/role);
    # the broker starts with writes fenced until it is told. HA stays classic.
    enableControllerMode: bool = False
    # DLedger mode (RocketMQ's MessageStoreConfig keys): the elected leader is the master
    enableDLegerCommitLog: bool = False
    dLegerGroup: str = ""  # RocketMQ's convention: the brokerName (empty: brokerName)
    dLegerPeers: str = ""  # n0-host:port;n1-host:port;n2-host:port (DLedger RPC addresses)
    dLegerSelfId: str = ""  # n0, n1, ...: this broker's entry in dLegerPeers
    # peers (n1, or n1;n2) a leader hands leadership to once one is caught up
    preferredLeaderId: str = ""
    # habroker: DLedgerConfig's timings (RocketMQ leaves them at these defaults)
    dLegerHeartBeatIntervalMs: int = 2000
    dLegerMaxHeartBeatLeak: int = 3
    dLegerMinVoteIntervalMs: int = 300
    dLegerMaxVoteIntervalMs: int = 1000
    dLegerMaxWaitAckTimeMs: int = 2500
    # habroker: APPENDs to habroker peers carry the data files' bytes (PUSH_RAW, 59104), not
    # DLedger's JSON and base64; a Java peer refuses the code and is sent JSON from then on
    dLegerRawPush: bool = True
    # habroker: on SIGTERM a DLedger leader hands leadership to its least-behind live follower
    # (LEADERSHIP_TRANSFER) within this long before it stops; 0 = stop without handing off
    dLegerShutdownTransferTimeoutMs: int = 3000
    # consumers
    longPollingEnable: bool = True
    # reads from slaves
    slaveReadEnable: bool = False
    accessMessageInMemoryMaxRatio: int = 40
    totalPhysicalMemorySize: int = 0  # habroker: 0 = read from the OS; set to test redirection
    # what one PULL_MESSAGE answers at most: the InMemory pair for data within
    # accessMessageInMemoryMaxRatio % of RAM of the log's end, the InDisk pair further back; at
    # least one message. habroker's defaults are larger than RocketMQ's (32 / 256 KiB, 8 /
    # 64 KiB): a Java client's largest pullBatchSize and 4 MiB, hot or cold, as habroker
    # answered before it read these keys (docs/broker.md)
    maxTransferCountOnMessageInMemory: int = 1024
    maxTransferBytesOnMessageInMemory: int = 4 * 1024 * 1024
    maxTransferCountOnMessageInDisk: int = 1024
    maxTransferBytesOnMessageInDisk: int = 4 * 1024 * 1024
    # security: RocketMQ ACL 1.0 on the remoting ports (docs/security.md)
    aclEnable: bool = False
    # habroker: the plain_acl.yml (RocketMQ: <ROCKETMQ_HOME>/conf/plain_acl.yml);
    # empty = <storePathRootDir>/../conf/plain_acl.yml
    aclFile: str = ""
    # metadata sync (slave)
    metaSyncInterval: int = 10000  # habroker: RocketMQ hard-codes 10 s
    # Keys with RocketMQ's dotted names (no Python identifier can spell them): the field is named
    # in camelCase, metadata["key"] is the key files, the environment and the APIs use.
    # TLS on the remoting listeners (listenPort, fastListenPort, externalListenPort), with the
    # names of RocketMQ's TlsSystemConfig (Java reads them as system properties or from
    # tls.config.file). Default disabled, not RocketMQ's permissive: without a certificate
    # habroker stays plain. Files are read at startup only (docs/security.md).
    tlsServerMode: TlsMode = field(default=TlsMode.DISABLED, metadata={"key": "tls.server.mode"})
    # PEM certificate chain, PEM private key (and its password, if encrypted)
    tlsServerCertPath: str = field(default="", metadata={"key": "tls.server.certPath"})
    tlsServerKeyPath: str = field(default="", metadata={"key": "tls.server.keyPath"})
    tlsServerKeyPassword: str = field(default="", metadata={"key": "tls.server.keyPassword"})
    # none|optional|require, and the PEM CA certificates client certificates are checked against
    tlsServerNeedClientAuth: ClientAuth = field(
        default=ClientAuth.NONE, metadata={"key": "tls.server.need.client.auth"}
    )
    tlsServerTrustCertPath: str = field(default="", metadata={"key": "tls.server.trustCertPath"})
    # the broker's own connections to other client ports (a slave's metadata copy from its
    # master, registration with name servers, the epoch check), as RocketMQ's BrokerOuterAPI:
    # tls.enable speaks TLS; the server's certificate is verified only with
    # tls.test.mode.enable=false and tls.client.authServer=true (RocketMQ's defaults: not)
    tlsEnable: bool = field(default=False, metadata={"key": "tls.enable"})
    tlsTestModeEnable: bool = field(default=True, metadata={"key": "tls.test.mode.enable"})
    tlsClientAuthServer: bool = field(default=False, metadata={"key": "tls.client.authServer"})
    tlsClientTrustCertPath: str = field(default="", metadata={"key": "tls.client.trustCertPath"})
    tlsClientCertPath: str = field(default="", metadata={"key": "tls.client.certPath"})
    tlsClientKeyPath: str = field(default="", metadata={"key": "tls.client.keyPath"})
    tlsClientKeyPassword: str = field(default="", metadata={"key": "tls.client.keyPassword"})
    #: RocketMQ keys given that habroker accepts but does not implement, as written
    unimplemented: dict[str, str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    # keys changeable at runtime through the admin API (updateBrokerConfig in RocketMQ)
    RUNTIME_KEYS: ClassVar[tuple[str, ...]] = (
        "brokerPermission",
        "slaveReadEnable",
        "accessMessageInMemoryMaxRatio",
        "totalPhysicalMemorySize",
        "maxTransferCountOnMessageInMemory",
        "maxTransferBytesOnMessageInMemory",
        "maxTransferCountOnMessageInDisk",
        "maxTransferBytesOnMessageInDisk",
        "haMasterAddress",
        "fileReservedTime",
        "deleteWhen",
        "syncFlushTimeout",
        "cleanFileForciblyEnable",
        "haAsyncTransferLingerMs",
        "haShutdownDrainTimeoutMs",
    )
    # fields that are stored but have no effect yet: warned about like unimplemented keys
    NOT_YET_EFFECTIVE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.validate()

    # -- derived paths -------------------------------------------------------------------
    @property
    def store_root(self) -> Path:
        return Path(self.storePathRootDir)

    @property
    def commit_log_dir(self) -> Path:
        return (
            Path(self.storePathCommitLog)
            if self.storePathCommitLog
            else self.store_root / "commitlog"
        )

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_root / "consumequeue"

    @property
    def metadata_dir(self) -> Path:
        return self.store_root / "config"

    @property
    def acl_file(self) -> Path:
        return (
            Path(self.aclFile)
            if self.aclFile
            else self.store_root.parent / "conf" / "plain_acl.yml"
        )

    @property
    def fast_listen_port(self) -> int:
        """The VIP channel's port, or 0 when there is none."""
        if self.fastListenPort < 0:
            return self.listenPort - 2 if self.listenPort > 2 else 0
        return self.fastListenPort

    @property
    def is_master(self) -> bool:
        return self.brokerRole.is_master

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """messageDelayLevel in milliseconds; index 0 is delay level 1."""
        return parse_delay_levels(self.messageDelayLevel)

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-key rules; each message names the key so the operator can surface it."""
        if not 0 < self.listenPort < 65536:
            raise ConfigError(f"listenPort={self.listenPort}: must be 1..65535")
        if not 0 < self.haListenPort < 65536:
            raise ConfigError(f"haListenPort={self.haListenPort}: must be 1..65535")
        if not 0 < self.httpListenPort < 65536:
            raise ConfigError(f"httpListenPort={self.httpListenPort}: must be 1..65535")
        if not 0 <= self.externalListenPort < 65536:
            raise ConfigError(f"externalListenPort={self.externalListenPort}: 0 (none) or a port")
        if not -1 <= self.fastListenPort < 65536:
            raise ConfigError(
                f"fastListenPort={self.fastListenPort}: -1 (listenPort - 2), 0 (none) or a port"
            )
        ports = {
            "listenPort": self.listenPort,
            "haListenPort": self.haListenPort,
            "httpListenPort": self.httpListenPort,
        }
        if self.fast_listen_port:
            ports["fastListenPort"] = self.fast_listen_port
        if self.externalListenPort:
            ports["externalListenPort"] = self.externalListenPort
        for key, port in ports.items():
            clash = [k for k, p in ports.items() if p == port and k != key]
            if clash:
                raise ConfigError(f"{key}={port}: the same port as {clash[0]}; each needs its own")
        if self.brokerId < 0:
            raise ConfigError(f"brokerId={self.brokerId}: must be >= 0")
        if self.brokerRole.is_master and self.brokerId != 0:
            raise ConfigError(
                f"brokerId={self.brokerId}: a master ({self.brokerRole.value}) has brokerId 0"
            )
        if self.brokerRole is BrokerRole.SLAVE and self.brokerId == 0:
            raise ConfigError("brokerId=0: a SLAVE needs a brokerId >= 1")
        if self.mappedFileSizeCommitLog < 4096:
            raise ConfigError(
                f"mappedFileSizeCommitLog={self.mappedFileSizeCommitLog}: at least 4096"
            )
        if self.mappedFileSizeConsumeQueue < 20 or self.mappedFileSizeConsumeQueue % 20:
            raise ConfigError(
                f"mappedFileSizeConsumeQueue={self.mappedFileSizeConsumeQueue}: a positive multiple of 20"
            )
        if self.maxMessageSize <= 0:
            raise ConfigError(f"maxMessageSize={self.maxMessageSize}: must be positive")
        if not 0 < self.haTransferBatchSize <= 4 * 1024 * 1024 - 12:
            raise ConfigError(
                f"haTransferBatchSize={self.haTransferBatchSize}: 1..4194292 (a slave's 4 MiB frame limit)"
            )
        if not 0 <= self.haAsyncTransferLingerMs <= 1000:
            raise ConfigError(
                f"haAsyncTransferLingerMs={self.haAsyncTransferLingerMs}: 0..1000 (ms)"
            )
        if not 0 <= self.haShutdownDrainTimeoutMs <= 60000:
            raise ConfigError(
                f"haShutdownDrainTimeoutMs={self.haShutdownDrainTimeoutMs}: 0..60000 (ms; "
                "0 closes the slaves' connections at once)"
            )
        if not 0 <= self.brokerPermission <= 7:
            raise ConfigError(
                f"brokerPermission={self.brokerPermission}: a sum of 4 (read), 2 (write), "
                "1 (inherit)"
            )
        if not 0 <= self.accessMessageInMemoryMaxRatio <= 100:
            raise ConfigError(
                f"accessMessageInMemoryMaxRatio={self.accessMessageInMemoryMaxRatio}: 0..100"
            )
        for key in (
            "flushIntervalCommitLog",
            "flushIntervalConsumeQueue",
            "haSendHeartbeatInterval",
            "haHousekeepingInterval",
            "haMaxConnections",
            "syncFlushTimeout",
            "cleanResourceInterval",
            "metaSyncInterval",
            "defaultTopicQueueNums",
            "flushDelayOffsetInterval",
            "maxTransferCountOnMessageInMemory",
            "maxTransferCountOnMessageInDisk",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)}: must be positive")
        for key in (
            "maxTransferBytesOnMessageInMemory",
            "maxTransferBytesOnMessageInDisk",
        ):
            if not 0 < getattr(self, key) <= MAX_TRANSFER_BYTES:
                raise ConfigError(
                    f"{key}={getattr(self, key)}: 1..{MAX_TRANSFER_BYTES} (a pull's answer has to "
                    "fit a client's 16 MiB frame with its header)"
                )
        if self.totalPhysicalMemorySize < 0:
            raise ConfigError(
                f"totalPhysicalMemorySize={self.totalPhysicalMemorySize}: must be >= 0 (0 = the OS's)"
            )
        for key in (
            "diskMaxUsedSpaceRatio",
            "diskSpaceCleanForciblyRatio",
            "diskSpaceWarningLevelRatio",
        ):
            if not 1 <= getattr(self, key) <= 100:
                raise ConfigError(f"{key}={getattr(self, key)}: 1..100 (percent of the disk)")
        if self.fileReservedTime < 0:
            raise ConfigError(f"fileReservedTime={self.fileReservedTime}: must be >= 0 (hours)")
        parse_delete_when(self.deleteWhen)
        parse_delay_levels(self.messageDelayLevel)
        if self.haMasterAddress:
            parse_host_port(self.haMasterAddress, key="haMasterAddress")
        if self.masterHttpAddress:
            parse_host_port(self.masterHttpAddress, key="masterHttpAddress")
        if self.masterAddress:
            parse_host_port(self.masterAddress, key="masterAddress")
        if self.enableDLegerCommitLog:
            self._validate_dledger()
        self._validate_tls()

    def _validate_tls(self) -> None:
        if self.tlsServerMode is not TlsMode.DISABLED:
            for key, value in (
                ("tls.server.certPath", self.tlsServerCertPath),
                ("tls.server.keyPath", self.tlsServerKeyPath),
            ):
                if not value:
                    raise ConfigError(
                        f"{key}: required when tls.server.mode={self.tlsServerMode.value} "
                        "(a PEM file; see docs/security.md)"
                    )
        if self.tlsServerNeedClientAuth is not ClientAuth.NONE and not self.tlsServerTrustCertPath:
            raise ConfigError(
                "tls.server.trustCertPath: required when tls.server.need.client.auth="
                f"{self.tlsServerNeedClientAuth.value} (the CA certificates client "
                "certificates are checked against)"
            )

    def _validate_dledger(self) -> None:
        if not self.dLegerSelfId:
            raise ConfigError(
                "dLegerSelfId: required when enableDLegerCommitLog=true (n0, n1, ...)"
            )
        peers = parse_peers(self.dLegerPeers, self.dLegerSelfId)
        broker_id_of(self.dLegerSelfId)
        for preferred in self.preferred_leader_ids:
            if preferred not in peers:
                raise ConfigError(
                    f"preferredLeaderId={self.preferredLeaderId}: {preferred} is not one of "
                    f"dLegerPeers ({', '.join(peers)})"
                )
        for key in (
            "dLegerHeartBeatIntervalMs",
            "dLegerMaxHeartBeatLeak",
            "dLegerMinVoteIntervalMs",
            "dLegerMaxWaitAckTimeMs",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)}: must be positive")
        if self.dLegerShutdownTransferTimeoutMs < 0:
            raise ConfigError(
                f"dLegerShutdownTransferTimeoutMs={self.dLegerShutdownTransferTimeoutMs}: "
                "0 (stop without handing off leadership) or more"
            )
        if self.dLegerMaxVoteIntervalMs <= self.dLegerMinVoteIntervalMs:
            raise ConfigError(
                f"dLegerMaxVoteIntervalMs={self.dLegerMaxVoteIntervalMs}: must be greater than "
                f"dLegerMinVoteIntervalMs={self.dLegerMinVoteIntervalMs}"
            )

    @property
    def dledger_group(self) -> str:
        return self.dLegerGroup or self.brokerName

    @property
    def preferred_leader_ids(self) -> tuple[str, ...]:
        """``preferredLeaderId`` split as DLedgerConfig splits it (on ``;``)."""
        return tuple(p.strip() for p in self.preferredLeaderId.split(";") if p.strip())

    def startup_warnings(self) -> list[str]:
        """What a user should hear at startup: keys without effect, a message-size mismatch."""
        warnings = []
        inert = sorted(
            {*self.unimplemented, *(k for k in self.NOT_YET_EFFECTIVE if getattr(self, k))}
        )
        if inert:
            warnings.append(
                f"{len(inert)} RocketMQ key(s) accepted but not implemented by habroker "
                f"(no effect): {', '.join(inert)}"
            )
        if self.maxMessageSize > self.mappedFileSizeCommitLog - 1024:
            warnings.append(
                f"maxMessageSize={self.maxMessageSize} does not fit in a commit-log file "
                f"(mappedFileSizeCommitLog={self.mappedFileSizeCommitLog}): a message that "
                "large is refused when it is put"
            )
        return warnings

    # -- construction --------------------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        """The key names files, the environment and the APIs use (RocketMQ's spelling)."""
        return [f.metadata.get("key", f.name) for f in fields(cls) if f.init]

    @classmethod
    def field_names(cls) -> dict[str, str]:
        """key -> dataclass field name (they differ only for dotted keys)."""
        return {f.metadata.get("key", f.name): f.name for f in fields(cls) if f.init}

    @classmethod
    def from_mapping(cls, values: Mapping[str, str], source: str = "config") -> BrokerConfig:
        """Build from string values; RocketMQ keys habroker lacks go to ``unimplemented``.

        Refuses keys neither RocketMQ nor habroker knows and values that do not parse (also
        for unimplemented keys: a value Java would silently drop is a mistake worth naming).
        """
        hints = get_type_hints(cls)
        names = cls.field_names()
        known = set(names)
        kwargs: dict[str, Any] = {}
        unimplemented: dict[str, str] = {}
        for key, raw in values.items():
            if key in known:
                kwargs[names[key]] = coerce(key, raw, hints[names[key]], source)
            elif key in ROCKETMQ_KEYS or key in LEGACY_KEYS:
                _check_rocketmq_value(key, raw, source)
                unimplemented[key] = raw
            else:
                suggestion = _closest(key, known | ROCKETMQ_KEYS.keys())
                hint = f" (did you mean {suggestion}?)" if suggestion else ""
                raise ConfigError(
                    f"{source}: unknown key {key!r}{hint}: neither RocketMQ 4.9/5.x nor "
                    "habroker has it"
                )
        config = cls(**kwargs)
        config.unimplemented = unimplemented
        return config

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> BrokerConfig:
        """File, then ``HABROKER_*`` environment, then explicit overrides (CLI ``--set``, tests)."""
        overrides = {**(overrides or {}), **kwargs}
        values: dict[str, str] = {}
        if path is not None:
            values.update(read_properties(Path(path)))
        env = os.environ if environ is None else environ
        for name, value in env.items():
            if name.startswith(ENV_PREFIX):
                values[name[len(ENV_PREFIX) :]] = value
        values.update({k: _to_text(v) for k, v in overrides.items()})
        config = cls.from_mapping(values, source=str(path) if path else "config")
        for warning in config.startup_warnings():
            log.warning("%s", warning)
        return config

    def with_updates(self, updates: Mapping[str, Any]) -> BrokerConfig:
        """A validated copy with runtime-changeable keys updated (admin API)."""
        hints = get_type_hints(type(self))
        changed: dict[str, Any] = {}
        for key, raw in updates.items():
            if key not in self.RUNTIME_KEYS:
                raise ConfigError(
                    f"{key!r} cannot be changed at runtime; runtime keys: {', '.join(self.RUNTIME_KEYS)}"
                )
            text = _to_text(raw)
            if key in ROCKETMQ_KEYS or key in LEGACY_KEYS:
                _check_rocketmq_value(key, text, "update")
            changed[key] = coerce(key, text, hints[key], "update")
        new = dataclasses.replace(self, **changed)
        new.unimplemented = dict(self.unimplemented)
        return new

    def to_properties(self, *, reveal_secrets: bool = False) -> dict[str, str]:
        """Every key with its value as text; secrets (:data:`SECRET_KEYS`) that are set show as
        ``******`` unless ``reveal_secrets``."""
        props = {k: _to_text(getattr(self, name)) for k, name in self.field_names().items()}
        if not reveal_secrets:
            for key in SECRET_KEYS:
                if props.get(key):
                    props[key] = "******"
        return props


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def coerce(key: str, raw: str, typ: Any, source: str) -> Any:
    text = raw.strip()
    try:
        if typ is bool:
            low = text.lower()
            if low not in ("true", "false"):
                raise ValueError("expected true or false")
            return low == "true"
        if typ is int:
            value = int(text)
            if not -(2**63) <= value < 2**63:
                raise ValueError("out of range for a Java long")
            return value
        if isinstance(typ, type) and issubclass(typ, Enum):
            return typ(text)
        return text
    except ValueError as exc:
        expected = ""
        if isinstance(typ, type) and issubclass(typ, Enum):
            expected = " (one of " + ", ".join(m.value for m in typ) + ")"
        raise ConfigError(f"{source}: bad value for {key}: {raw!r}{expected}: {exc}") from None


def _check_rocketmq_value(key: str, raw: str, source: str) -> None:
    """The value must parse as the Java setter's type (RocketMQ would drop it silently)."""
    typ = ROCKETMQ_KEYS[key][0] if key in ROCKETMQ_KEYS else LEGACY_KEYS[key]
    text = raw.strip()
    try:
        if typ in ("int", "long"):
            bits = 31 if typ == "int" else 63
            if not -(2**bits) <= int(text) < 2**bits:
                raise ValueError(f"out of range for a Java {typ}")
        elif typ in ("double", "float"):
            float(text)
        elif typ == "boolean" and text.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
    except ValueError as exc:
        raise ConfigError(f"{source}: bad value for {key} ({typ}): {raw!r}: {exc}") from None


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file, the whole format (jproperties): ``key=value``,
    ``key: value``, ``key value``, ``#``/``!`` comments, ``\\`` line continuations and
    escapes (``\\uXXXX``). Read as UTF-8, or ISO-8859-1 (Java's own reading) when the bytes
    are not UTF-8. A later duplicate key wins, as in Java."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        encoding = "iso-8859-1"
    props = Properties()
    try:
        props.load(data, encoding)
    except ParseError as exc:
        raise ConfigError(f"{path}:{exc.line_number}: {exc.message}") from None
    return {str(k): str(v) for k, v in props.properties.items()}


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def properties_line(key: str, value: str) -> str:
    """``key=value`` escaped so :func:`read_properties` (and Java) read back exactly these
    strings: backslashes and line breaks always, separators and comment marks in the key,
    leading blanks in the value."""

    def escape(text: str, specials: str) -> str:
        return "".join(_ESCAPES.get(c) or ("\\" + c if c in specials else c) for c in text)

    key_text = escape(key, " =:#!")
    value_text = escape(value, "")
    stripped = value_text.lstrip(" ")
    value_text = "\\ " * (len(value_text) - len(stripped)) + stripped
    return f"{key_text}={value_text}"


#: a host name, an IPv4 address or a bracketed IPv6 address (openapi.yaml's HostPort says the same)
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
_PORT = re.compile(r"[1-9][0-9]{0,4}")


def parse_host_port(text: str, key: str = "address") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not _PORT.fullmatch(port) or int(port) > 65535:
        raise ConfigError(f"{key}={text!r}: expected host:port")
    return host.strip("[]"), int(port)


def parse_peers(text: str, self_id: str | None) -> dict[str, str]:
    """dLegerPeers ``n0-host:port;n1-host:port`` → ``{"n0": "host:port", ...}`` in order;
    ``self_id`` must be one of them unless None (a membership that may leave this peer out)."""
    peers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        peer_id, sep, address = item.partition("-")
        host, colon, port = address.rpartition(":")
        if not sep or not peer_id or not colon or not host or not port.isdigit():
            raise ConfigError(f"dLegerPeers entry {item!r}: expected <id>-<host>:<port>")
        if peer_id in peers:
            raise ConfigError(f"dLegerPeers names peer {peer_id!r} twice")
        peers[peer_id] = address
    if not peers:
        raise ConfigError("dLegerPeers is empty: a DLedger group needs its peers")
    if self_id is not None and self_id not in peers:
        raise ConfigError(f"dLegerSelfId={self_id}: not one of dLegerPeers ({', '.join(peers)})")
    return peers


def broker_id_of(self_id: str) -> int:
    """The brokerId a DLedger follower registers with: RocketMQ's ``selfId[1:] + 1``."""
    try:
        return int(self_id[1:]) + 1
    except ValueError:
        raise ConfigError(
            f"dLegerSelfId={self_id}: RocketMQ derives brokerId from the digits after the "
            "first letter (n0, n1, ...)"
        ) from None


def parse_delete_when(text: str) -> set[int]:
    """RocketMQ's deleteWhen: hours of the day separated by ';' (``04`` or ``04;10``)."""
    hours: set[int] = set()
    for part in text.split(";"):
        part = part.strip(" ")
        if not re.fullmatch(r"[0-9]{1,2}", part) or not 0 <= int(part) <= 23:
            raise ConfigError(f"deleteWhen={text!r}: hours 00..23 separated by ';'")
        hours.add(int(part))
    return hours


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """RocketMQ's messageDelayLevel: durations ``<n><s|m|h|d>`` separated by spaces."""
    levels: list[int] = []
    for token in text.split():
        match = _DELAY_TOKEN.match(token)
        if match is None:
            raise ConfigError(
                f"messageDelayLevel={text!r}: {token!r} is not a duration like 5s, 2m, 1h or 1d"
            )
        levels.append(int(match.group(1)) * _DELAY_UNIT_MS[match.group(2)])
    if not levels:
        raise ConfigError(f"messageDelayLevel={text!r}: at least one delay level is needed")
    return tuple(levels)


def _closest(key: str, known: set[str]) -> str | None:
    low = key.lower()
    for candidate in sorted(known):
        if candidate.lower() == low:
            return candidate
    matches = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return matches[0] if matches else None
