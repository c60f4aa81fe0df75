"""A recording TCP proxy for DLedger traffic between peers (RocketMQ remoting frames).

Put one proxy in front of each peer and tell the *other* peers to reach it at the proxy's port
(``start_dledger_group(..., via=recorder.via)``); every byte is passed on unchanged and, on the
side, cut into remoting frames: a 4-byte big-endian length of the rest, a 4-byte word whose high
byte is the header's serialization (0 = JSON) and whose low three bytes are the header length,
the header, then the body.  The proxies run on one asyncio loop on a thread of their own that
has joined the test's network namespace (:meth:`NetNS.enter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.interop.rocketmq_java import NetNS

RESPONSE_FLAG = 1
ONEWAY_FLAG = 2


@dataclass(frozen=True)
class Frame:
    """One remoting frame seen by a proxy."""

    conn: int  # proxied connection number
    callee: str  # the peer id the proxy stands in front of
    from_callee: bool  # False: caller -> callee (requests); True: callee -> caller (answers)
    serialize_type: int
    header_raw: bytes
    body: bytes
    at: float  # time.monotonic() when decoded
    header: dict[str, Any] = field(default_factory=dict)  # parsed when JSON

    @property
    def code(self) -> int:
        return int(self.header.get("code", -1))

    @property
    def opaque(self) -> int:
        return int(self.header.get("opaque", -1))

    @property
    def is_response(self) -> bool:
        return bool(int(self.header.get("flag", 0)) & RESPONSE_FLAG)

    def body_json(self) -> dict[str, Any]:
        value = json.loads(self.body) if self.body else {}
        return value if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True)
class Exchange:
    request: Frame
    response: Frame | None


class FrameDecoder:
    """Incremental: :meth:`feed` bytes, get back each complete frame's parts."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes, bytes]]:
        self.buffer += data
        out: list[tuple[int, bytes, bytes]] = []
        while len(self.buffer) >= 4:
            total = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + total:
                break
            frame = bytes(self.buffer[4 : 4 + total])
            del self.buffer[: 4 + total]
            word = int.from_bytes(frame[:4], "big")
            header_len = word & 0xFFFFFF
            out.append((word >> 24, frame[4 : 4 + header_len], frame[4 + header_len :]))
        return out


class Recorder:
    """Proxies ``listen port -> target`` per peer id, in ``ns``; the frames they saw."""

    def __init__(self, ns: NetNS, routes: Mapping[str, tuple[int, str]]) -> None:
        self.ns = ns
        self.routes = dict(routes)  # peer id -> (proxy port, the peer's own address)
        self.frames: list[Frame] = []
        self._lock = threading.Lock()
        self._conns = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def via(self) -> dict[str, str]:
        """For ``start_dledger_group(via=...)``: the proxy address of each peer."""
        return {peer: f"127.0.0.1:{port}" for peer, (port, _) in self.routes.items()}

    def start(self) -> Recorder:
        self._thread = threading.Thread(target=self._run, name="dledger-recorder", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the recorder did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[Frame]:
        with self._lock:
            return list(self.frames)

    def exchanges(self) -> list[Exchange]:
        """Each request with its answer (same connection and opaque), in request order."""
        frames = self.snapshot()
        answers = {(f.conn, f.opaque): f for f in frames if f.from_callee and f.is_response}
        return [
            Exchange(f, answers.get((f.conn, f.opaque)))
            for f in frames
            if not f.from_callee and not f.is_response
        ]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[Exchange]:
        """Until some exchange (with its answer) satisfies ``predicate``; those that do."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [x for x in self.exchanges() if x.response is not None and predicate(x)]
            if found:
                return found
            time.sleep(0.2)
        raise TimeoutError(f"no such exchange after {timeout}s ({len(self.frames)} frames seen)")

    # -- the loop thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.ns.enter()
            loop = asyncio.new_event_loop()
            self._loop = loop
            servers = [
                loop.run_until_complete(
                    asyncio.start_server(functools.partial(self._serve, peer), "127.0.0.1", port)
                )
                for peer, (port, _) in self.routes.items()
            ]
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            for server in servers:
                server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _serve(
        self, peer: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, _, port = self.routes[peer][1].rpartition(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        conn = next(self._conns)
        await asyncio.gather(
            self._pump(conn, peer, False, reader, up_writer),
            self._pump(conn, peer, True, up_reader, writer),
            return_exceptions=True,
        )

    async def _pump(
        self,
        conn: int,
        peer: str,
        from_callee: bool,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                for stype, header_raw, body in decoder.feed(data):
                    header: dict[str, Any] = {}
                    if stype == 0:
                        with contextlib.suppress(ValueError):
                            header = json.loads(header_raw)
                    frame = Frame(
                        conn, peer, from_callee, stype, header_raw, body, time.monotonic(), header
                    )
                    with self._lock:
                        self.frames.append(frame)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
