"""The compiled record codec against the Python loops it replaces: the same entries, the same
records byte for byte, the same refusals (message and entry index)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable

import pytest
from habroker.client import Producer
from habroker.dledger.commit_log import encode_entries_py
from habroker.dledger.entry import MAGIC_1, pack_index_units_py
from habroker.local import LocalBroker
from habroker.message import (
    MAGIC_V1,
    MAGIC_V2,
    SCHEDULE_TOPIC,
    body_crc32,
    encode_record,
    parse_record,
    unit_tags_code,
)
from habroker.store import native
from habroker.store.commit_log import encode_records_py
from habroker.store.consume_queue import BLANK_UNIT, UNIT, walk_units_py
from habroker.store.values import BatchEntry
from habroker.wire import BadBatch, decode_batch_py, encode_batch, encode_entry
from hypothesis import given, settings
from hypothesis import strategies as st

codec = native.codec


def test_the_compiled_codec_is_built() -> None:
    if codec is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the compiled record codec was not built: {native.describe()}")
        pytest.skip(
            f"record codec: {native.describe()} (pip found no C compiler or Python headers); "
            "habroker runs the Python loops, which the rest of the suite tests"
        )
    assert native.describe() == "compiled (Cython)"


needs_codec = pytest.mark.skipif(codec is None, reason="the compiled record codec is not built")

_entries = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=300),
        st.binary(max_size=40),
    ),
    min_size=1,
    max_size=20,
)


def _raw(entries: list[tuple[int, bytes, bytes]]) -> bytes:
    return b"".join(encode_entry(body, props, flag) for flag, body, props in entries)


def _plain(entries: list[BatchEntry]) -> list[tuple[int, bytes, bytes]]:
    return [(e.flag, bytes(e.body), e.properties) for e in entries]


@needs_codec
@settings(max_examples=200, deadline=None)
@given(_entries)
def test_split_batch_finds_the_entries_the_python_loop_finds(
    entries: list[tuple[int, bytes, bytes]],
) -> None:
    assert codec is not None
    raw = _raw(entries)
    split, error = codec.split_batch(raw, 4096, BatchEntry)
    assert error is None and split is not None
    assert _plain(split) == _plain(decode_batch_py(raw)) == entries
    # bodies are views into the request, not copies
    assert all(isinstance(e.body, memoryview) for e in split)


@needs_codec
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.integers(1, 5))
def test_split_batch_refuses_what_the_python_loop_refuses(data: bytes, max_entries: int) -> None:
    assert codec is not None
    try:
        expected: object = _plain(decode_batch_py(data, max_entries=max_entries))
    except BadBatch as exc:
        expected = (str(exc), exc.index)
    split, error = codec.split_batch(data, max_entries, BatchEntry)
    if error is not None:
        got: object = (str(BadBatch(*error)), BadBatch(*error).index)
    else:
        assert split is not None
        got = _plain(split)
    assert got == expected


@needs_codec
@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "empty batch"),
        (b"\x00\x00", "entry 0: truncated entry header"),
        (encode_entry(b"abc")[:-1], "runs past the end"),
        (struct.pack(">iiiii", 30, 0, 0, 0, -1) + b"\x00" * 10, "bad lengths"),
        (encode_entry(b"abc") + encode_entry(b"x")[:10], "entry 1: truncated"),
        (encode_batch([b"x"] * 5), "entry 4: more than 4 messages"),
    ],
)
def test_split_batch_names_the_bad_entry(data: bytes, fragment: str) -> None:
    assert codec is not None
    split, error = codec.split_batch(data, 4, BatchEntry)
    assert split is None and error is not None
    assert fragment in str(BadBatch(*error))


@needs_codec
@settings(max_examples=200, deadline=None)
@given(
    _entries,
    st.sampled_from([48, 60, 72]),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**31 - 1),
)
def test_encode_records_lays_down_the_python_loops_bytes(
    entries: list[tuple[int, bytes, bytes]],
    shared_len: int,
    first_queue_offset: int,
    phys: int,
    queue_id: int,
) -> None:
    assert codec is not None
    batch = [BatchEntry(flag, memoryview(body), props) for flag, body, props in entries]
    topic_tail = b"\x07TopicAB"
    shared = bytes(range(shared_len))
    record_base = 36 + shared_len + 4 + len(topic_tail) + 2
    parts, end = codec.encode_records(
        topic_tail, queue_id, batch, first_queue_offset, shared, record_base, phys
    )
    parts_py, end_py = encode_records_py(
        topic_tail, queue_id, batch, first_queue_offset, shared, record_base, phys
    )
    assert end == end_py
    assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in parts_py)


@needs_codec
@settings(max_examples=200, deadline=None)
@given(
    _entries,
    st.sampled_from([48, 60, 72]),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
)
def test_encode_entries_lays_down_the_python_loops_bytes(
    entries: list[tuple[int, bytes, bytes]],
    shared_len: int,
    first_queue_offset: int,
    first_pos: int,
    queue_id: int,
    term: int,
    first_index: int,
) -> None:
    """The DLedger leader's entries (header + record each): the same bytes, one view per entry."""
    assert codec is not None
    batch = [BatchEntry(flag, memoryview(body), props) for flag, body, props in entries]
    topic_tail = b"\x07TopicAB"
    shared = bytes(range(shared_len))
    sizes = [36 + shared_len + 4 + len(topic_tail) + 2 + len(b) + len(p) for _f, b, p in entries]
    positions = [first_pos + sum(48 + n for n in sizes[:i]) for i in range(len(sizes))]
    args = (topic_tail, queue_id, batch, sizes, first_queue_offset, shared, term, first_index)
    parts = codec.encode_entries(*args, positions)
    parts_py = encode_entries_py(*args, positions)
    assert [len(p) for p in parts] == [48 + n for n in sizes]
    assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in parts_py)


@needs_codec
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**31 - 1)), max_size=40),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.sampled_from([MAGIC_1, -1, 0x7FFFFFFF]),
)
def test_pack_index_units_packs_the_python_loops_bytes(
    units: list[tuple[int, int]], first: int, term: int, magic: int
) -> None:
    """The DLedger leader's index units for a batch: the same 32 bytes per entry."""
    assert codec is not None
    positions = [pos for pos, _ in units]
    sizes = [size for _, size in units]
    packed = codec.pack_index_units(positions, sizes, first, term, magic)
    assert packed == pack_index_units_py(positions, sizes, first, term, magic)
    assert len(packed) == 32 * len(units)
    with pytest.raises(ValueError, match="positions"):
        codec.pack_index_units([*positions, 0], sizes, first, term, magic)


_units = st.lists(
    st.tuples(
        st.integers(0, 3),  # gap before the record (0: back to back with the one before)
        st.integers(1, 60),  # record size
        st.integers(0, 3),  # tagsCode
        st.booleans(),  # a BLANK filler unit instead
    ),
    max_size=60,
)


def _pack_units(spec: list[tuple[int, int, int, bool]], file_size: int) -> bytes:
    """Units of records laid out as a commit log lays them: none across a file end."""
    out, phys = [], 0
    for gap, size, tags, blank in spec:
        if blank:
            out.append(BLANK_UNIT)
            continue
        phys += gap
        if phys // file_size != (phys + size - 1) // file_size:
            phys += file_size - phys % file_size
        out.append(UNIT.pack(phys, size, tags))
        phys += size
    return b"".join(out)


@needs_codec
@settings(max_examples=400, deadline=None)
@given(
    _units,
    st.integers(0, 60),  # where the units split between two consume-queue files
    st.integers(1, 40),  # maxMsgNums
    st.integers(1, 900),  # max bytes
    st.integers(0, 300),  # the commit log's min offset
    st.sampled_from([64, 200, 1 << 30]),  # commit-log file size
    st.integers(0, 70),  # units examined at most
    st.one_of(st.none(), st.frozensets(st.integers(0, 3))),
)
def test_walk_units_takes_the_runs_the_python_walk_takes(
    spec: list[tuple[int, int, int, bool]],
    split: int,
    max_msgs: int,
    max_bytes: int,
    min_phy: int,
    file_size: int,
    examine: int,
    tags_codes: frozenset[int] | None,
) -> None:
    """A pull's walk over consume-queue units, across two files: the same runs, the same
    fullness and the same state to go on from as the Python loop, and within the pull's
    limits."""
    assert codec is not None
    units = _pack_units(spec, file_size)
    cut = min(split, len(spec)) * UNIT.size
    answers = []
    for walk in (codec.walk_units, walk_units_py):
        runs: list[tuple[int, int, int]] = []
        state: tuple[int, int, int, int, int, int, int, int] = (5, 0, 0, 0, -1, -1, -1, 0)
        full = False
        for chunk in (units[:cut], units[cut:]):
            if not full:
                full, state = walk(
                    memoryview(chunk), state, 5 + examine, max_msgs, max_bytes, min_phy,
                    file_size, tags_codes, runs,
                )  # fmt: skip
        answers.append((full, state, runs))
    assert answers[0] == answers[1]
    full, state, runs = answers[0]
    if state[7]:
        runs = [*runs, (state[4], state[5], state[7])]
    taken = sum(n for _, _, n in runs)
    assert taken <= max_msgs
    assert state[0] - 5 <= min(examine, len(spec))
    if taken > 1:
        assert sum(end - start for start, end, _ in runs) <= max_bytes
    for start, end, _ in runs:
        assert start >= min_phy
        assert start // file_size == (end - 1) // file_size  # never across a file end


@needs_codec
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)), min_size=1, max_size=30),
    st.integers(0, 200),
    st.integers(0, 400),
    st.integers(0, 60),
    st.integers(0, 700),
)
def test_record_sizes_are_the_put_loops_or_none_past_a_limit(
    lengths: list[tuple[int, int]], base: int, max_body: int, max_props: int, room: int
) -> None:
    """``plan_put``'s sizes: each record's base plus its body and properties; None (the
    Python loop then names the entry) as soon as one breaks a limit."""
    assert codec is not None
    batch = [BatchEntry(0, b"b" * body, b"p" * props) for body, props in lengths]
    within = all(
        body <= max_body and props <= max_props and base + body + props <= room
        for body, props in lengths
    )
    sizes = [base + body + props for body, props in lengths]
    expected = (sum(sizes), sizes) if within else None
    assert codec.record_sizes(batch, base, max_body, max_props, room) == expected


@needs_codec
def test_encode_entries_refuses_sizes_that_do_not_match_the_records() -> None:
    assert codec is not None
    batch = [BatchEntry(0, memoryview(b"x" * 10), b"")]
    with pytest.raises(ValueError, match="planned"):
        codec.encode_entries(b"\x01T", 0, batch, [10], 0, bytes(48), 1, 0, [0])
    with pytest.raises(ValueError, match="positions"):
        codec.encode_entries(b"\x01T", 0, batch, [102], 0, bytes(48), 1, 0, [])


_prop_text = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    st.text(max_size=6),  # non-ASCII: UTF-16 code units in the hash
).map(lambda t: t.replace("\x01", "").replace("\x02", ""))


@st.composite
def _properties(draw: st.DrawFn) -> bytes:
    """Raw properties as clients write them (name \\x01 value \\x02 ...): TAGS once, twice or
    not at all, empty or not, first or not; now and then bytes that are no properties at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40))
    names = draw(
        st.lists(
            st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "XTAGS", "WAIT"]), max_size=5
        )
    )
    pairs = [f"{name}\x01{draw(_prop_text)}" for name in names]
    return "\x02".join(pairs).encode("utf-8") + (b"\x02" if draw(st.booleans()) else b"")


@needs_codec
@settings(max_examples=500, deadline=None)
@given(_properties(), st.sampled_from(["T", SCHEDULE_TOPIC]), st.integers(0, 2**41))
def test_unit_tags_code_is_the_python_functions(props: bytes, topic: str, store_ts: int) -> None:
    """The consume-queue tagsCode (TAGS hash, or a delay's delivery time) of the put path and the
    dispatcher: the compiled one answers what the Python one answers, whatever the bytes."""
    assert codec is not None
    assert codec.unit_tags_code(topic, props, store_ts) == unit_tags_code(topic, props, store_ts)


@needs_codec
def test_unit_tags_code_hashes_tags_as_java_string_hashcode() -> None:
    """Independent of the Python function: "TagA".hashCode() in Java is 2598919."""
    assert codec is not None
    assert codec.unit_tags_code("T", b"KEYS\x01k\x02TAGS\x01TagA\x02WAIT\x01true", 0) == 2598919
    # Java's "polygenelubricants".hashCode() is Integer.MIN_VALUE: the sum wraps, signed
    assert codec.unit_tags_code("T", b"TAGS\x01polygenelubricants", 0) == -(2**31)


@needs_codec
def test_encoded_records_parse_back() -> None:
    """Independent of the Python encoder: habroker's record reader finds each message."""
    assert codec is not None
    bodies = [b"a" * 10, b"", b"xyz" * 100]
    batch = [
        BatchEntry(i, memoryview(b), b"TAGS\x01t\x02" if i else b"") for i, b in enumerate(bodies)
    ]
    # SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED...
    shared = struct.pack(">iq8sq8siq", 0, 1, bytes(8), 2, bytes(8), 0, 0)
    topic_tail = b"\x01T"
    record_base = 36 + len(shared) + 4 + len(topic_tail) + 2
    (buf,), end = codec.encode_records(topic_tail, 3, batch, 40, shared, record_base, 1000)
    assert end == 1000 + len(buf)
    pos = 0
    for i, body in enumerate(bodies):
        size, _magic, crc, queue_id, flag, queue_offset, phys = struct.unpack_from(
            ">iiiiiqq", buf, pos
        )
        assert (crc, queue_id, flag, queue_offset, phys) == (
            body_crc32(body) & 0x7FFFFFFF,
            3,
            i,
            40 + i,
            1000 + pos,
        )
        parsed = parse_record(bytes(buf), pos, False)
        assert isinstance(parsed, tuple) and parsed[0] == "T" and parsed[1] == 3
        pos += size
    assert pos == len(buf)


def test_pure_python_switch_turns_the_codec_off() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from habroker.store import native; from habroker import wire;"
            "print(native.codec is None, wire._split_batch is None, native.describe())",
        ],
        env={**os.environ, native.PURE_PYTHON_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"True True pure Python ({native.PURE_PYTHON_ENV} is set)"


# -- dispatch parse -------------------------------------------------------------------------------

_hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 1), ("::1", 10911), ("fe80::2", 7)])
_props = st.one_of(
    st.just(b""),
    st.builds(
        lambda tags, keys, extra: (
            (f"TAGS\x01{tags}\x02" if tags else "") + f"KEYS\x01{keys}\x02" + extra
        ).encode(),
        st.text(
            st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
            max_size=8,
        ),
        st.text("abc", min_size=1, max_size=4),
        st.sampled_from(["", "DELAY\x013\x02", "UNIQ_KEY\x01AB\x02", "TAGS\x01x\x02"]),
    ),
)


@st.composite
def _records(draw: st.DrawFn) -> bytes:
    magic = draw(st.sampled_from([MAGIC_V1, MAGIC_V2]))
    topic = draw(st.sampled_from(["T", "TopicTest", SCHEDULE_TOPIC, "主题"]))
    return encode_record(
        topic=topic,
        queue_id=draw(st.integers(0, 2**31 - 1)),
        body=draw(st.binary(max_size=200)),
        properties=draw(_props),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        queue_offset=draw(st.integers(0, 2**62)),
        commit_log_offset=draw(st.integers(0, 2**62)),
        sys_flag=draw(st.sampled_from([0, 1, 2, 8])),
        store_timestamp=draw(st.integers(0, 2**45)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
        magic=magic,
    )


@needs_codec
@settings(max_examples=400, deadline=None)
@given(
    st.lists(_records(), min_size=1, max_size=4),
    st.integers(0, 40),
    st.booleans(),
    st.data(),
)
def test_parse_record_reads_what_the_python_parse_reads(
    records: list[bytes], lead: int, check_crc: bool, data: st.DataObject
) -> None:
    """Valid records, then the same log damaged: a flipped byte, a cut, a BLANK, garbage."""
    assert codec is not None
    log = bytes(lead) + b"".join(records)
    damaged = bytearray(log)
    at = data.draw(st.integers(0, len(damaged) - 1))
    damaged[at] ^= data.draw(st.integers(1, 255))
    cut = log[: data.draw(st.integers(0, len(log)))]
    blank = log[:lead] + struct.pack(">ii", 8, -875286124) + bytes(20)
    for buf in (log, bytes(damaged), cut, blank, bytearray(log), memoryview(log)):
        for pos in {lead, at, max(0, len(buf) - 8), 0}:
            expected = parse_record(buf, pos, check_crc)
            assert codec.parse_record(buf, pos, check_crc) == expected, (pos, expected)


@needs_codec
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_parse_record_refuses_what_the_python_parse_refuses(data: bytes, pos: int) -> None:
    assert codec is not None
    assert codec.parse_record(data, pos, True) == parse_record(data, pos, True)


@needs_codec
def test_parse_record_turns_a_delay_into_the_delivery_time() -> None:
    assert codec is not None
    record = encode_record(
        topic=SCHEDULE_TOPIC, queue_id=2, body=b"x", properties=b"DELAY\x013\x02TAGS\x01a\x02",
        store_timestamp=1_000,
    )  # fmt: skip
    levels = [100, 200, 300, 400]
    expected = parse_record(record, 0, False, levels)
    assert codec.parse_record(record, 0, False, levels) == expected
    assert isinstance(expected, tuple) and expected[4] == 1_000 + 300


def test_a_broker_told_to_run_pure_python_says_so_and_serves(
    broker_factory: Callable[..., LocalBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch is not a ``HABROKER_*`` name: those are configuration keys, and an unknown
    one stops a broker at start."""
    monkeypatch.setenv(native.PURE_PYTHON_ENV, "1")
    broker = broker_factory(autoCreateTopicEnable=True)
    with Producer(broker.http_address) as producer:
        sent = producer.send_batch("codec", [b"a", b"bc", b"def"], queue_id=0)
    assert sent.status == "PUT_OK"
    assert f"record codec: pure Python ({native.PURE_PYTHON_ENV} is set)" in (
        broker.log_path.read_text()
    )


@needs_codec
@pytest.mark.parametrize("length", [2**31 - 1, 2**31 - 22, 2**31 - 23, 2**31 - 40])
def test_lengths_near_two_to_the_31_do_not_wrap(length: int) -> None:
    """Regression: 32-bit sums of a length read from the wire wrapped and read past the
    buffer (a segfault the fuzz campaign found in split_batch)."""
    assert codec is not None
    entry = struct.pack(">iiiii", 30, 0, 0, 0, length) + bytes(10)
    split, error = codec.split_batch(entry, 4096, BatchEntry)
    assert split is None and error is not None
    assert (str(BadBatch(*error)), BadBatch(*error).index) == _refusal(entry)
    record = bytearray(encode_record(topic="T", queue_id=0, body=b"x" * 40))
    for at in (0, 84):  # TOTALSIZE, BODYLENGTH
        spoiled = bytearray(record)
        struct.pack_into(">i", spoiled, at, length)
        assert codec.parse_record(bytes(spoiled), 0, True) == parse_record(bytes(spoiled), 0, True)


def _refusal(data: bytes) -> tuple[str, int | None]:
    try:
        decode_batch_py(data)
    except BadBatch as exc:
        return str(exc), exc.index
    raise AssertionError("the Python split accepted it")


@needs_codec
def test_encode_records_refuses_a_record_base_that_does_not_match_its_blocks() -> None:
    assert codec is not None
    batch = [BatchEntry(0, memoryview(b"x" * 100), b"")]
    with pytest.raises(ValueError, match="record_base 60 does not match"):
        codec.encode_records(b"\x01T", 0, batch, 0, bytes(48), 60, 0)


# -- PackedBatch: the batch as split_batch read it, into the put loops without an object a message
_packed_entries = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300), _properties()),
    min_size=1,
    max_size=20,
)


@needs_codec
@settings(max_examples=200, deadline=None)
@given(
    _packed_entries,
    st.sampled_from([48, 60, 72]),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["TopicAB", SCHEDULE_TOPIC]),
)
def test_the_put_loops_read_a_packed_batch_as_its_entries(
    entries: list[tuple[int, bytes, bytes]],
    shared_len: int,
    first_queue_offset: int,
    phys: int,
    queue_id: int,
    topic: str,
) -> None:
    """Each compiled put loop given split_batch's PackedBatch writes exactly what it writes
    given the same messages as a list of BatchEntry, and what the Python loops write."""
    assert codec is not None
    packed, error = codec.split_batch(_raw(entries), 4096, BatchEntry)
    assert error is None and type(packed).__name__ == "PackedBatch"
    listed = [BatchEntry(flag, memoryview(body), props) for flag, body, props in entries]
    raw_topic = topic.encode()
    topic_tail = bytes((len(raw_topic),)) + raw_topic
    shared = bytes(range(shared_len))
    base = 36 + shared_len + 4 + len(topic_tail) + 2

    sized = codec.record_sizes(packed, base, 4 << 20, 32767, 1 << 30)
    assert sized == codec.record_sizes(listed, base, 4 << 20, 32767, 1 << 30) is not None
    assert codec.record_sizes(packed, base, 100, 32767, 1 << 30) == codec.record_sizes(
        listed, base, 100, 32767, 1 << 30
    )
    _, sizes = sized

    parts, end = codec.encode_records(
        topic_tail, queue_id, packed, first_queue_offset, shared, base, phys
    )
    parts_py, end_py = encode_records_py(
        topic_tail, queue_id, listed, first_queue_offset, shared, base, phys
    )
    assert end == end_py
    assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in parts_py)

    levels = (1000, 5000)
    assert codec.put_cq_units(topic, packed, sizes, phys, 1234, levels) == codec.put_cq_units(
        topic, listed, sizes, phys, 1234, levels
    )

    positions = [phys + sum(48 + n for n in sizes[:i]) for i in range(len(sizes))]
    args = (topic_tail, queue_id, sizes, first_queue_offset, shared, 3, 77, positions)
    packed_entries = codec.encode_entries(*args[:2], packed, *args[2:])
    listed_entries = codec.encode_entries(*args[:2], listed, *args[2:])
    python_entries = encode_entries_py(*args[:2], listed, *args[2:])
    assert [bytes(p) for p in packed_entries] == [bytes(p) for p in listed_entries]
    assert b"".join(bytes(p) for p in packed_entries) == b"".join(bytes(p) for p in python_entries)


@needs_codec
def test_a_packed_batch_is_a_sequence_of_its_entries() -> None:
    assert codec is not None
    messages = [(7, b"first", b"TAGS\x01a"), (0, b"", b""), (-1, b"x" * 1000, b"KEYS\x01k")]
    packed, _ = codec.split_batch(_raw(messages), 4096, BatchEntry)
    assert packed is not None
    assert len(packed) == 3
    assert _plain(packed) == messages
    assert _plain([packed[-1]]) == messages[-1:]
    assert _plain(packed[1:]) == messages[1:]
    assert isinstance(packed[0].body, memoryview)  # a view into the request, not a copy
    with pytest.raises(IndexError):
        packed[3]
    with pytest.raises(IndexError):
        packed[-4]


@needs_codec
def test_bodies_crc_without_a_python_call_is_zlibs() -> None:
    """The body CRC taken from ISA-L's C entry point (where the isal package exports it) is
    zlib's CRC-32, as the Python function's is; the records say so byte for byte. isal is a
    dependency, so the C entry point must be found; on zlib's function the records are checked
    all the same (the fallback path)."""
    import zlib

    assert codec is not None
    if body_crc32 is not zlib.crc32:
        assert codec.C_CRC, "ISA-L's crc32_gzip_refl was not found in the isal extension"
    bodies = [b"", b"a", bytes(range(256)) * 40, b"\xff" * 1023]
    raw = b"".join(encode_entry(b) for b in bodies)
    packed, _ = codec.split_batch(raw, 4096, BatchEntry)
    parts, _ = codec.encode_records(b"\x01T", 0, packed, 0, bytes(48), 36 + 48 + 4 + 2 + 2, 0)
    record, at = b"".join(bytes(p) for p in parts), 0
    for body in bodies:
        size, _magic, crc = struct.unpack_from(">iii", record, at)
        assert crc == zlib.crc32(body) & 0x7FFFFFFF
        at += size
