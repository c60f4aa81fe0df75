"""PUSH_RAW, habroker's own APPEND between habroker peers: the leader's index units and entry
bytes as its files hold them.  A follower fed raw pushes must end with the same data and
index files as one fed DLedger's JSON pushes (what a Java follower gets), refuse pushes that
do not fit its log, and a peer that does not know the code must make the leader fall back."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from habroker.dledger.entry import CURRENT_MAGIC, INDEX_UNIT_SIZE, units_match_entries_py
from habroker.dledger.mmap_file_store import DLedgerMmapFileStore, DLedgerStoreError
from habroker.dledger.protocol import (
    RAW_KEY,
    DLedgerResponseCode,
    decode_raw_push,
    push_entries,
    push_span,
    raw_push_header,
)
from habroker.dledger.rpc_service import DLedgerRpcService
from habroker.store import native

FILE = 4096
RC = DLedgerResponseCode


def open_store(root: Path, self_id: str, size: int = FILE) -> DLedgerMmapFileStore:
    store = DLedgerMmapFileStore(root, self_id, data_file_size=size, index_file_size=32 * 64)
    store.recover()
    return store


def leader_with(root: Path, sizes: list[int], term: int = 1) -> DLedgerMmapFileStore:
    leader = open_store(root, "n0")
    for i, size in enumerate(sizes):
        leader.append_as_leader(bytes([i % 251]) * size, term)
    return leader


def files_of(root: Path, self_id: str, kind: str) -> dict[str, bytes]:
    folder = root / f"dledger-{self_id}" / kind
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def push_all(leader: DLedgerMmapFileStore, follower: DLedgerMmapFileStore, batch: int) -> int:
    """Raw pushes of everything the leader has, ``batch`` entries at most each; the count."""
    pushes = 0
    first = follower.ledger_end_index + 1
    while first <= leader.ledger_end_index:
        count, body = leader.raw_push_body(first, batch, 1 << 20)
        assert count > 0
        follower.append_raw_as_follower(body, first, count, 1, "n0")
        first += count
        pushes += 1
    return pushes


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_raw_pushes_leave_the_files_json_pushes_leave(tmp_path, batch):
    # 30 entries of 148..248 bytes: the first data file ends with a blank, the batches cross it
    sizes = [100 + (i * 37) % 101 for i in range(30)]
    leader = leader_with(tmp_path / "l", sizes)
    raw = open_store(tmp_path / "r", "n1")
    pushes = push_all(leader, raw, batch)
    json_fed = open_store(tmp_path / "j", "n2")
    json_fed.append_batch_as_follower([leader.get(i) for i in range(30)], 1, "n0")  # type: ignore[misc]
    for store in (leader, raw, json_fed):
        store.close()
    print(f"batch {batch}: {pushes} raw pushes for 30 entries")
    assert len(files_of(tmp_path / "l", "n0", "data")) == 2, "the log spans two data files"
    for kind in ("data", "index"):
        expected = files_of(tmp_path / "l", "n0", kind)
        assert files_of(tmp_path / "r", "n1", kind) == expected
        assert files_of(tmp_path / "j", "n2", kind) == expected
    again = open_store(tmp_path / "r", "n1")
    assert (again.ledger_begin_index, again.ledger_end_index, again.ledger_end_term) == (0, 29, 1)
    assert [again.get(i).body for i in range(30)] == [  # type: ignore[union-attr]
        bytes([i]) * size for i, size in enumerate(sizes)
    ]


def test_a_raw_push_body_is_the_index_units_then_one_slice_of_the_data_file(tmp_path):
    leader = leader_with(tmp_path, [100] * 5)
    count, body = leader.raw_push_body(1, 3, 1 << 20)
    assert count == 3
    units = [struct.unpack_from(">iqiqq", body, i * INDEX_UNIT_SIZE) for i in range(3)]
    assert [(u[3], u[1], u[2]) for u in units] == [(1, 148, 148), (2, 296, 148), (3, 444, 148)]
    assert body[3 * INDEX_UNIT_SIZE :] == b"".join(
        bytes(v) for v in leader.raw_entries(1, 3, 1 << 20)
    )
    assert leader.raw_push_body(5, 3, 1 << 20) == (0, b""), "nothing after the end"
    assert leader.raw_push_body(0, 64, 200)[0] == 2, "max_bytes bounds the batch (about)"


def raw_request(body: bytes, first: int, count: int) -> dict[str, object]:
    fields = raw_push_header(
        "g", local_id="n0", remote_id="n1", term=1, commit_index=-1, first=first, count=count
    )
    return decode_raw_push(fields, body)


def test_a_raw_push_decodes_to_an_append_with_its_span_and_entries(tmp_path):
    leader = leader_with(tmp_path, [10, 20, 30])
    count, body = leader.raw_push_body(0, 64, 1 << 20)
    request = raw_request(body, 0, count)
    assert (request["type"], request["term"], request["leaderId"]) == ("APPEND", 1, "n0")
    assert push_span(request) == (0, 3)
    assert [e.body for e in push_entries(request)] == [b"\0" * 10, b"\1" * 20, b"\2" * 30]
    assert request[RAW_KEY].first == 0
    with pytest.raises(ValueError, match="term as a number"):
        decode_raw_push({"firstEntryIndex": "0", "count": "1", "commitIndex": "0"}, body)
    with pytest.raises(ValueError, match="at least one entry"):
        decode_raw_push(
            {"term": "1", "firstEntryIndex": "0", "count": "1", "commitIndex": "0"}, b""
        )


def test_a_raw_push_that_does_not_follow_the_log_is_refused_and_nothing_is_written(tmp_path):
    leader = leader_with(tmp_path / "l", [100] * 6)
    follower = open_store(tmp_path / "f", "n1")
    count, body = leader.raw_push_body(2, 64, 1 << 20)
    with pytest.raises(DLedgerStoreError, match="expected 0") as refused:
        follower.append_raw_as_follower(body, 2, count, 1, "n0")
    assert refused.value.code == RC.INCONSISTENT_INDEX
    count, body = leader.raw_push_body(0, 64, 1 << 20)
    with pytest.raises(DLedgerStoreError, match="of a term in"):  # entries of a later term
        follower.append_raw_as_follower(body, 0, count, 0, "n0")
    assert follower.ledger_end_index == -1
    assert follower.data.max_offset == 0 and follower.index.max_offset == 0


@pytest.mark.parametrize("spoiled_entry", [20, 22])
def test_a_raw_push_with_a_bad_entry_keeps_the_entries_before_it(tmp_path, spoiled_entry):
    # 30 entries of 148 bytes: 27 in the first data file, so a push of 20..29 is walked
    leader = leader_with(tmp_path / "l", [100] * 30)
    follower = open_store(tmp_path / "f", "n1")
    push_all(leader, follower, 20)
    assert follower.ledger_end_index == 29
    follower.close()
    follower = open_store(tmp_path / "g", "n1")
    count, body = leader.raw_push_body(0, 20, 1 << 20)
    follower.append_raw_as_follower(body, 0, count, 1, "n0")
    count, body = leader.raw_push_body(20, 64, 1 << 20)
    spoiled = bytearray(body)
    at = count * INDEX_UNIT_SIZE + (spoiled_entry - 20) * 148
    struct.pack_into(">q", spoiled, at + 8, 99)  # the entry says it is entry 99
    with pytest.raises(DLedgerStoreError, match=f"expected entry {spoiled_entry}") as refused:
        follower.append_raw_as_follower(bytes(spoiled), 20, count, 1, "n0")
    assert refused.value.code == RC.INCONSISTENT_STATE
    assert follower.ledger_end_index == spoiled_entry - 1
    kept = range(spoiled_entry)
    assert [follower.get(i) for i in kept] == [leader.get(i) for i in kept]
    # the leader sends again from the follower's end: the rest goes down
    push_all(leader, follower, 64)
    assert [follower.get(i) for i in range(30)] == [leader.get(i) for i in range(30)]


# where a field lies: (region, offset in the unit or the entry header, struct format, new value)
SPOILS = {
    "entry index": ("entry", 8, ">q", 99),
    "entry term": ("entry", 16, ">q", 0),
    "entry pos": ("entry", 24, ">q", 7),
    "entry size": ("entry", 4, ">i", 147),
    "entry body length": ("entry", 44, ">i", 101),
    "entry magic": ("entry", 0, ">i", 2),
    "unit pos": ("unit", 4, ">q", 7),
    "unit size": ("unit", 12, ">i", 149),
    "unit index": ("unit", 16, ">q", 99),
    "unit term": ("unit", 24, ">q", 0),
}


def _spoil(body: bytes, count: int, nth: int, what: str) -> bytes:
    region, at, fmt, value = SPOILS[what]
    spoiled = bytearray(body)
    base = nth * INDEX_UNIT_SIZE if region == "unit" else count * INDEX_UNIT_SIZE + nth * 148
    struct.pack_into(fmt, spoiled, base + at, value)
    return bytes(spoiled)


@pytest.mark.parametrize("what", sorted(SPOILS))
def test_every_entry_of_a_raw_push_is_checked_against_its_unit(tmp_path, what):
    """A push inside one data file: a slip in one entry in the middle (not the first or the
    last) is found by the compiled check and the Python one alike."""
    leader = leader_with(tmp_path / "l", [100] * 10, term=2)
    count, body = leader.raw_push_body(0, 10, 1 << 20)
    assert count == 10
    units, entries = body[: count * INDEX_UNIT_SIZE], body[count * INDEX_UNIT_SIZE :]
    checks = [units_match_entries_py] + ([native.units_match_entries] if native.codec else [])
    for check in checks:
        assert check(units, entries, CURRENT_MAGIC)
        assert not check(units, entries[:-1], CURRENT_MAGIC)
        assert not check(units[:-INDEX_UNIT_SIZE], entries, CURRENT_MAGIC)
        spoiled = _spoil(body, count, 4, what)
        assert not check(spoiled[: count * INDEX_UNIT_SIZE], spoiled[count * INDEX_UNIT_SIZE :], 1)


@pytest.mark.parametrize("what", ["entry index", "entry body length", "entry term"])
def test_a_raw_push_in_one_file_with_a_bad_middle_entry_keeps_the_entries_before_it(tmp_path, what):
    leader = leader_with(tmp_path / "l", [100] * 10)
    follower = open_store(tmp_path / "f", "n1")
    count, body = leader.raw_push_body(0, 10, 1 << 20)
    with pytest.raises(DLedgerStoreError) as refused:
        follower.append_raw_as_follower(_spoil(body, count, 4, what), 0, count, 1, "n0")
    assert refused.value.code == RC.INCONSISTENT_STATE
    assert follower.ledger_end_index == 3
    assert [follower.get(i) for i in range(4)] == [leader.get(i) for i in range(4)]
    push_all(leader, follower, 64)
    assert [follower.get(i) for i in range(10)] == [leader.get(i) for i in range(10)]


def test_a_raw_push_whose_count_disagrees_with_its_units_is_refused(tmp_path):
    leader = leader_with(tmp_path / "l", [100] * 4)
    follower = open_store(tmp_path / "f", "n1")
    count, body = leader.raw_push_body(0, 64, 1 << 20)
    with pytest.raises(DLedgerStoreError):
        follower.append_raw_as_follower(body, 0, count + 1, 1, "n0")
    assert follower.ledger_end_index == -1
    # a unit too few: the units do not match the entries, so each entry is walked, counted
    with pytest.raises(DLedgerStoreError, match="holds 4"):
        follower.append_raw_as_follower(body[INDEX_UNIT_SIZE:], 0, count - 1, 1, "n0")
    assert follower.ledger_end_index == 3, "the entries are the leader's: the walk kept them"
    assert [follower.get(i) for i in range(4)] == [leader.get(i) for i in range(4)]


async def _leader_and_listening_follower(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A leader's log of three entries, an empty follower log, the follower's RPC service
    listening (nothing registered yet) and the leader's."""
    leader = leader_with(tmp_path / "l", [50] * 3)
    follower = open_store(tmp_path / "f", "n1")
    peers = {"n0": "127.0.0.1:0", "n1": "127.0.0.1:0"}
    server = DLedgerRpcService(dict(peers), "n1")
    await server.server.start("127.0.0.1", 0)
    peers["n1"] = f"127.0.0.1:{server.server._servers[0].sockets[0].getsockname()[1]}"
    return leader, follower, server, DLedgerRpcService(peers, "n0")


async def test_a_peer_without_push_raw_answers_unsupported_and_one_with_it_appends(tmp_path):
    """Our own RemotingServer stands for the peer here (a Java peer's answer to an unknown
    code, REQUEST_CODE_NOT_SUPPORTED, is exercised by tests/interop/test_dledger_mixed_*)."""
    leader, follower, server, client = await _leader_and_listening_follower(tmp_path)
    count, body = leader.raw_push_body(0, 64, 1 << 20)
    fields = raw_push_header(
        "g", local_id="n0", remote_id="n1", term=1, commit_index=-1, first=0, count=count
    )
    try:
        answer = await client.call_raw_push("n1", fields, body)
        assert answer["code"] == RC.UNSUPPORTED

        async def handler(request: dict[str, object]) -> dict[str, object]:
            raw = request[RAW_KEY]
            follower.append_raw_as_follower(raw.data, raw.first, raw.count, 1, "n0")  # type: ignore[attr-defined]
            return {"code": int(RC.SUCCESS), "index": raw.first, "count": raw.count}  # type: ignore[attr-defined]

        server.register_raw_push(handler)
        answer = await client.call_raw_push("n1", fields, body)
        assert (answer["code"], answer["index"], answer["count"]) == (RC.SUCCESS, 0, 3)
        assert [follower.get(i) for i in range(3)] == [leader.get(i) for i in range(3)]
        bad = await client.call_raw_push("n1", {**fields, "term": "x"}, body)
        assert bad["code"] == RC.UNEXPECTED_ARGUMENT
    finally:
        await client.stop()
        await server.stop()


async def test_a_leader_asking_for_compact_answers_reads_them_and_json_ones_alike(tmp_path):
    """The leader's pushes (``raw_push_now``) ask for the DLedger code as the remoting code and
    no body; a peer answering with DLedger's JSON body anyway (a habroker from before compact
    answers, registered here the way it did) is read the same, and a peer without PUSH_RAW
    still reads as UNSUPPORTED."""
    from habroker.dledger.protocol import DLedgerRequestCode, decode_raw_push

    leader, follower, server, client = await _leader_and_listening_follower(tmp_path)

    def handler(request: dict[str, object]) -> dict[str, object]:
        raw = request[RAW_KEY]
        follower.append_raw_as_follower(raw.data, raw.first, raw.count, 1, "n0")  # type: ignore[attr-defined]
        return {"code": int(RC.SUCCESS), "index": raw.first + raw.count - 1, "term": 1}  # type: ignore[attr-defined]

    async def push(first: int) -> dict[str, object]:
        count, body = leader.raw_push_body(first, 1, 1 << 20)
        fields = raw_push_header(
            "g", local_id="n0", remote_id="n1", term=1, commit_index=-1, first=first, count=count
        )
        answered: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        assert client.raw_push_now("n1", fields, body, answered.set_result)
        return await asyncio.wait_for(answered, 5)

    try:
        count, body = leader.raw_push_body(0, 1, 1 << 20)
        fields = raw_push_header(
            "g", local_id="n0", remote_id="n1", term=1, commit_index=-1, first=0, count=count
        )
        unsupported = await client.call_raw_push("n1", fields, body)  # connects, too
        assert unsupported["code"] == RC.UNSUPPORTED
        assert (await push(0))["code"] == RC.UNSUPPORTED, "the callback path reads it alike"
        server.register_raw_push(handler)
        assert await push(0) == {"code": RC.SUCCESS, "remoteId": "n1"}  # compact: code only
        server._register(  # the way a habroker before compact answers registered PUSH_RAW
            DLedgerRequestCode.PUSH_RAW,
            handler,
            lambda request: decode_raw_push(request.ext_fields, request.body_bytes),
        )
        assert await push(1) == {"code": RC.SUCCESS, "index": 1, "term": 1}
        assert [follower.get(i) for i in range(2)] == [leader.get(i) for i in range(2)]
    finally:
        await client.stop()
        await server.stop()


def _follower_pusher(tmp_path: Path):  # type: ignore[no-untyped-def]
    from habroker.config import parse_peers
    from habroker.dledger.entry_pusher import DLedgerEntryPusher, PusherConfig
    from habroker.dledger.member_state import MemberState

    peers = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"
    state = MemberState("g", "n1", parse_peers(peers, "n1"), tmp_path / "state")
    state.term = 1
    state.change_to_follower(1, "n0")
    store = open_store(tmp_path / "f", "n1")
    rpc = DLedgerRpcService(parse_peers(peers, "n1"), "n1")
    return DLedgerEntryPusher(state, store, rpc, PusherConfig(), lambda _index: None), store


async def test_a_push_the_follower_cannot_place_is_answered_and_the_next_one_appends(tmp_path):
    """Without a timeout around each wait, pushes are still answered: one that leaves a gap
    (INCONSISTENT_STATE after a second, so the leader compares), every waiting one when the
    pusher stops (TIMEOUT), and the next in order is appended and answered by the request
    itself."""
    leader = leader_with(tmp_path / "l", [40] * 8)
    pusher, follower = _follower_pusher(tmp_path)
    pusher.start()
    try:
        count, body = leader.raw_push_body(4, 64, 1 << 20)
        gap = asyncio.ensure_future(pusher.handle_push(raw_request(body, 4, count)))
        started = asyncio.get_running_loop().time()
        answer = await asyncio.wait_for(gap, 5)
        waited = asyncio.get_running_loop().time() - started
        print(f"a push after a gap answered {RC.name_of(answer['code'])} after {waited:.2f} s")
        assert answer["code"] == RC.INCONSISTENT_STATE and 0.9 < waited < 3
        count, body = leader.raw_push_body(0, 64, 1 << 20)
        answer = pusher.handle_push(raw_request(body, 0, count))
        assert isinstance(answer, dict), "the push next in the log is answered at once, no task"
        assert (answer["code"], answer["index"], answer["count"]) == (RC.SUCCESS, 0, 8)
        assert [follower.get(i) for i in range(8)] == [leader.get(i) for i in range(8)]
        stuck = asyncio.ensure_future(pusher.handle_push(raw_request(body, 20, count)))
        await asyncio.sleep(0.1)
        assert not stuck.done()
    finally:
        await pusher.stop()
    answer = await asyncio.wait_for(stuck, 1)
    assert answer["code"] == RC.TIMEOUT, "a stopping pusher answers what still waits"


async def test_a_leader_refused_as_repeated_compares_and_the_follower_catches_up(tmp_path):
    """A stand-in for a Java 4.9.7 follower's EntryHandler (scripted, not habroker's handler):
    it keeps the first APPEND of an index it cannot place yet and answers it only after the
    leader stopped waiting, refuses every resend of that index as REPEATED_PUSH, and drops
    what it holds on COMPARE or TRUNCATE (DLedger 0.2's writeRequestMap). The real case, a
    push that reaches a wiped Java follower before it follows, is
    tests/interop/test_dledger_mixed_retention.py, where it depended on timing."""
    from habroker.config import parse_peers
    from habroker.dledger.entry_pusher import DLedgerEntryPusher, PusherConfig
    from habroker.dledger.member_state import MemberState
    from habroker.dledger.protocol import DLedgerRequestCode, PushType

    leader_store = leader_with(tmp_path / "l", [40] * 5)
    seen: list[str] = []
    got: set[int] = set()
    peers = {"n0": "127.0.0.1:0", "n1": "127.0.0.1:0"}
    follower = DLedgerRpcService(dict(peers), "n1")

    following_at = asyncio.get_running_loop().time() + 0.3
    held: dict[int, asyncio.Future[None]] = {}

    async def scripted(request: dict[str, object]) -> dict[str, object]:
        kind = str(request["type"])
        base = {"group": "g", "term": 1, "remoteId": "n0", "localId": "n1", "leaderId": "n0"}
        if kind == PushType.APPEND:
            index = min(e.index for e in push_entries(request))
            seen.append(f"APPEND {index}")
            if index in held:  # a stale push of this index waits here
                return {**base, "code": int(RC.REPEATED_PUSH), "index": index}
            following = asyncio.get_running_loop().time() >= following_at
            if following and index == max(got, default=-1) + 1:
                got.update(e.index for e in push_entries(request))
                return {**base, "code": int(RC.SUCCESS), "index": index}
            wait: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            held[index] = wait
            await wait  # answered only when dropped, long after the leader gave up
            return {**base, "code": int(RC.INCONSISTENT_STATE), "index": index}
        seen.append(kind)
        for wait in held.values():
            if not wait.done():
                wait.set_result(None)
        held.clear()
        if kind == PushType.COMPARE:
            return {**base, "code": int(RC.INCONSISTENT_STATE), "beginIndex": -1, "endIndex": -1}
        if kind == PushType.TRUNCATE:
            got.add(int(request["entry"]["index"]))  # type: ignore[index]
        return {**base, "code": int(RC.SUCCESS), "index": -1}

    follower.register(DLedgerRequestCode.PUSH, scripted)
    await follower.server.start("127.0.0.1", 0)
    peers["n1"] = f"127.0.0.1:{follower.server._servers[0].sockets[0].getsockname()[1]}"
    state = MemberState(
        "g",
        "n0",
        parse_peers(";".join(f"{k}-{v}" for k, v in peers.items()), "n0"),
        tmp_path / "state",
    )
    state.term = 1
    state.change_to_leader(1)
    rpc = DLedgerRpcService(dict(peers), "n0")
    pusher = DLedgerEntryPusher(
        state, leader_store, rpc, PusherConfig(raw_push=False, max_batch_entries=1), lambda _i: None
    )
    dispatcher = pusher.dispatchers["n1"]
    # the follower first answers the COMPARE as empty, and the leader appends from entry 0
    dispatcher.term, dispatcher.leader_id = 1, "n0"
    dispatcher._change(-1, PushType.APPEND)
    pusher.start()
    try:
        async with asyncio.timeout(10):
            while dispatcher.water_mark < 4:  # noqa: ASYNC110 - no event tells a water mark
                await asyncio.sleep(0.05)
    finally:
        await pusher.stop()
        await rpc.stop()
        await follower.stop()
    print(f"follower saw: {seen[:8]}")
    assert got == {0, 1, 2, 3, 4}
    assert "APPEND 0" in seen and PushType.COMPARE in seen, seen
    assert seen.index(PushType.COMPARE) > seen.index("APPEND 0")


async def test_a_lone_produce_is_pushed_at_once_and_produces_waiting_together_share_a_push(
    tmp_path,
):
    """A real leader pusher and a real follower (its EntryHandler behind its RPC server): a
    produce with no other one waiting for a quorum goes to the follower before its append
    returns (no loop pass); two produces appended while one waits go out in one push."""
    from habroker.config import parse_peers
    from habroker.dledger.entry_pusher import DLedgerEntryPusher, PusherConfig
    from habroker.dledger.member_state import MemberState
    from habroker.dledger.protocol import PushType

    follower_pusher, follower = _follower_pusher(tmp_path)
    follower_rpc = follower_pusher.rpc
    follower_rpc.register_raw_push(follower_pusher.handle_push)
    await follower_rpc.server.start("127.0.0.1", 0)
    port = follower_rpc.server._servers[0].sockets[0].getsockname()[1]
    peers = f"n0-127.0.0.1:1;n1-127.0.0.1:{port}"
    state = MemberState("g", "n0", parse_peers(peers, "n0"), tmp_path / "leader-state")
    state.term = 1
    state.change_to_leader(1)
    leader = open_store(tmp_path / "l", "n0", 1 << 20)
    rpc = DLedgerRpcService(parse_peers(peers, "n0"), "n0")
    pusher = DLedgerEntryPusher(state, leader, rpc, PusherConfig(), lambda _index: None)
    dispatcher = pusher.dispatchers["n1"]
    dispatcher.term, dispatcher.leader_id = 1, "n0"
    dispatcher._change(-1, PushType.APPEND)  # as after a COMPARE of two empty logs

    def produce(count: int, tag: bytes) -> asyncio.Future[dict[str, object]]:
        entries = leader.append_batch_as_leader([tag * 40] * count, 1)
        return pusher.wait_ack_at(1, entries[-1].index, entries[-1].pos)

    try:
        # the first push opens the connection (a task); the ones after it are sent at once
        assert (await asyncio.wait_for(produce(1, b"w"), 5))["code"] == RC.SUCCESS
        pushes = dispatcher.pushes
        alone = produce(3, b"a")
        assert dispatcher.pushes == pushes + 1, "a lone produce is pushed before append returns"
        together = [produce(2, b"b"), produce(1, b"c")]
        assert dispatcher.pushes == pushes + 1, "produces that wait together are not pushed yet"
        answers = await asyncio.wait_for(asyncio.gather(alone, *together), 5)
        assert [a["code"] for a in answers] == [RC.SUCCESS] * 3
        assert dispatcher.pushes == pushes + 2, "the two waiting produces went in one push"
        assert follower.ledger_end_index == leader.ledger_end_index == 6
        assert [follower.get(i) for i in range(7)] == [leader.get(i) for i in range(7)]
    finally:
        await pusher.stop()
        await follower_pusher.stop()
        await rpc.stop()
        await follower_rpc.stop()
