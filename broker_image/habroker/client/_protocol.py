"""What both client transports share: paths, response parsing, errors, broker addressing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from habroker.message import MessageExt, decode_records
from habroker.wire import BATCH_CONTENT_TYPE

MASTER_ID = 0


class BrokerAPIError(Exception):
    """The broker refused a request; ``code`` is the stable error code from its JSON body."""

    def __init__(
        self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})


def error_from(status: int, body: bytes) -> BrokerAPIError:
    try:
        data = json.loads(body)
        return BrokerAPIError(
            status,
            str(data.get("error", "error")),
            str(data.get("message", "")),
            data.get("details"),
        )
    except (ValueError, AttributeError):
        return BrokerAPIError(status, "http_error", body[:200].decode(errors="replace"))


def normalize_address(address: str) -> str:
    """``host:port`` or ``http://host:port`` → ``host:port``."""
    address = address.strip()
    for prefix in ("http://", "https://"):
        if address.startswith(prefix):
            address = address[len(prefix) :]
    return address.rstrip("/")


def parse_brokers(spec: str | Mapping[int, str]) -> dict[int, str]:
    """Broker addresses by brokerId: ``"host:port"`` (the master alone) or
    ``"0=host:10913,1=host:10923"`` (HTTP API addresses) or a mapping."""
    if isinstance(spec, Mapping):
        return {int(k): normalize_address(v) for k, v in spec.items()}
    out: dict[int, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if "=" in part:
            key, _, addr = part.partition("=")
            try:
                out[int(key)] = normalize_address(addr)
            except ValueError:
                raise ValueError(
                    f"broker list entry {part!r}: expected brokerId=host:port"
                ) from None
        elif MASTER_ID not in out:
            out[MASTER_ID] = normalize_address(part)
        else:
            raise ValueError(f"broker list entry {part!r}: name its brokerId (id=host:port)")
    if not out:
        raise ValueError("empty broker list")
    if MASTER_ID not in out:
        raise ValueError("the broker list needs the master (brokerId 0)")
    return out


def produce_path(topic: str, queue_id: int | None) -> str:
    path = f"/v1/topics/{quote(topic, safe='')}/messages"
    if queue_id is not None and queue_id >= 0:
        path += f"?queueId={queue_id}"
    return path


def pull_path(
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int,
    group: str | None,
    max_bytes: int | None = None,
) -> str:
    query: dict[str, Any] = {"offset": offset, "max": max_msgs}
    if group:
        query["group"] = group
    if max_bytes:
        query["maxBytes"] = max_bytes
    return f"/v1/topics/{quote(topic, safe='')}/queues/{queue_id}/messages?{urlencode(query)}"


def offset_path(group: str, topic: str, queue_id: int) -> str:
    return f"/v1/consumer-offsets/{quote(group, safe='')}/{quote(topic, safe='')}/{queue_id}"


PRODUCE_HEADERS = {"Content-Type": BATCH_CONTENT_TYPE}


@dataclass(slots=True)
class SendResult:
    """The outcome of one produce request (one message or a batch)."""

    status: str
    topic: str
    queue_id: int
    queue_offset: int
    count: int
    commit_log_offset: int
    wrote_bytes: int
    msg_id: str

    @property
    def ok(self) -> bool:
        """Stored on the broker (replication may still be unconfirmed: see ``status``)."""
        return self.status in (
            "PUT_OK",
            "FLUSH_DISK_TIMEOUT",
            "FLUSH_SLAVE_TIMEOUT",
            "SLAVE_NOT_AVAILABLE",
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SendResult:
        return cls(
            str(data["status"]),
            str(data["topic"]),
            int(data["queueId"]),
            int(data["queueOffset"]),
            int(data["count"]),
            int(data["commitLogOffset"]),
            int(data["wroteBytes"]),
            str(data["msgId"]),
        )


@dataclass(slots=True)
class PullResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    broker_id: int
    raw: bytes = b""
    _messages: list[MessageExt] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[MessageExt]:
        """Decoded lazily: the Spark connector reads ``raw`` straight into Arrow instead."""
        if self._messages is None:
            self._messages = decode_records(self.raw) if self.raw else []
        return self._messages

    @classmethod
    def from_response(cls, headers: Mapping[str, str], body: bytes) -> PullResult:
        def h(name: str) -> int:
            return int(headers.get(name, "0"))

        return cls(
            headers.get("X-Pull-Status", "FOUND"),
            h("X-Next-Begin-Offset"),
            h("X-Min-Offset"),
            h("X-Max-Offset"),
            h("X-Suggest-Which-Broker-Id"),
            h("X-Broker-Id"),
            body,
        )
