"""One harness per parser: feed the fuzzer's bytes to the real decoder and check its contract.

A harness returns normally when the decoder returns a value or raises one of its documented
error types; any other exception escapes and atheris reports it (with the input) as a crash.
``seeds()`` gives valid inputs built by the project's own encoders.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass

from habroker import fastjson, wire
from habroker.compression import CompressionType, compress
from habroker.dledger import entry as dledger_entry
from habroker.dledger import protocol as dledger_protocol
from habroker.ha import handshake as ha_handshake
from habroker.ha import protocol as ha_protocol
from habroker.message import (
    DELAY_LEVELS_MS,
    MAGIC_V2,
    decode_record,
    decode_records,
    encode_record,
    parse_record,
)
from habroker.remoting.command import (
    BadFrame,
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    decode_frame,
)
from habroker.store import native


@dataclass(frozen=True)
class Target:
    name: str
    doc: str
    harness: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]


# -- wire: the SEND_BATCH_MESSAGE body ---------------------------------------------------------
def fuzz_batch(data: bytes) -> None:
    """The split the broker runs (compiled where built) answers as the Python one does."""
    try:
        expected: object = [
            (e.flag, bytes(e.body), e.properties) for e in wire.decode_batch_py(data)
        ]
    except wire.BadBatch as exc:
        expected = (str(exc), exc.index)
    try:
        entries = wire.decode_batch(data)
    except wire.BadBatch as exc:
        assert (str(exc), exc.index) == expected
        return
    assert [(e.flag, bytes(e.body), e.properties) for e in entries] == expected
    assert entries and sum(
        wire.ENTRY_OVERHEAD + len(e.body) + len(e.properties) for e in entries
    ) == len(data)


def seeds_batch() -> list[bytes]:
    return [
        wire.encode_batch([b"hello"]),
        wire.encode_batch(
            [wire.OutgoingMessage(b"x" * 40, tags="t", keys=["k1", "k2"], flag=3), b"", b"abc"]
        ),
    ]


# -- remoting: frames and the stream decoder ---------------------------------------------------
def fuzz_remoting_frame(data: bytes) -> None:
    try:
        decode_frame(memoryview(data))
    except BadFrame:
        return


def fuzz_remoting_stream(data: bytes) -> None:
    decoder = FrameDecoder(max_length=1 << 16)
    try:
        # two feeds: a frame split across reads takes the buffering path
        cut = len(data) // 2
        decoder.feed(data[:cut])
        decoder.feed(data[cut:])
    except BadFrame:
        return


def _commands() -> list[RemotingCommand]:
    out = []
    for kind in (SerializeType.JSON, SerializeType.ROCKETMQ):
        out.append(
            RemotingCommand.request(
                10, {"topic": "T", "queueId": 1, "flag": True}, b"body", serialize_type=kind
            )
        )
        resp = RemotingCommand.request(34, None, serialize_type=kind).response(1, "no such topic")
        out.append(resp)
    return out


def seeds_remoting_frame() -> list[bytes]:
    return [cmd.encode_bytes()[4:] for cmd in _commands()]


def seeds_remoting_stream() -> list[bytes]:
    frames = [cmd.encode_bytes() for cmd in _commands()]
    return [*frames, b"".join(frames)]


# -- the commit-log record (store files, pull responses) ---------------------------------------
def fuzz_record(data: bytes) -> None:
    # the dispatcher's parse (compiled where built) answers as the Python one does
    for pos in (0, 1, len(data) // 2):
        assert native.parse_record(data, pos, True, DELAY_LEVELS_MS) == parse_record(
            data, pos, True, DELAY_LEVELS_MS
        )
    with contextlib.suppress(ValueError):
        decode_record(data, check_crc=True)
    try:
        decode_records(data)
    except ValueError:
        return


def seeds_record() -> list[bytes]:
    one = encode_record(topic="TopicA", queue_id=0, body=b"hello", properties={"TAGS": "a"})
    v2 = encode_record(
        topic="T" * 200,
        queue_id=3,
        body=b"",
        magic=MAGIC_V2,
        born_host=("::1", 7),
        store_host=("::1", 10911),
    )
    zipped = encode_record(
        topic="Z",
        queue_id=0,
        body=compress(b"z" * 300, CompressionType.ZLIB),
        sys_flag=CompressionType.ZLIB.sys_flag,
    )
    return [one, v2, zipped, one + zipped]


# -- DLedger: RPC bodies (untrusted, from peers) and entries --------------------------------
def fuzz_dledger_push(data: bytes) -> None:
    # the general decoder, and the one-pass PUSH decoder followers use (msgspec, falling back)
    for decode in (dledger_protocol.decode, dledger_protocol.decode_push):
        try:
            body = decode(data)
        except ValueError:
            continue
        try:
            dledger_protocol.push_span(body)
            dledger_protocol.push_entries(body)
        except ValueError:
            continue


def seeds_dledger_push() -> list[bytes]:
    e1 = dledger_entry.DLedgerEntry(index=5, term=2, body=b"payload", pos=640)
    e2 = dledger_entry.DLedgerEntry(index=6, term=2, body=b"", pos=640 + e1.size)
    one = dledger_protocol.push_request(
        "g",
        local_id="n0",
        remote_id="n1",
        term=2,
        push_type=dledger_protocol.PushType.APPEND,
        commit_index=4,
        entry=e1,
    )
    batch = dict(one, entry=None, batchEntry=[dledger_entry.to_json_dict(e) for e in (e1, e2)])
    return [dledger_protocol.encode(one), dledger_protocol.encode(batch)]


def fuzz_dledger_entry(data: bytes) -> None:
    try:
        dledger_entry.decode(data)
    except ValueError:
        return


def seeds_dledger_entry() -> list[bytes]:
    return [bytes(dledger_entry.DLedgerEntry(index=1, term=1, body=b"abc", pos=0).encode())]


# -- classic HA: the master's transfer headers (slave side), the slave's reports (master side) --
HA_FILE_SIZE = 1 << 20


def fuzz_ha_transfer(data: bytes) -> None:
    """Headers as a slave meets them: each one checked against the slave's next offset, which
    advances by the body of every accepted header (the bodies themselves are not parsed)."""
    local = 0
    for offset, size in ha_protocol.HEADER.iter_unpack(data[: len(data) - len(data) % 12]):
        try:
            ha_protocol.check_header(offset, size, local, HA_FILE_SIZE)
        except ha_protocol.ProtocolError:
            return
        assert 0 <= size <= ha_protocol.MAX_BODY_SIZE and offset >= 0
        assert offset % HA_FILE_SIZE + size <= HA_FILE_SIZE
        local = offset + size


def seeds_ha_transfer() -> list[bytes]:
    header = ha_protocol.HEADER.pack
    return [
        header(0, 100) + header(100, 0) + header(100, 32768),
        header(HA_FILE_SIZE, HA_FILE_SIZE),
    ]


def fuzz_ha_reports(data: bytes) -> None:
    """Reports as a master reads them, cut at arbitrary points: the same int64s come out."""
    reader = ha_protocol.ReportReader()
    cut = data[0] % (len(data) + 1) if data else 0
    values = reader.feed(data[:cut]) + reader.feed(memoryview(data)[cut:])
    whole = len(data) - len(data) % 8
    assert values == [v for (v,) in ha_protocol.REPORT.iter_unpack(data[:whole])]
    assert reader.partial == len(data) - whole


def seeds_ha_reports() -> list[bytes]:
    return [ha_protocol.REPORT.pack(0) + ha_protocol.REPORT.pack(1 << 40) + b"\x00\x01"]


# -- the authenticated HA handshake (haAuthSecretFile): the frame reader of both ends ----------
_HANDSHAKE_FRAMES = (
    (ha_handshake.CHALLENGE, ha_handshake.CHALLENGE_SIZE, "master"),
    (ha_handshake.RESPONSE, ha_handshake.RESPONSE_SIZE, "slave"),
    (ha_handshake.PROOF, ha_handshake.PROOF_SIZE, "master"),
)
_HANDSHAKE_PREFIX = 8  # magic, version, type, reserved: judged before reading on


async def _read_handshake_frame(sock: socket.socket, kind: int, size: int, peer: str) -> bytes:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):  # the peer's side is shut: waiting at all is a hang
        return await ha_handshake._read_frame(loop, sock, kind, size, peer)


def fuzz_ha_handshake(data: bytes) -> None:
    """The first byte picks the frame expected (CHALLENGE, RESPONSE or PROOF); the rest is what
    the peer wrote before shutting its side of a real socket pair. The reader returns the body
    of a well-formed frame, raises HandshakeError for a header that is not the frame's and
    PeerClosed when the bytes end first, and never reads past what it judged."""
    if not data:
        return
    kind, size, peer = _HANDSHAKE_FRAMES[data[0] % len(_HANDSHAKE_FRAMES)]
    stream = data[1:]
    head = stream[:_HANDSHAKE_PREFIX]
    prefix_ok = head[:6] == ha_handshake.MAGIC + bytes((ha_handshake.VERSION, kind))
    marker_ok = stream[_HANDSHAKE_PREFIX : ha_handshake.HEADER.size] == (
        ha_handshake.NOT_A_SIZE.to_bytes(4, "big")
    )
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        theirs.sendall(stream)
        theirs.shutdown(socket.SHUT_WR)
        try:
            body = asyncio.run(_read_handshake_frame(ours, kind, size, peer))
        except ha_protocol.PeerClosed:
            assert len(stream) < _HANDSHAKE_PREFIX or (prefix_ok and len(stream) < size)
            return
        except ha_handshake.HandshakeError:
            assert len(stream) >= _HANDSHAKE_PREFIX
            assert not prefix_ok or (len(stream) >= size and not marker_ok)
            consumed = size if prefix_ok else _HANDSHAKE_PREFIX
        else:
            assert prefix_ok and marker_ok and len(stream) >= size
            assert body == stream[ha_handshake.HEADER.size : size]
            consumed = size
        ours.setblocking(True)
        rest = bytearray()
        while chunk := ours.recv(65536):
            rest += chunk
        assert rest == stream[consumed:], "the reader consumed bytes past the frame it judged"


def seeds_ha_handshake() -> list[bytes]:
    nonce, mac = bytes(range(32)), bytes(range(32, 64))
    frames = [
        ha_handshake._header(ha_handshake.CHALLENGE) + nonce,
        ha_handshake._header(ha_handshake.RESPONSE) + nonce + mac,
        ha_handshake._header(ha_handshake.PROOF) + mac,
    ]
    report = ha_protocol.REPORT.pack(1 << 20)  # what a classic slave sends instead
    return [bytes([i]) + frame + report for i, frame in enumerate(frames)] + [b"\x01" + report]


# -- fastjson: Java-fastjson bodies from brokers and name servers ------------------------------
def fuzz_fastjson(data: bytes) -> None:
    try:
        value = fastjson.loads(data)
    except ValueError:
        return
    fastjson.dumps(value)


def seeds_fastjson() -> list[bytes]:
    table = {
        "brokerAddrs": {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"},
        "offsetTable": {fastjson.ObjectKey({"topic": "T", "queueId": 0}): 42},
        "list": [1.5, -2, True, None, "s\u00e9"],
    }
    return [fastjson.dumps(table).encode(), b'{"a":[{}]}']


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("batch", "habroker.wire.decode_batch (BadBatch)", fuzz_batch, seeds_batch),
        Target(
            "remoting_frame",
            "habroker.remoting.command.decode_frame (BadFrame)",
            fuzz_remoting_frame,
            seeds_remoting_frame,
        ),
        Target(
            "remoting_stream",
            "habroker.remoting.command.FrameDecoder.feed (BadFrame)",
            fuzz_remoting_stream,
            seeds_remoting_stream,
        ),
        Target(
            "record",
            "habroker.message.decode_record / decode_records (ValueError)",
            fuzz_record,
            seeds_record,
        ),
        Target(
            "dledger_push",
            "habroker.dledger.protocol.decode + push_span/push_entries (ValueError)",
            fuzz_dledger_push,
            seeds_dledger_push,
        ),
        Target(
            "dledger_entry",
            "habroker.dledger.entry.decode (ValueError)",
            fuzz_dledger_entry,
            seeds_dledger_entry,
        ),
        Target(
            "ha_transfer",
            "habroker.ha.protocol.check_header on a stream of headers (ProtocolError)",
            fuzz_ha_transfer,
            seeds_ha_transfer,
        ),
        Target(
            "ha_reports",
            "habroker.ha.protocol.ReportReader.feed (never raises)",
            fuzz_ha_reports,
            seeds_ha_reports,
        ),
        Target(
            "ha_handshake",
            "habroker.ha.handshake._read_frame over a socket pair (HandshakeError, PeerClosed)",
            fuzz_ha_handshake,
            seeds_ha_handshake,
        ),
        Target("fastjson", "habroker.fastjson.loads (ValueError)", fuzz_fastjson, seeds_fastjson),
    )
}
