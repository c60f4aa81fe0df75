"""Broker metadata: topics, subscription groups and consumer offsets.

Kept in ``<storePathRootDir>/config/`` as JSON in the shapes RocketMQ uses (``topics.json``,
``subscriptionGroup.json``, ``consumerOffset.json``) so the files read familiarly, and copied
from master to slave by :class:`habroker.slave_sync.SlaveSynchronize` in the same shapes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)
ConfigT = TypeVar("ConfigT", bound="DataclassInstance")

TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
GROUP_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
PERM_READ = 4
PERM_WRITE = 2
MAX_QUEUE_NUMS = 1024


class MetadataError(ValueError):
    """Bad input to a metadata call; ``code`` becomes the HTTP error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class DataVersion:
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DataVersion:
        if not data:
            return cls()
        return cls(int(data.get("timestamp", 0)), int(data.get("counter", 0)))


def _write_json_atomic(path: Path, payload: Any) -> None:
    """Write-rename-fsync: a crash leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def _read_json(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MetadataError("corrupt_metadata", f"cannot read {path}: {exc}") from None


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = 4
    writeQueueNums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)


class VersionedTable(Generic[ConfigT]):
    """A name → config table persisted as ``{TABLE_KEY: {...}, "dataVersion": {...}}``.

    The dataVersion is how a slave tells that the master's table changed (RocketMQ's rule:
    adopt the master's table whenever the versions differ).
    """

    FILE: ClassVar[str]
    TABLE_KEY: ClassVar[str]
    CONFIG: type[ConfigT]

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / self.FILE
        self.table: dict[str, ConfigT] = {}
        self.data_version = DataVersion()
        data = _read_json(self.path)
        if data:
            self._load(data)

    def _load(self, data: Mapping[str, Any]) -> None:
        known = {f.name for f in fields(self.CONFIG)}
        self.table = {
            name: self.CONFIG(**{k: v for k, v in cfg.items() if k in known})
            for name, cfg in data.get(self.TABLE_KEY, {}).items()
        }
        self.data_version = DataVersion.from_json(data.get("dataVersion"))

    def to_json(self) -> dict[str, Any]:
        return {
            self.TABLE_KEY: {name: asdict(cfg) for name, cfg in sorted(self.table.items())},
            "dataVersion": self.data_version.to_json(),
        }

    def persist(self) -> None:
        _write_json_atomic(self.path, self.to_json())

    def delete(self, name: str) -> bool:
        if self.table.pop(name, None) is None:
            return False
        self.data_version.next()
        self.persist()
        log.info("%s %s deleted", self.TABLE_KEY, name)
        return True

    def replace_all(self, data: Mapping[str, Any]) -> bool:
        """Adopt a master's table if its dataVersion differs (slave metadata sync)."""
        version = DataVersion.from_json(data.get("dataVersion"))
        if version == self.data_version:
            return False
        self._load(data)
        self.persist()
        return True


class TopicConfigManager(VersionedTable[TopicConfig]):
    FILE = "topics.json"
    TABLE_KEY = "topicConfigTable"
    CONFIG = TopicConfig

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create(
        self, topic: str, read_queue_nums: int, write_queue_nums: int, perm: int
    ) -> tuple[TopicConfig, bool]:
        """Create or update; returns (config, changed)."""
        if not TOPIC_NAME.match(topic):
            raise MetadataError(
                "bad_topic", f"topic {topic!r}: 1-127 characters of [%|a-zA-Z0-9_-]"
            )
        for name, value in (
            ("readQueueNums", read_queue_nums),
            ("writeQueueNums", write_queue_nums),
        ):
            if not 1 <= value <= MAX_QUEUE_NUMS:
                raise MetadataError("bad_topic", f"{name}={value}: must be 1..{MAX_QUEUE_NUMS}")
        if perm & ~(PERM_READ | PERM_WRITE | 1) or perm < 0:
            raise MetadataError(
                "bad_topic", f"perm={perm}: a combination of 4 (read), 2 (write), 1 (inherit)"
            )
        new = TopicConfig(topic, read_queue_nums, write_queue_nums, perm)
        old = self.table.get(topic)
        if old == new:
            return old, False
        self.table[topic] = new
        self.data_version.next()
        self.persist()
        log.info(
            "topic %s %s: read=%d write=%d perm=%d",
            topic,
            "updated" if old else "created",
            read_queue_nums,
            write_queue_nums,
            perm,
        )
        return new, True


@dataclass
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True


class SubscriptionGroupManager(VersionedTable[SubscriptionGroupConfig]):
    FILE = "subscriptionGroup.json"
    TABLE_KEY = "subscriptionGroupTable"
    CONFIG = SubscriptionGroupConfig

    def find(self, group: str | None) -> SubscriptionGroupConfig:
        """The group's config, or the defaults a group that was never configured gets."""
        if group and group in self.table:
            return self.table[group]
        return SubscriptionGroupConfig(group or "")

    def update(self, group: str, values: Mapping[str, Any]) -> SubscriptionGroupConfig:
        if not GROUP_NAME.match(group):
            raise MetadataError(
                "bad_group", f"group {group!r}: 1-255 characters of [%|a-zA-Z0-9_-]"
            )
        current = asdict(self.table.get(group) or SubscriptionGroupConfig(group))
        for key, value in values.items():
            if key == "groupName":
                continue
            if key not in current:
                raise MetadataError("bad_group", f"unknown subscription-group field {key!r}")
            expected = type(current[key])
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise MetadataError("bad_group", f"{key}: expected an integer, got {value!r}")
            if expected is bool and not isinstance(value, bool):
                raise MetadataError("bad_group", f"{key}: expected true or false, got {value!r}")
            current[key] = value
        for key in ("brokerId", "whichBrokerWhenConsumeSlowly"):
            if current[key] < 0:
                raise MetadataError("bad_group", f"{key}={current[key]}: must be >= 0")
        cfg = SubscriptionGroupConfig(**current)
        if self.table.get(group) != cfg:
            self.table[group] = cfg
            self.data_version.next()
            self.persist()
            log.info("subscription group %s: %s", group, asdict(cfg))
        return cfg


class ConsumerOffsetManager:
    """``topic@group`` → {queueId: offset}; persisted lazily (offsets change on every commit)."""

    FILE = "consumerOffset.json"

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / self.FILE
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False
        data = _read_json(self.path)
        if data:
            self.table = {
                key: {int(q): int(o) for q, o in queues.items()}
                for key, queues in data.get("offsetTable", {}).items()
            }

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if not GROUP_NAME.match(group):
            raise MetadataError(
                "bad_group", f"group {group!r}: 1-255 characters of [%|a-zA-Z0-9_-]"
            )
        if offset < 0:
            raise MetadataError("bad_request", f"offset={offset}: must be >= 0")
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def clean_topic(self, topic: str) -> None:
        suffix = f"{topic}@"
        for key in [k for k in self.table if k.startswith(suffix)]:
            del self.table[key]
            self.dirty = True

    def to_json(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                key: {str(q): o for q, o in sorted(queues.items())}
                for key, queues in sorted(self.table.items())
            }
        }

    def merge(self, data: Mapping[str, Any]) -> None:
        """Slave sync: RocketMQ's putAll — merge, never delete."""
        for key, queues in data.get("offsetTable", {}).items():
            self.table.setdefault(key, {}).update({int(q): int(o) for q, o in queues.items()})
        self.dirty = True

    def persist(self, force: bool = False) -> None:
        if self.dirty or force:
            _write_json_atomic(self.path, self.to_json())
            self.dirty = False
