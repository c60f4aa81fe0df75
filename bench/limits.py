"""Physical limits of this machine, measured in the same run as the systems.

* sequential write: the same 1 KiB payloads written to a new file in the broker's file system,
  in writes of one batch (1, 32, 256 messages), buffered (what ASYNC_FLUSH amounts to), and with
  fdatasync every MiB;
* fdatasync latency: one 1 KiB append + fdatasync, p50/p99;
* sequential read: the same payloads read back from a file in the page cache, 32 KiB per
  read into one reused buffer (a pull of 32 messages at the least: issue 17 compares pulls
  with it);
* loopback: ``os.sendfile`` from a file over 127.0.0.1 TCP into a receiver process doing
  ``recv_into`` + ``os.write`` to a file (what a slave must do at the least);
* pull transport: a request of a PULL_MESSAGE's size answered with a pull's worth of bytes
  (32 or 1024 records of a 1 KiB body) by ``os.sendfile`` from the page cache, over 127.0.0.1 TCP,
  one answering process per connection and one asking process per consumer, no broker in
  between (what any broker's pulls pay for the transport and its wake-ups at the least).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.stats import percentiles, summary


def seq_write(path: Path, total: int, chunk: bytes, sync_every: int = 0) -> float:
    """Bytes/s writing ``chunk`` repeatedly to a new file until ``total`` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = max(1, total // len(chunk))
        unsynced = 0
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, chunk)
            if sync_every:
                unsynced += len(chunk)
                if unsynced >= sync_every:
                    os.fdatasync(fd)
                    unsynced = 0
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return n * len(chunk) / elapsed


def seq_read(path: Path, chunk: int = 32 * 1024) -> float:
    """Bytes/s reading ``path`` (already in the page cache) front to back, ``chunk`` bytes per
    read into one reused buffer."""
    buf = bytearray(chunk)
    got = 0
    with open(path, "rb", buffering=0) as f:
        start = time.perf_counter()
        while n := f.readinto(buf):
            got += n
        elapsed = time.perf_counter() - start
    return got / elapsed if elapsed > 0 else 0.0


def fdatasync_latency(path: Path, samples: int, record: bytes) -> list[float]:
    """Seconds per (append ``record`` + fdatasync), ``samples`` times."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    out = []
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            os.write(fd, record)
            os.fdatasync(fd)
            out.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return out


def _receiver(port_q: Any, out_q: Any, path: str, total: int) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    got = 0
    start = None
    try:
        while got < total:
            n = conn.recv_into(view)
            if n == 0:
                break
            if start is None:
                start = time.perf_counter()
            os.write(fd, view[:n])
            got += n
        elapsed = time.perf_counter() - (start or time.perf_counter())
    finally:
        os.close(fd)
        conn.close()
        srv.close()
        Path(path).unlink(missing_ok=True)
    out_q.put((got, elapsed))


def loopback(src: Path, dst: Path, total: int) -> float:
    """Bytes/s: sendfile of ``src`` (``total`` bytes) → recv_into + write to ``dst``."""
    ctx = mp.get_context("fork")
    port_q, out_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(port_q, out_q, str(dst), total), daemon=True)
    proc.start()
    try:
        port = port_q.get(timeout=30)
        with socket.create_connection(("127.0.0.1", port)) as sock, open(src, "rb") as f:
            offset = 0
            while offset < total:
                sent = os.sendfile(sock.fileno(), f.fileno(), offset, total - offset)
                if sent == 0:
                    break
                offset += sent
            got, elapsed = out_q.get(timeout=120)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return float(got / elapsed) if elapsed > 0 else 0.0


#: the pull transport's frames: module rocketmq's PULL_MESSAGE is 342 bytes, and its pulls of
#: 32 messages are answered with 36.2 KB (habroker) and 36.9 KB (RocketMQ), of 1024 with
#: 1.15 MB and 1.17 MB: 1,130 bytes a message
PULL_REQUEST_BYTES = 342
PULL_BYTES_PER_MESSAGE = 1130
PULL_MESSAGES_PER_ANSWER = (32, 1024)  # module rocketmq's pull sizes
PULL_CONNECTIONS = (1, 4)
_ANSWER_HEAD = bytes(64)  # stands for the remoting header in front of a pull's body


def _read_exactly(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def _answerer(srv: socket.socket, path: str, answer_bytes: int) -> None:
    """One connection: each request is answered with a header and ``answer_bytes`` sent
    from the file (page-cache hot) with ``sendfile``, walking through the file."""
    conn, _ = srv.accept()
    srv.close()
    request = memoryview(bytearray(PULL_REQUEST_BYTES))
    with conn, open(path, "rb") as f:
        fd, out = f.fileno(), conn.fileno()
        span = os.fstat(fd).st_size - answer_bytes
        offset = 0
        while _read_exactly(conn, request):
            conn.sendall(_ANSWER_HEAD, socket.MSG_MORE)
            sent = 0
            while sent < answer_bytes:
                n = os.sendfile(out, fd, offset + sent, answer_bytes - sent)
                if n <= 0:
                    return
                sent += n
            offset = (offset + answer_bytes) % span


def _asker(port: int, answer_bytes: int, seconds: float, warmup: float, out_q: Any) -> None:
    """Ask, read the whole answer, ask again; answers/s after ``warmup``."""
    request = bytes(PULL_REQUEST_BYTES)
    answer = memoryview(bytearray(len(_ANSWER_HEAD) + answer_bytes))
    count, start = 0, time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        measuring = False
        end = start + warmup
        while True:
            conn.sendall(request)
            if not _read_exactly(conn, answer):
                break
            count += 1
            now = time.perf_counter()
            if now >= end:
                if measuring:
                    break
                measuring, count, start, end = True, 0, now, now + seconds
    elapsed = time.perf_counter() - start
    out_q.put(count / elapsed if measuring and elapsed > 0 else 0.0)


def pull_transport(
    src: Path, messages: int, connections: int, seconds: float, warmup: float
) -> float:
    """Answers/s over ``connections`` at once, each answer ``messages`` messages' worth of
    bytes: the bare transport a pull rides on."""
    answer_bytes = messages * PULL_BYTES_PER_MESSAGE
    ctx = mp.get_context("fork")
    out_q = ctx.Queue()
    with socket.create_server(("127.0.0.1", 0), backlog=connections) as srv:
        port = srv.getsockname()[1]
        answerers = [
            ctx.Process(target=_answerer, args=(srv, str(src), answer_bytes), daemon=True)
            for _ in range(connections)
        ]
        for proc in answerers:
            proc.start()
    askers = [
        ctx.Process(target=_asker, args=(port, answer_bytes, seconds, warmup, out_q), daemon=True)
        for _ in range(connections)
    ]
    try:
        for proc in askers:
            proc.start()
        return float(sum(out_q.get(timeout=seconds + warmup + 60) for _ in askers))
    finally:
        for proc in askers + answerers:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


def run(settings: common.Settings) -> dict[str, Any]:
    body = common.payload()
    result: dict[str, Any] = {"seq_write": {}, "seq_write_sync_1MiB": None}
    with common.scratch_dir(settings, "limits") as work:
        raw: dict[int, list[float]] = {b: [] for b in settings.batches}
        synced: list[float] = []
        loop: list[float] = []
        read: list[float] = []
        fsync: list[float] = []
        answers: dict[tuple[int, int], list[float]] = {
            (m, c): [] for m in PULL_MESSAGES_PER_ANSWER for c in PULL_CONNECTIONS
        }
        src = work / "loopback-src"
        total = settings.limit_bytes
        with open(src, "wb") as f:  # in the page cache, as a master's recent log is
            block = body * 1024
            for _ in range(max(1, total // len(block))):
                f.write(block)
        total = src.stat().st_size
        for _rep in range(settings.reps):
            for batch in settings.batches:
                raw[batch].append(seq_write(work / "seq", settings.limit_bytes, body * batch))
            synced.append(
                seq_write(work / "seq", settings.limit_bytes, body * 256, sync_every=1 << 20)
            )
            loop.append(loopback(src, work / "loopback-dst", total))
            read.append(seq_read(src))
            for messages, conns in answers:
                answers[messages, conns].append(
                    pull_transport(src, messages, conns, settings.duration, settings.warmup)
                )
            fsync.extend(fdatasync_latency(work / "fsync", settings.fsync_samples, body))
        for batch, values in raw.items():
            result["seq_write"][str(batch)] = summary([v / 1e6 for v in values])
        result["seq_write_sync_1MiB"] = summary([v / 1e6 for v in synced])
        result["loopback"] = summary([v / 1e6 for v in loop])
        result["seq_read_32KiB"] = summary([v / 1e6 for v in read])
        result["pull_transport"] = {
            "request_bytes": PULL_REQUEST_BYTES,
            # by messages per answer; MB/s of payload, as the pull cells count theirs (1 KiB a
            # message)
            "answers": {
                str(m): {
                    "answer_bytes": m * PULL_BYTES_PER_MESSAGE,
                    "connections": {
                        str(c): {
                            "answers_per_s": summary(answers[m, c]),
                            "mb_per_s": summary(
                                [a * m * common.BODY_SIZE / 1e6 for a in answers[m, c]]
                            ),
                        }
                        for c in PULL_CONNECTIONS
                    },
                }
                for m in PULL_MESSAGES_PER_ANSWER
            },
        }
        result["fdatasync_ms"] = {k: v * 1000 for k, v in percentiles(fsync, (50, 99)).items()}
        result["fdatasync_ms"]["samples"] = len(fsync)
    result["unit"] = "MB/s (1e6 bytes of payload per second)"
    return result
