"""Broker metadata: topics, subscription groups, consumer and delay offsets.

Kept in ``<storePathRootDir>/config/`` in the files, shapes and JSON dialect RocketMQ uses
(``topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``, ``delayOffset.json``;
fastjson, so integer map keys are unquoted: :mod:`habroker.fastjson`). A store moves between a
Java broker and habroker in either direction: fields habroker does not model (a 5.x topic's
``attributes``, a group's ``groupRetryPolicy``, ``forbiddenTable``) are kept and written back.
Like RocketMQ, a missing or unreadable file falls back to its ``.bak`` copy. The tables are
copied from master to slave by :class:`habroker.slave_sync.SlaveSynchronize` in the same shapes.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from habroker import fastjson
from habroker.message import SCHEDULE_TOPIC

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)
ConfigT = TypeVar("ConfigT", bound="DataclassInstance")

TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
GROUP_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1  # a topic new topics may be created from (TBW102)


def registered_perm(topic_perm: int, broker_permission: int) -> int:
    """A topic's permission as routes show it: cut by brokerPermission when the broker is not
    both readable and writable (RocketMQ's registerBrokerAll), so clients avoid it."""
    if broker_permission & (PERM_READ | PERM_WRITE) == PERM_READ | PERM_WRITE:
        return topic_perm
    return topic_perm & broker_permission


#: TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC: the route a client asks for a topic nobody created
AUTO_CREATE_TOPIC_KEY = "TBW102"
MAX_QUEUE_NUMS = 1024


class MetadataError(ValueError):
    """Bad input to a metadata call; ``code`` becomes the HTTP error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class DataVersion:
    """RocketMQ's DataVersion; ``stateVersion`` is 5.x's (4.9 readers ignore the field)."""

    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0
    stateVersion: int = 0

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {
            "counter": self.counter,
            "stateVersion": self.stateVersion,
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DataVersion:
        if not data:
            return cls()
        return cls(
            int(data.get("timestamp", 0)),
            int(data.get("counter", 0)),
            int(data.get("stateVersion", 0)),
        )


def _write_json_atomic(path: Path, payload: Any) -> None:
    """Write-rename-fsync: a crash leaves the old file or the new one, never half of one.

    The text is what RocketMQ's ``encode(true)`` writes: fastjson's tab-indented layout.
    """
    _write_text_atomic(path, fastjson.dumps(payload, pretty=True))


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
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


def _read_json(path: Path) -> dict[str, Any] | None:
    """The file's JSON object; RocketMQ's rule: a missing, empty or unreadable file yields to
    ``<file>.bak`` (Java's writer leaves only the ``.bak`` for a moment while replacing)."""
    data, error = _read_one(path)
    if data is not None:
        return data
    backup, _ = _read_one(path.with_name(path.name + ".bak"))
    if backup is not None:
        log.warning("%s: %s; loaded %s.bak instead", path, error or "missing", path.name)
        return backup
    if error:
        raise MetadataError("corrupt_metadata", f"cannot read {path}: {error}")
    return None


def _read_one(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(object, None), or (None, why not); (None, None) for a missing or empty file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, str(exc)
    if not text.strip():
        return None, None
    try:
        data = fastjson.loads(text)
    except ValueError as exc:
        return None, str(exc)
    if not isinstance(data, dict):
        return None, f"expected a JSON object, got {type(data).__name__}"
    return data, None


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
        #: per entry, the fields RocketMQ has and habroker does not model, kept verbatim
        self.entry_extra: dict[str, dict[str, Any]] = {}
        #: top-level members other than the table and dataVersion (5.x ``forbiddenTable``)
        self.extra: dict[str, Any] = {}
        self.data_version = DataVersion()
        data = _read_json(self.path)
        if data:
            self._load(data)

    def _load(self, data: Mapping[str, Any]) -> None:
        known = {f.name for f in fields(self.CONFIG)}
        table: dict[str, ConfigT] = {}
        entry_extra: dict[str, dict[str, Any]] = {}
        for name, cfg in (data.get(self.TABLE_KEY) or {}).items():
            table[name] = self.CONFIG(**{k: v for k, v in cfg.items() if k in known})
            extra = {k: v for k, v in cfg.items() if k not in known}
            if extra:
                entry_extra[name] = extra
        self.table, self.entry_extra = table, entry_extra
        self.extra = {k: v for k, v in data.items() if k not in (self.TABLE_KEY, "dataVersion")}
        self.data_version = DataVersion.from_json(data.get("dataVersion"))

    def entry_json(self, name: str) -> dict[str, Any]:
        """One entry as RocketMQ writes it: its fields in name order, unknown ones kept."""
        merged = {**self.entry_extra.get(name, {}), **asdict(self.table[name])}
        return dict(sorted(merged.items()))

    def to_json(self) -> dict[str, Any]:
        members = {
            **self.extra,
            "dataVersion": self.data_version.to_json(),
            self.TABLE_KEY: {name: self.entry_json(name) for name in sorted(self.table)},
        }
        return dict(sorted(members.items()))

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


SCHEDULE_TOPIC_QUEUE_NUMS = 18  # one queue per delay level of SCHEDULE_TOPIC_XXXX
#: TopicValidator's system topics (with those named after the broker's cluster and group, and
#: any ``rmq_sys_`` name): never created or updated by an admin request
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: TopicValidator's topics no client may send to (the broker's own)
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"


def system_topics(
    cluster: str,
    broker_name: str,
    *,
    cluster_topic: bool = True,
    broker_topic: bool = True,
    trace_topic: str | None = None,
) -> list[TopicConfig]:
    """The topics RocketMQ 4.9.7's TopicConfigManager puts in every broker's table before it
    loads topics.json (TBW102 aside: it depends on autoCreateTopicEnable). Queue counts and
    permissions as there: a TopicConfig's defaults are 16 queues and RW."""
    rw = PERM_READ | PERM_WRITE
    out = [
        TopicConfig("SELF_TEST_TOPIC", 1, 1, rw),
        TopicConfig("BenchmarkTest", 1024, 1024, rw),
        TopicConfig(cluster, 16, 16, PERM_INHERIT | (rw if cluster_topic else 0)),
        TopicConfig(broker_name, 1, 1, PERM_INHERIT | (rw if broker_topic else 0)),
        TopicConfig("OFFSET_MOVED_EVENT", 1, 1, rw),
        TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS, rw),
    ]
    if trace_topic is not None:
        out.append(TopicConfig(trace_topic, 1, 1, rw))
    out.append(TopicConfig(f"{cluster}_{REPLY_TOPIC_POSTFIX}", 1, 1, rw))
    return out


class TopicConfigManager(VersionedTable[TopicConfig]):
    FILE = "topics.json"
    TABLE_KEY = "topicConfigTable"
    CONFIG = TopicConfig

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def add_missing(self, configs: list[TopicConfig]) -> None:
        """Put each of ``configs`` whose topic the table does not hold, in memory only: what
        topics.json says wins (a Java broker reads the file over its system topics), and the
        next write of the file carries them, as a Java broker's does."""
        for config in configs:
            self.table.setdefault(config.topicName, config)

    def create(
        self,
        topic: str,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int,
        order: bool = False,
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
        if perm & ~(PERM_READ | PERM_WRITE | PERM_INHERIT) or perm < 0:
            raise MetadataError(
                "bad_topic", f"perm={perm}: a combination of 4 (read), 2 (write), 1 (inherit)"
            )
        new = TopicConfig(topic, read_queue_nums, write_queue_nums, perm, order=order)
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


GROUP_FIELD_RANGES = (
    ("retryQueueNums", 0, 2**31 - 1),
    ("retryMaxTimes", -(2**31), 2**31 - 1),
    ("brokerId", 0, 2**63 - 1),
    ("whichBrokerWhenConsumeSlowly", 0, 2**63 - 1),
)


#: MixAll.CID_RMQ_SYS_PREFIX: the broker's own consumer groups, found even without auto-create
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"


class SubscriptionGroupManager(VersionedTable[SubscriptionGroupConfig]):
    FILE = "subscriptionGroup.json"
    TABLE_KEY = "subscriptionGroupTable"
    CONFIG = SubscriptionGroupConfig

    def find_config(self, group: str, auto_create: bool) -> SubscriptionGroupConfig | None:
        """RocketMQ's findSubscriptionGroupConfig: the group's config.  An unknown group with a
        valid name is created with the defaults (and written, as RocketMQ writes it) when
        ``auto_create`` (autoCreateSubscriptionGroup) is on or it is a system group; else None
        (pulls and send-backs then answer SUBSCRIPTION_GROUP_NOT_EXIST)."""
        found = self.table.get(group)
        if found is not None:
            return found
        if not (auto_create or group.startswith(SYS_CONSUMER_GROUP_PREFIX)):
            return None
        if not GROUP_NAME.match(group):
            return None
        return self.update(group, {})  # logs the new group

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
            if key == "groupName":  # the path names the group; the body's copy is ignored
                if not isinstance(value, str):
                    raise MetadataError("bad_group", f"groupName: expected a string, got {value!r}")
                continue
            if key not in current:
                raise MetadataError("bad_group", f"unknown subscription-group field {key!r}")
            expected = type(current[key])
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise MetadataError("bad_group", f"{key}: expected an integer, got {value!r}")
            if expected is bool and not isinstance(value, bool):
                raise MetadataError("bad_group", f"{key}: expected true or false, got {value!r}")
            current[key] = value
        # Java's SubscriptionGroupConfig: retryQueueNums and retryMaxTimes are ints, the broker
        # ids longs; a value outside them would break every Java reader of the file
        for key, lo, hi in GROUP_FIELD_RANGES:
            if not lo <= current[key] <= hi:
                raise MetadataError("bad_group", f"{key}={current[key]}: must be {lo}..{hi}")
        cfg = SubscriptionGroupConfig(**current)
        if self.table.get(group) != cfg:
            self.table[group] = cfg
            self.data_version.next()
            self.persist()
            log.info("subscription group %s: %s", group, asdict(cfg))
        return cfg


MAX_QUEUE_ID = 2**31 - 1  # Java int
MAX_OFFSET = 2**63 - 1  # Java long


class ConsumerOffsetManager:
    """``topic@group`` → {queueId: offset}; persisted lazily (offsets change on every commit).

    The dataVersion is 5.x's (4.9 readers ignore it); it moves once per persist that carries
    new commits. RocketMQ's derived ``groupTopicMap`` is not written (Java recomputes it).
    """

    FILE = "consumerOffset.json"

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / self.FILE
        self.table: dict[str, dict[int, int]] = {}
        self.data_version = DataVersion()
        self.dirty = False
        data = _read_json(self.path)
        if data:
            self.table = {
                key: {int(q): int(o) for q, o in queues.items()}
                for key, queues in (data.get("offsetTable") or {}).items()
            }
            self.data_version = DataVersion.from_json(data.get("dataVersion"))

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if not GROUP_NAME.match(group):
            raise MetadataError(
                "bad_group", f"group {group!r}: 1-255 characters of [%|a-zA-Z0-9_-]"
            )
        # RocketMQ keeps both as Java numbers: queueId an int, a committed offset a long that
        # is never negative (-1 means "none" in its answers, never a stored value)
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            raise MetadataError("bad_request", f"queueId={queue_id}: must be 0..{MAX_QUEUE_ID}")
        if not 0 <= offset <= MAX_OFFSET:
            raise MetadataError("bad_request", f"offset={offset}: must be 0..{MAX_OFFSET}")
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
        """Queue ids are int keys: unquoted in the file, strings once through ``json``."""
        return {
            "dataVersion": self.data_version.to_json(),
            "offsetTable": {
                key: dict(sorted(queues.items())) for key, queues in sorted(self.table.items())
            },
        }

    def merge(self, data: Mapping[str, Any]) -> None:
        """Slave sync: RocketMQ's putAll — merge, never delete; 5.x adopts the dataVersion."""
        for key, queues in (data.get("offsetTable") or {}).items():
            self.table.setdefault(key, {}).update({int(q): int(o) for q, o in queues.items()})
        if data.get("dataVersion"):
            self.data_version = DataVersion.from_json(data["dataVersion"])
        self.dirty = True

    def persist(self, force: bool = False) -> None:
        if self.dirty or force:
            if self.dirty:
                self.data_version.next()
            _write_json_atomic(self.path, self.to_json())
            self.dirty = False


class DelayOffsetManager:
    """``delayOffset.json``: delay level → consume-queue offset of ``SCHEDULE_TOPIC_XXXX``.

    The progress of delayed delivery (:mod:`habroker.schedule`); a table a Java broker wrote
    (4.9: no dataVersion; 5.x: with one) is read and written back in its own layout, so neither
    side loses its place.
    """

    FILE = "delayOffset.json"

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / self.FILE
        self.table: dict[int, int] = {}
        self.data_version: DataVersion | None = None
        data = _read_json(self.path)
        if data:
            self._load(data)

    def _load(self, data: Mapping[str, Any]) -> None:
        self.table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        version = data.get("dataVersion")
        self.data_version = DataVersion.from_json(version) if version else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.data_version is not None:
            out["dataVersion"] = self.data_version.to_json()
        out["offsetTable"] = dict(sorted(self.table.items()))
        return out

    def replace_all(self, data: Mapping[str, Any] | str) -> None:
        """Slave sync: RocketMQ's slave writes the master's table as it came (JSON or text)."""
        self._load(fastjson.loads(data) if isinstance(data, str) else data)
        self.persist()

    def persist(self) -> None:
        _write_json_atomic(self.path, self.to_json())
