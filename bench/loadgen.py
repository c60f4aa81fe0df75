"""Lean load generators: raw sockets, pre-encoded requests, separate processes.

Both sides get the same client: one pre-encoded request per connection (an HTTP/1.1 POST with
a RocketMQ batch body for habroker's HTTP face, a RocketMQ remoting frame — SEND_MESSAGE_V2 or
SEND_BATCH_MESSAGE — for habroker's client port and a real Java RocketMQ broker alike, a pipeline
of RESP commands for Redis), sent over a keep-alive TCP connection, the reply parsed just enough to know it is complete and OK. One
request is outstanding per connection ("one producer"); a process drives its connections with
``selectors``, and producers are spread over processes so the generator's GIL is not what bounds
the server. Processes start together at a barrier after a warm-up.
"""

from __future__ import annotations

import multiprocessing as mp
import selectors
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from habroker.remoting.codes import RequestCode
from habroker.remoting.command import RemotingCommand
from habroker.wire import BATCH_CONTENT_TYPE, encode_batch

RECV_SIZE = 256 * 1024
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


# -- request encoding ---------------------------------------------------------------------------
def http_produce(port: int, topic: str, queue_id: int, body: bytes, count: int) -> bytes:
    """A whole HTTP/1.1 produce request carrying ``count`` copies of ``body`` as one batch."""
    batch = encode_batch([body] * count)
    head = (
        f"POST /v1/topics/{topic}/messages?queueId={queue_id} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        f"Content-Type: {BATCH_CONTENT_TYPE}\r\n"
        f"Content-Length: {len(batch)}\r\n\r\n"
    ).encode()
    return head + batch


#: the producer group and default topic every remoting request names (RocketMQ's defaults)
REMOTING_GROUP = "bench_producer"
REMOTING_DEFAULT_TOPIC = "TBW102"


def remoting_send(topic: str, queue_id: int, body: bytes, count: int, queues: int = 8) -> bytes:
    """One RocketMQ remoting request frame (JSON header, as the Java client sends by default).

    ``count == 1``: SEND_MESSAGE_V2 with ``body``; more: SEND_BATCH_MESSAGE whose body is
    ``count`` copies in RocketMQ's MessageBatch encoding (``MessageDecoder.encodeMessages``:
    totalSize, magic, bodyCRC, flag, body length, body, properties length, properties). The
    header is SendMessageRequestHeaderV2 (one-letter names) with a fixed queue, so both brokers
    store into the same queue layout; ``queues`` is the queue count a broker creates the topic
    with when it does not exist yet (``autoCreateTopicEnable``).
    """
    batch = count > 1
    header = {
        "a": REMOTING_GROUP,
        "b": topic,
        "c": REMOTING_DEFAULT_TOPIC,
        "d": queues,
        "e": queue_id,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": None if batch else "WAIT\x01true\x02",
        "j": 0,
        "k": False,
        "m": batch,
    }
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    payload = encode_batch([body] * count) if batch else body
    return RemotingCommand.request(code, header, payload).encode_bytes()


def remoting_code(frame: bytes | bytearray | memoryview) -> int:
    """The response code of one whole remoting frame (length prefix included), JSON or ROCKETMQ
    serialization."""
    (mark,) = _I32.unpack_from(frame, 4)
    if mark >> 24 == 1:  # ROCKETMQ binary header: code is the first int16
        return int(_I16.unpack_from(frame, 8)[0])
    header = bytes(frame[8 : 8 + (mark & 0xFFFFFF)])
    at = header.find(b'"code":')
    if at < 0:
        raise ValueError("remoting response without a code")
    at += 7
    stop = at
    while header[stop] in b"-0123456789":
        stop += 1
    return int(header[at:stop])


def resp_command(*args: bytes | str) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        raw = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def resp_xadd(key: str, body: bytes, count: int, wait_ms: int | None) -> tuple[bytes, int]:
    """``count`` pipelined XADDs (and ``WAIT 1 wait_ms`` after them); returns (bytes, replies)."""
    one = resp_command("XADD", key, "*", "body", body)
    data = one * count
    replies = count
    if wait_ms is not None:
        data += resp_command("WAIT", "1", str(wait_ms))
        replies += 1
    return data, replies


# -- jobs ---------------------------------------------------------------------------------------
@dataclass
class Job:
    """``requests[i]`` is what connection ``i`` sends, over and over."""

    kind: str  # "http", "remoting" or "resp"
    port: int
    requests: list[bytes]
    messages_per_request: int
    replies_per_request: int = 1
    duration: float = 2.0
    warmup: float = 0.3
    processes: int = 1
    max_requests: int | None = None  # per connection (latency runs); None: until duration
    expect_wait: bool = False  # resp: the last reply is WAIT's count; 0 = not replicated
    interval: float = 0.0  # seconds between a connection's requests (paced load); 0 = flat out
    timeout: float = 30.0  # no reply for this long: the run fails


@dataclass
class WorkerResult:
    messages: int = 0
    requests: int = 0
    not_ok: int = 0
    not_ok_codes: dict[str, int] = field(default_factory=dict)  # response code -> count
    not_ok_sample: str = ""  # the first refused answer's header, to say why
    start: float = 0.0
    end: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)


class _Conn:
    __slots__ = (
        "buf",
        "code",
        "count",
        "done",
        "have",
        "head",
        "pos",
        "request",
        "sent",
        "sock",
        "view",
    )

    def __init__(self, sock: socket.socket, request: bytes) -> None:
        self.sock = sock
        self.request = request
        self.buf = bytearray()
        self.view = memoryview(bytearray(RECV_SIZE))  # remoting: frames are read into this
        self.have = 0  # bytes of ``view`` filled
        self.pos = 0
        self.count = 0
        self.sent = 0
        self.done = 0
        self.code = ""  # the last answer's code when it was not OK
        self.head = ""  # ... and its header (remoting) or first line


def _http_complete(conn: _Conn) -> bool | None:
    """None: incomplete; else True if 200 and PUT_OK (extra bytes are kept)."""
    buf = conn.buf
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).lower()
    at = head.find(b"content-length:")
    length = 0
    if at >= 0:
        stop = head.find(b"\r\n", at)
        length = int(head[at + 15 : stop if stop >= 0 else len(head)])
    total = end + 4 + length
    if len(buf) < total:
        return None
    ok = buf[9:12] == b"200" and b'"PUT_OK"' in buf[end + 4 : total]
    del buf[:total]
    return ok


def merge_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Sums per-key counts (the refused answers' codes of several workers or runs)."""
    total: dict[str, int] = {}
    for one in counts:
        for key, n in one.items():
            total[key] = total.get(key, 0) + n
    return total


def _remoting_recv(conn: _Conn) -> bool | None:
    """Reads what the socket has straight into the connection's frame buffer (one copy from the
    kernel: a pull's megabyte answer must not cost the generator more than the broker);
    None: incomplete; else True if the response code is SUCCESS (0)."""
    view = conn.view
    n = conn.sock.recv_into(view[conn.have :])
    if n == 0:
        raise ConnectionError("the server closed the connection")
    conn.have += n
    if conn.have < 4:
        return None
    total = 4 + _I32.unpack_from(view, 0)[0]
    if total > len(view):  # a bigger frame than any before: room for it, kept from now on
        grown = memoryview(bytearray(total))
        grown[: conn.have] = view[: conn.have]
        conn.view = grown
        return None
    if conn.have < total:
        return None
    frame = view[:total]
    code = remoting_code(frame)
    ok = code == 0
    if not ok:
        conn.code = str(code)
        conn.head = bytes(frame[8 : min(total, 308)]).decode("utf-8", "replace")
    rest = conn.have - total
    if rest:  # one request is outstanding per connection, so this is rare
        view[:rest] = view[total : conn.have]
    conn.have = rest
    return ok


def _resp_complete(conn: _Conn, replies: int, expect_wait: bool) -> bool | None:
    """Counts whole RESP replies; None until ``replies`` arrived, then OK-ness."""
    buf = conn.buf
    pos = conn.pos
    n = len(buf)
    ok = True
    while conn.count < replies:
        if pos >= n:
            break
        kind = buf[pos]
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            break
        if kind == 0x24:  # '$' bulk string
            size = int(buf[pos + 1 : line_end])
            stop = line_end + 2 + (size + 2 if size >= 0 else 0)
            if stop > n:
                break
            pos = stop
        else:
            if kind == 0x2D:  # '-' error
                ok = False
            elif kind == 0x3A and expect_wait and conn.count == replies - 1:  # ':' WAIT's count
                ok = int(buf[pos + 1 : line_end]) >= 1
            pos = line_end + 2
        conn.count += 1
    if conn.count < replies:
        conn.pos = pos
        return None
    del buf[:pos]
    conn.pos = 0
    conn.count = 0
    return ok


def _drive(conns: list[_Conn], job: Job, until: float, record: WorkerResult | None) -> None:
    """Run every connection until ``until`` (or max_requests each); count into ``record``.

    Flat out, a connection sends its next request as soon as the reply is in. Paced
    (``job.interval``), request ``k`` of a connection is due at ``start + k * interval`` and is
    sent at once when the connection is behind, so the offered rate holds while the server keeps
    up.
    """
    sel = selectors.DefaultSelector()
    perf = time.perf_counter_ns
    due: dict[int, float] = {}  # paced connections: when their next request goes
    start = time.monotonic()
    slots = [start] * len(conns)

    def send(i: int) -> None:
        conn = conns[i]
        conn.sock.sendall(conn.request)
        conn.sent = perf()
        sel.register(conn.sock, selectors.EVENT_READ, i)

    for i in range(len(conns)):
        send(i)
    active = len(conns)
    limit = job.max_requests if record is not None else None
    last_progress = start
    while active or due:
        timeout = 1.0
        if due:
            now = time.monotonic()
            for i, at in list(due.items()):
                if now >= at:
                    del due[i]
                    send(i)
                    active += 1
            if due:
                timeout = max(0.0, min(due.values()) - now)
        if active:
            events = sel.select(timeout=timeout)
        else:
            time.sleep(timeout)
            events = []
        now = time.monotonic()
        if events or not active:
            last_progress = now
        elif now - last_progress > job.timeout:
            raise TimeoutError(f"no reply from 127.0.0.1:{job.port} for {job.timeout}s")
        for key, _ in events:
            i = key.data
            conn = conns[i]
            if job.kind == "remoting":
                ok = _remoting_recv(conn)
            else:
                data = conn.sock.recv(RECV_SIZE)
                if not data:
                    raise ConnectionError(f"127.0.0.1:{job.port} closed the connection")
                conn.buf += data
                if job.kind == "http":
                    ok = _http_complete(conn)
                else:
                    ok = _resp_complete(conn, job.replies_per_request, job.expect_wait)
            if ok is None:
                continue
            conn.done += 1
            if record is not None:
                record.latencies_ns.append(perf() - conn.sent)
                record.requests += 1
                if ok:
                    record.messages += job.messages_per_request
                else:
                    record.not_ok += 1
                    code = conn.code or job.kind
                    record.not_ok_codes[code] = record.not_ok_codes.get(code, 0) + 1
                    if not record.not_ok_sample:
                        record.not_ok_sample = conn.head
            now = time.monotonic()
            if now >= until or (limit is not None and conn.done >= limit):
                sel.unregister(conn.sock)
                active -= 1
            elif job.interval > 0:
                sel.unregister(conn.sock)
                active -= 1
                slots[i] += job.interval
                due[i] = slots[i]
            else:
                conn.sock.sendall(conn.request)
                conn.sent = perf()
        if due and time.monotonic() >= until:
            due.clear()
    sel.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _worker(job: Job, indices: list[int], barrier: Any, out: Any) -> None:
    try:
        socks = [_connect(job.port) for _ in indices]
        conns = [_Conn(s, job.requests[i]) for s, i in zip(socks, indices, strict=True)]
        if job.warmup > 0:
            _drive(conns, job, time.monotonic() + job.warmup, None)
        for conn in conns:
            conn.done = 0
        barrier.wait(timeout=job.timeout)
        result = WorkerResult(start=time.monotonic())
        _drive(conns, job, result.start + job.duration, result)
        result.end = time.monotonic()
        for sock in socks:
            sock.close()
        out.put(("ok", result))
    except BaseException as exc:  # the parent reports it
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` in ``job.processes`` processes; aggregate rate and latencies."""
    ctx = mp.get_context("fork")
    conns = len(job.requests)
    nproc = max(1, min(job.processes, conns))
    groups = [list(range(p, conns, nproc)) for p in range(nproc)]
    barrier = ctx.Barrier(nproc)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(job, g, barrier, out), daemon=True) for g in groups]
    for p in procs:
        p.start()
    results: list[WorkerResult] = []
    errors: list[str] = []
    deadline = time.monotonic() + job.warmup + job.duration + job.timeout + 10
    try:
        for _ in procs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("load generator did not finish in time")
            kind, value = out.get(timeout=remaining)
            (results if kind == "ok" else errors).append(value)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("load generator failed: " + "; ".join(errors))
    start = min(r.start for r in results)
    end = max(r.end for r in results)
    elapsed = max(end - start, 1e-9)
    messages = sum(r.messages for r in results)
    lat = sorted(x for r in results for x in r.latencies_ns)
    return {
        "messages": messages,
        "requests": sum(r.requests for r in results),
        "not_ok": sum(r.not_ok for r in results),
        "not_ok_codes": merge_counts(r.not_ok_codes for r in results),
        "not_ok_sample": next((r.not_ok_sample for r in results if r.not_ok_sample), ""),
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "latencies_ns": lat,
    }
