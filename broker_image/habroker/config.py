"""Broker configuration: RocketMQ key names and defaults, a properties file, env overrides.

A broker that silently ignores a misspelt key runs with a configuration nobody asked for, so
an unknown key or a value that does not parse stops startup with a message naming it.
Environment variables ``HABROKER_<key>`` (exact key spelling, e.g. ``HABROKER_brokerId=1``)
override the file; that is how container images and the operator inject per-pod values.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, get_type_hints

ENV_PREFIX = "HABROKER_"


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


def _default_store_root() -> str:
    return str(Path.home() / "store")


@dataclass
class BrokerConfig:
    """Every key the broker understands, with RocketMQ's name and default.

    Keys marked *habroker* have no RocketMQ equivalent; everything else means what it means
    in RocketMQ 4.9 (``BrokerConfig``, ``MessageStoreConfig``, ``NettyServerConfig``).
    """

    # identity
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    brokerIP1: str = "127.0.0.1"
    # network
    bindAddress: str = "127.0.0.1"
    listenPort: int = 10911
    haListenPort: int = 10912
    httpListenPort: int = 10913  # habroker: HTTP API (admin, operator, /metrics, health)
    haMasterAddress: str = ""
    masterHttpAddress: str = (
        ""  # habroker: master's HTTP API (metadata copy); default HA host + httpListenPort
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
    # topics
    autoCreateTopicEnable: bool = False
    defaultTopicQueueNums: int = 4
    # replication
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haTransferBatchSize: int = 32768
    haMaxGapNotInSync: int = 256 * 1024 * 1024
    haSyncFromLastFile: bool = False  # habroker: RocketMQ's classic rule for a new slave
    # reads from slaves
    slaveReadEnable: bool = False
    accessMessageInMemoryMaxRatio: int = 40
    totalPhysicalMemorySize: int = 0  # habroker: 0 = read from the OS; set to test redirection
    # metadata sync (slave)
    metaSyncInterval: int = 10000  # habroker: RocketMQ hard-codes 10 s

    # keys changeable at runtime through the admin API (updateBrokerConfig in RocketMQ)
    RUNTIME_KEYS: ClassVar[tuple[str, ...]] = (
        "slaveReadEnable",
        "accessMessageInMemoryMaxRatio",
        "totalPhysicalMemorySize",
        "haMasterAddress",
        "fileReservedTime",
        "deleteWhen",
        "syncFlushTimeout",
    )

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
    def is_master(self) -> bool:
        return self.brokerRole.is_master

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-key rules; each message names the key so the operator can surface it."""
        if not 0 < self.listenPort < 65536:
            raise ConfigError(f"listenPort={self.listenPort}: must be 1..65535")
        if not 0 < self.haListenPort < 65536:
            raise ConfigError(f"haListenPort={self.haListenPort}: must be 1..65535")
        if not 0 < self.httpListenPort < 65536:
            raise ConfigError(f"httpListenPort={self.httpListenPort}: must be 1..65535")
        ports = {
            "listenPort": self.listenPort,
            "haListenPort": self.haListenPort,
            "httpListenPort": self.httpListenPort,
        }
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
        if not 0 < self.maxMessageSize <= self.mappedFileSizeCommitLog - 1024:
            raise ConfigError(
                f"maxMessageSize={self.maxMessageSize}: must be positive and fit in a commit-log file "
                f"(mappedFileSizeCommitLog={self.mappedFileSizeCommitLog})"
            )
        if not 0 < self.haTransferBatchSize <= 4 * 1024 * 1024 - 12:
            raise ConfigError(
                f"haTransferBatchSize={self.haTransferBatchSize}: 1..4194292 (a slave's 4 MiB frame limit)"
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
            "syncFlushTimeout",
            "cleanResourceInterval",
            "metaSyncInterval",
            "defaultTopicQueueNums",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)}: must be positive")
        if self.fileReservedTime < 0:
            raise ConfigError(f"fileReservedTime={self.fileReservedTime}: must be >= 0 (hours)")
        parse_delete_when(self.deleteWhen)
        if self.haMasterAddress:
            parse_host_port(self.haMasterAddress, key="haMasterAddress")
        if self.masterHttpAddress:
            parse_host_port(self.masterHttpAddress, key="masterHttpAddress")

    # -- construction --------------------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.init]

    @classmethod
    def from_mapping(cls, values: Mapping[str, str], source: str = "config") -> BrokerConfig:
        """Build from string values, refusing unknown keys and unparsable values."""
        hints = get_type_hints(cls)
        known = set(cls.keys())
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            if key not in known:
                suggestion = _closest(key, known)
                hint = f" (did you mean {suggestion}?)" if suggestion else ""
                raise ConfigError(f"{source}: unknown key {key!r}{hint}")
            kwargs[key] = coerce(key, raw, hints[key], source)
        return cls(**kwargs)

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
        return cls.from_mapping(values, source=str(path) if path else "config")

    def with_updates(self, updates: Mapping[str, Any]) -> BrokerConfig:
        """A validated copy with runtime-changeable keys updated (admin API)."""
        hints = get_type_hints(type(self))
        changed: dict[str, Any] = {}
        for key, raw in updates.items():
            if key not in self.RUNTIME_KEYS:
                raise ConfigError(
                    f"{key!r} cannot be changed at runtime; runtime keys: {', '.join(self.RUNTIME_KEYS)}"
                )
            changed[key] = coerce(key, _to_text(raw), hints[key], "update")
        return dataclasses.replace(self, **changed)

    def to_properties(self) -> dict[str, str]:
        return {k: _to_text(getattr(self, k)) for k in self.keys()}


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
            return int(text)
        if isinstance(typ, type) and issubclass(typ, Enum):
            return typ(text)
        return text
    except ValueError as exc:
        expected = ""
        if isinstance(typ, type) and issubclass(typ, Enum):
            expected = " (one of " + ", ".join(m.value for m in typ) + ")"
        raise ConfigError(f"{source}: bad value for {key}: {raw!r}{expected}: {exc}") from None


def read_properties(path: Path) -> dict[str, str]:
    """Java-style properties: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    values: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", stripped)
        if not match:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
        values[match.group(1)] = match.group(2)
    return values


def parse_host_port(text: str, key: str = "address") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}={text!r}: expected host:port")
    return host.strip("[]"), int(port)


def parse_delete_when(text: str) -> set[int]:
    """RocketMQ's deleteWhen: hours of the day separated by ';' (``04`` or ``04;10``)."""
    hours: set[int] = set()
    for part in text.split(";"):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(f"deleteWhen={text!r}: hours 00..23 separated by ';'")
        hours.add(int(part))
    return hours


def _closest(key: str, known: set[str]) -> str | None:
    low = key.lower()
    for candidate in known:
        if candidate.lower() == low:
            return candidate
    import difflib

    matches = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return matches[0] if matches else None
