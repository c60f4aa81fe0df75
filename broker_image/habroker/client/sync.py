"""Blocking client on the standard library's ``http.client``: no event loop needed.

Used where asyncio is awkward: Spark executors, scripts, the REPL.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from habroker.client._protocol import (
    MASTER_ID,
    PRODUCE_HEADERS,
    BrokerAPIError,
    PullResult,
    SendResult,
    error_from,
    normalize_address,
    offset_path,
    parse_brokers,
    produce_path,
    pull_path,
)
from habroker.wire import OutgoingMessage, encode_batch


class BrokerConnection:
    """One keep-alive HTTP connection to one broker; reconnects once on a dropped connection."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = normalize_address(address)
        host, _, port = self.address.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            conn = self._conn or self._connect()
            try:
                conn.request(method, path, body=body, headers=dict(headers or {}))
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, dict(resp.getheaders()), data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt or method not in ("GET", "PUT"):
                    # a POST may have been stored before the connection broke: never resend it
                    raise
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        self._conn.connect()
        if self._conn.sock is not None:
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._conn

    def json(self, method: str, path: str, payload: Any | None = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        status, _, data = self.request(method, path, body, headers)
        if status >= 300:
            raise error_from(status, data)
        return json.loads(data) if data else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Producer:
    """Blocking producer. ``send_batch`` is the fast path: one request, one append."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self._conn = BrokerConnection(address, timeout)

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int | None = None,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> SendResult:
        return self.send_batch(
            topic, [OutgoingMessage(body, tags, keys, properties)], queue_id=queue_id
        )

    def send_batch(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes],
        *,
        queue_id: int | None = None,
    ) -> SendResult:
        return self.send_encoded(topic, encode_batch(messages), queue_id=queue_id)

    def send_encoded(self, topic: str, batch: bytes, *, queue_id: int | None = None) -> SendResult:
        status, _, data = self._conn.request(
            "POST", produce_path(topic, queue_id), batch, PRODUCE_HEADERS
        )
        if status != 200:
            raise error_from(status, data)
        return SendResult.from_json(json.loads(data))

    def create_topic(self, topic: str, queues: int = 4) -> dict[str, Any]:
        result: dict[str, Any] = self._conn.json(
            "POST",
            "/v1/topics",
            {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues},
        )
        return result

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BrokerGroupReader:
    """Blocking pulls from a broker group, following ``suggestWhichBrokerId`` per queue.

    Holds one connection per broker; a suggestion naming an unknown broker, or a broker that
    cannot be reached, falls back to the master (as RocketMQ's client does).
    """

    def __init__(self, brokers: str | Mapping[int, str], timeout: float = 10.0) -> None:
        self.brokers = parse_brokers(brokers)
        self.timeout = timeout
        self._conns: dict[int, BrokerConnection] = {}
        self._next: dict[tuple[str, int], int] = {}

    def connection(self, broker_id: int) -> BrokerConnection:
        if broker_id not in self._conns:
            self._conns[broker_id] = BrokerConnection(self.brokers[broker_id], self.timeout)
        return self._conns[broker_id]

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        group: str | None = None,
        max_bytes: int | None = None,
    ) -> PullResult:
        key = (topic, queue_id)
        broker_id = self._next.get(key, MASTER_ID)
        if broker_id not in self.brokers:
            broker_id = MASTER_ID
        path = pull_path(topic, queue_id, offset, max_msgs, group, max_bytes)
        try:
            status, headers, data = self.connection(broker_id).request("GET", path)
        except OSError:
            if broker_id == MASTER_ID:
                raise
            self._next[key] = MASTER_ID
            status, headers, data = self.connection(MASTER_ID).request("GET", path)
        if status != 200:
            raise error_from(status, data)
        result = PullResult.from_response(headers, data)
        self._next[key] = result.suggest_which_broker_id
        return result

    def queue_count(self, topic: str) -> int:
        table = self.connection(MASTER_ID).json("GET", "/v1/topics")["topicConfigTable"]
        if topic not in table:
            raise BrokerAPIError(404, "unknown_topic", f"topic {topic!r} does not exist")
        return int(table[topic]["readQueueNums"])

    def status(self, broker_id: int = MASTER_ID) -> dict[str, Any]:
        result: dict[str, Any] = self.connection(broker_id).json("GET", "/v1/status")
        return result

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.connection(MASTER_ID).json(
            "PUT", offset_path(group, topic, queue_id), {"offset": offset}
        )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        try:
            return int(
                self.connection(MASTER_ID).json("GET", offset_path(group, topic, queue_id))[
                    "offset"
                ]
            )
        except BrokerAPIError as exc:
            if exc.code == "no_offset":
                return None
            raise

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> BrokerGroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
