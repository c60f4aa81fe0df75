"""Pull throughput: consumers reading a backlog back from the ASYNC master.

A backlog of ``pull_messages`` 1 KiB messages is spread over the topic's queues; then 1 and 4
consumers (processes, one queue each, raw keep-alive HTTP, ``max=1024`` per pull) read their
queues from offset 0 to the end. Figures: messages/s and MB/s of payload, min/median/max.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from typing import Any

from habroker.client import Producer

from bench import common
from bench.servers import QUEUES
from bench.stats import summary
from bench.systems import Systems

PULL_MAX = 1024
CONSUMERS = (1, 4)


def _read_response(sock: socket.socket, buf: bytearray) -> tuple[dict[bytes, bytes], int]:
    """Headers (lower-case names) and body length of one response; consumes it from ``buf``."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    headers = {}
    for line in bytes(buf[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get(b"content-length", b"0"))
    total = end + 4 + length
    while len(buf) < total:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    del buf[:total]
    return headers, length


def _consumer(port: int, topic: str, queue_id: int, barrier: Any, out: Any) -> None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        barrier.wait(timeout=30)
        start = time.monotonic()
        offset = 0
        messages = 0
        nbytes = 0
        while True:
            sock.sendall(
                f"GET /v1/topics/{topic}/queues/{queue_id}/messages?offset={offset}"
                f"&max={PULL_MAX}&maxBytes={8 << 20} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
            )
            headers, length = _read_response(sock, buf)
            if headers.get(b"x-pull-status") != b"FOUND":
                break
            messages += int(headers[b"x-message-count"])
            nbytes += length
            offset = int(headers[b"x-next-begin-offset"])
        out.put(("ok", (messages, nbytes, start, time.monotonic())))
        sock.close()
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def consume(port: int, topic: str, consumers: int, timeout: float = 300) -> dict[str, float]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(consumers), ctx.Queue()
    procs = [
        ctx.Process(target=_consumer, args=(port, topic, q, barrier, out), daemon=True)
        for q in range(consumers)
    ]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            kind, value = out.get(timeout=timeout)
            if kind != "ok":
                raise RuntimeError(f"pull consumer failed: {value}")
            results.append(value)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    messages = sum(r[0] for r in results)
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)
    return {
        "messages": messages,
        "msgs_per_s": messages / elapsed,
        "record_bytes_per_s": sum(r[1] for r in results) / elapsed,
    }


def fill(port: int, topic: str, total: int) -> None:
    """``total`` messages spread evenly over the first max(CONSUMERS) queues, in batches of 256."""
    body = common.payload()
    from habroker.wire import encode_batch

    batch = encode_batch([body] * 256)
    queues = max(CONSUMERS)
    per_queue = total // queues
    with Producer(f"127.0.0.1:{port}", timeout=60) as producer:
        for q in range(queues):
            sent = 0
            while sent < per_queue:
                n = min(256, per_queue - sent)
                data = batch if n == 256 else encode_batch([body] * n)
                producer.send_encoded(topic, data, queue_id=q)
                sent += n


def run(systems: Systems, settings: common.Settings) -> dict[str, Any]:
    assert max(CONSUMERS) <= QUEUES
    group = systems.group("habroker_async")
    port = int(group.master.config["httpListenPort"])  # the HTTP API
    # the produce benchmark left the queues non-empty: a new topic starts at offset 0
    topic = f"pull{int(time.time())}"
    code, body = group.master.request(
        "POST", "/v1/topics", {"topic": topic, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
    )
    if code not in (200, 201):
        raise RuntimeError(f"cannot create topic {topic}: {code} {body}")
    fill(port, topic, settings.pull_messages)
    out: dict[str, Any] = {"backlog_messages": settings.pull_messages, "max_per_pull": PULL_MAX}
    for consumers in CONSUMERS:
        rates = [consume(port, topic, consumers)["msgs_per_s"] for _ in range(settings.reps)]
        out[str(consumers)] = {
            "consumers": consumers,
            "msgs_per_s": summary(rates),
            "mb_per_s": summary([r * common.BODY_SIZE / 1e6 for r in rates]),
        }
    return out
