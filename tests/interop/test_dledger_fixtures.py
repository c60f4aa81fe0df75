"""DLedger frames captured between real RocketMQ 4.9.7 peers (tests/interop/fixtures/dledger,
made by ``python -m tests.interop.capture_dledger``): the wire facts habroker's DLedger peer
relies on, and habroker's own bodies (its request builders and its answers to the captured
requests) byte for byte against Java's, all without Java."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from habroker.dledger.entry import decode as decode_entry
from habroker.dledger.entry import entries_json, same_entry, to_json_dict
from habroker.dledger.entry_pusher import EntryDispatcher, EntryHandler, PusherConfig, PushPayload
from habroker.dledger.leader_elector import DLedgerLeaderElector
from habroker.dledger.member_state import MemberState, Role
from habroker.dledger.protocol import (
    ENTRIES_KEY,
    Body,
    DLedgerRequestCode,
    DLedgerResponseCode,
    PushType,
    VoteResult,
    base,
    code_of,
    decode,
    decode_push,
    encode,
    push_entries,
    push_span,
)
from habroker.dledger.rpc_service import DLedgerRpcService

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dledger"
VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER = 51001, 51002, 51004, 51005
#: DLedgerEntry's fixed header: magic, size, index, term, pos, channel, chainCrc, bodyCrc,
#: body length.
ENTRY_HEADER = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4 + 4
MESSAGE_MAGIC_V1 = 0xDAA320A7


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
EXPECTED = {
    "heartbeat-200",
    "vote-accept",
    "push-append-200",
    "push-commit-200",
    "push-compare-406",
    "push-truncate-200",
    "leadership-transfer-200",
}


def body_of(frame: dict[str, Any]) -> bytes:
    if "body_base64" in frame:
        return base64.b64decode(frame["body_base64"])
    text: str = frame["body"]
    return text.encode()


def fastjson(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def test_the_capture_has_every_kind_the_peer_needs() -> None:
    assert set(NAMES) >= EXPECTED


@pytest.mark.parametrize("name", NAMES)
def test_remoting_frames(name: str) -> None:
    fixture = load(name)
    request, response = fixture["request"], fixture["response"]
    for frame in (request, response):
        assert frame["serialize_type"] == 0  # JSON headers
        assert json.loads(frame["header_text"]) == frame["header"]
        assert frame["header_text"].encode() == fastjson(frame["header"])
        assert frame["header"]["language"] == "JAVA" and frame["header"]["version"] == 407
    assert request["header"]["code"] in (VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER)
    assert request["header"]["flag"] == 0
    # the remoting answer is always SUCCESS; DLedger's outcome is the body's "code"
    assert response["header"]["code"] == 200 and response["header"]["flag"] == 1
    assert response["header"]["opaque"] == request["header"]["opaque"]


@pytest.mark.parametrize("name", NAMES)
def test_bodies_are_sorted_compact_json_without_nulls(name: str) -> None:
    fixture = load(name)
    for frame in (fixture["request"], fixture["response"]):
        raw = body_of(frame)
        value = json.loads(raw)
        assert raw == fastjson(value)
        assert "null" not in raw.decode()
    request = json.loads(body_of(fixture["request"]))
    assert request["code"] == 200
    assert request["localId"] == fixture["caller"] and request["remoteId"] == fixture["callee"]


def test_heartbeat_answers_carry_only_code_and_term() -> None:
    assert body_of(load("heartbeat-200")["response"]) == b'{"code":200,"term":-1}'


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("vote-")])
def test_vote_answers_copy_the_ids(name: str) -> None:
    fixture = load(name)
    request = json.loads(body_of(fixture["request"]))
    answer = json.loads(body_of(fixture["response"]))
    assert {"ledgerEndIndex", "ledgerEndTerm", "leaderId"} <= set(request)
    assert request["leaderId"] == request["localId"]  # a candidate names itself
    for key in ("group", "leaderId", "localId", "remoteId"):
        assert answer[key] == request[key]
    assert answer["voteResult"] == name.removeprefix("vote-").replace("-", "_").upper()
    if answer["voteResult"] == "ACCEPT":
        assert answer["term"] == request["term"] and answer["code"] == 200


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-")])
def test_push_requests_and_answers(name: str) -> None:
    fixture = load(name)
    request = json.loads(body_of(fixture["request"]))
    answer = json.loads(body_of(fixture["response"]))
    assert request["type"] == name.split("-")[1].upper()
    assert request["leaderId"] == request["localId"]
    entry = request.get("entry")
    if request["batch"]:  # enableBatchPush: the entries as a list, no ``entry``
        batch = request["batchEntry"]
        assert entry is None and len(batch) > 1 and request["count"] == len(batch)
        assert request["firstEntryIndex"] == batch[0]["index"] == answer["index"]
        assert request["lastEntryIndex"] == batch[-1]["index"]
        assert [e["index"] for e in batch] == list(range(batch[0]["index"], batch[-1]["index"] + 1))
        assert request["totalSize"] == sum(e["size"] for e in batch)
        assert answer["count"] == len(batch)
    elif request["type"] == "COMMIT":
        assert request["batchEntry"] == [] and request["totalSize"] == 0
        assert entry is None and request["count"] == 0
        assert request["firstEntryIndex"] == request["lastEntryIndex"] == -1
    else:
        assert request["batchEntry"] == [] and request["totalSize"] == 0
        assert entry is not None and request["count"] == 1
        assert request["firstEntryIndex"] == request["lastEntryIndex"] == entry["index"]
        assert answer["index"] == entry["index"]
    assert answer["code"] == int(name.rsplit("-", 1)[1])
    assert set(answer) >= {"beginIndex", "endIndex", "code", "count", "group", "term"}
    assert "localId" not in answer and "leaderId" not in answer


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-") and "commit" not in n])
def test_entries_hold_a_rocketmq_message(name: str) -> None:
    request = json.loads(body_of(load(name)["request"]))
    for entry in request["batchEntry"] or [request["entry"]]:
        body = base64.b64decode(entry["body"])
        assert entry["magic"] == 1 and entry["channel"] == 0
        assert entry["bodyCrc"] == 0 and entry["chainCrc"] == 0
        assert entry["size"] == ENTRY_HEADER + len(body)
        assert int.from_bytes(body[:4], "big") == len(body)  # the message's TOTALSIZE
        assert int.from_bytes(body[4:8], "big") == MESSAGE_MAGIC_V1


def test_an_empty_follower_answers_compare_with_inconsistent_state_then_truncates_at_0() -> None:
    compare = json.loads(body_of(load("push-compare-406")["response"]))
    assert (compare["code"], compare["beginIndex"], compare["endIndex"]) == (406, -1, -1)
    truncate = load("push-truncate-200")
    request = json.loads(body_of(truncate["request"]))
    assert request["entry"]["index"] == 0 and request["entry"]["pos"] == 0
    answer = json.loads(body_of(truncate["response"]))
    assert (answer["code"], answer["beginIndex"], answer["endIndex"]) == (200, 0, 0)


def test_the_leader_asks_the_transferee_which_answers_with_code_and_its_new_term() -> None:
    fixture = load("leadership-transfer-200")
    request = json.loads(body_of(fixture["request"]))
    assert request["transferId"] == request["leaderId"] == request["localId"] == fixture["caller"]
    assert request["transfereeId"] == request["remoteId"] == fixture["callee"]
    assert "takeLeadershipLedgerIndex" in request
    answer = json.loads(body_of(fixture["response"]))
    assert answer == {"code": 200, "term": request["term"] + 1}


# -- habroker's DLedger peer against the captures -------------------------------------------------

PEER_IDS = ("n0", "n1", "n2")


def _kind_code(name: str) -> DLedgerRequestCode:
    return {
        "vote": DLedgerRequestCode.VOTE,
        "heartbeat": DLedgerRequestCode.HEART_BEAT,
        "push": DLedgerRequestCode.PUSH,
        "leadership": DLedgerRequestCode.LEADERSHIP_TRANSFER,
    }[name.split("-")[0]]


@pytest.mark.parametrize("name", NAMES)
def test_our_codes_and_names_match(name: str) -> None:
    fixture = load(name)
    assert fixture["request"]["header"]["code"] == _kind_code(name)
    answer = decode(body_of(fixture["response"]))
    assert DLedgerResponseCode(code_of(answer)).value == answer["code"]
    if "voteResult" in answer:
        assert VoteResult(answer["voteResult"]).value == answer["voteResult"]
    request = decode(body_of(fixture["request"]))
    if "type" in request:
        assert PushType(request["type"]).value == request["type"]


def test_response_code_names() -> None:
    names = {int(n.rsplit("-", 1)[1]) for n in NAMES if n[-3:].isdigit()}
    assert {DLedgerResponseCode.name_of(c) for c in names} >= {
        "SUCCESS",
        "INCONSISTENT_STATE",
    }
    assert DLedgerResponseCode.name_of(405) == "NOT_FOLLOWER"
    assert DLedgerResponseCode.name_of(413) == "REPEATED_PUSH"
    assert DLedgerResponseCode.name_of(416) == "TERM_NOT_READY"


@pytest.mark.parametrize("name", NAMES)
def test_decode_then_encode_gives_the_same_bytes(name: str) -> None:
    fixture = load(name)
    for frame in (fixture["request"], fixture["response"]):
        raw = body_of(frame)
        assert encode(decode(raw)) == raw


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-") and "commit" not in n])
def test_entries_round_trip_through_our_entry(name: str) -> None:
    request = decode(body_of(load(name)["request"]))
    as_sent = request["batchEntry"] or [request["entry"]]
    entries = push_entries(request)
    assert [to_json_dict(entry) for entry in entries] == as_sent
    for entry, sent in zip(entries, as_sent, strict=True):
        assert json.dumps(to_json_dict(entry), separators=(",", ":")) == json.dumps(
            sent, separators=(",", ":")
        )
        raw = entry.encode()
        assert len(raw) == entry.size
        again = decode_entry(bytes(raw))
        assert same_entry(entry, again) and again.pos == entry.pos
    if request["batch"]:  # entries_json builds the list straight from the entries' bytes
        raws = [memoryview(bytes(entry.encode())) for entry in entries]
        assert json.loads(str(entries_json(raws))) == as_sent


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("heartbeat-")])
def test_our_heartbeat_request_and_answer(name: str, tmp_path: Path) -> None:
    fixture = load(name)
    request = decode(body_of(fixture["request"]))
    ours = base(
        request["group"],
        local_id=request["localId"],
        remote_id=request["remoteId"],
        leader_id=request["leaderId"],
        term=request["term"],
    )
    assert encode(ours) == body_of(fixture["request"])

    elector = _elector(tmp_path, request["remoteId"], (-1, -1))
    # 200: the callee was at the leader's term; 416: behind it (a peer restarted empty)
    elector.state.term = request["term"] if name.endswith("-200") else request["term"] - 1
    answer = asyncio.run(elector.handle_heartbeat(request))
    assert encode(answer) == body_of(fixture["response"])


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("vote-")])
def test_our_vote_request_and_answer(name: str, tmp_path: Path) -> None:
    fixture = load(name)
    request = decode(body_of(fixture["request"]))
    expected = decode(body_of(fixture["response"]))
    ours = base(
        request["group"],
        local_id=request["localId"],
        remote_id=request["remoteId"],
        leader_id=request["localId"],
        term=request["term"],
    )
    ours.update(ledgerEndIndex=request["ledgerEndIndex"], ledgerEndTerm=request["ledgerEndTerm"])
    assert encode(ours) == body_of(fixture["request"])

    # the callee's state that gives this answer: its term is the answer's
    result = expected["voteResult"]
    end = (0, request["ledgerEndTerm"] + 1) if result == "REJECT_EXPIRED_LEDGER_TERM" else (-1, -1)
    elector = _elector(tmp_path, request["remoteId"], end)
    state = elector.state
    state.term = expected["term"]
    if result in ("REJECT_ALREADY_VOTED", "REJECT_ALREADY_HAS_LEADER"):
        other = next(p for p in PEER_IDS if p not in (request["localId"], request["remoteId"]))
        state.set_vote_for(other)
        if result == "REJECT_ALREADY_HAS_LEADER":
            state.leader_id = other
    answer = asyncio.run(elector.handle_vote(request))
    assert encode(answer) == body_of(fixture["response"])


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-")])
def test_our_push_request(name: str) -> None:
    """What our leader's EntryDispatcher sends: APPENDs through ``_send_append`` (entries as
    they lie in the data files; several make a batch), the others through ``_request``."""
    fixture = load(name)
    request = decode(body_of(fixture["request"]))
    entries = push_entries(request)
    pusher = SimpleNamespace(
        state=SimpleNamespace(group=request["group"], self_id=request["localId"]),
        store=SimpleNamespace(committed_index=request["commitIndex"]),
        config=PusherConfig(raw_push=False),  # as to a Java peer, after it refused PUSH_RAW
    )
    dispatcher = EntryDispatcher(cast(Any, pusher), request["remoteId"])
    dispatcher.term = request["term"]
    sent: list[Body] = []
    setattr(dispatcher, "_spawn", lambda body, span: sent.append(body))  # noqa: B010
    push_type = PushType(request["type"])
    if push_type == PushType.APPEND:
        raws = [memoryview(bytes(entry.encode())) for entry in entries]
        dispatcher._send_append(entries[0].index, PushPayload.of(raws))
    else:
        sent.append(dispatcher._request(push_type, entries[0] if entries else None))
    assert [encode(body) for body in sent] == [body_of(fixture["request"])]


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-")])
def test_our_push_answer(name: str) -> None:
    fixture = load(name)
    request = decode(body_of(fixture["request"]))
    expected = decode(body_of(fixture["response"]))
    # the follower's ledger as the answer reports it
    store = SimpleNamespace(
        ledger_begin_index=expected["beginIndex"], ledger_end_index=expected["endIndex"]
    )
    handler = EntryHandler(cast(Any, SimpleNamespace(store=store)))
    answer = handler._response(request, expected["code"])
    assert encode(answer) == body_of(fixture["response"])


def test_our_leadership_transfer_request_and_the_transferees_answer(tmp_path: Path) -> None:
    fixture = load("leadership-transfer-200")
    request = decode(body_of(fixture["request"]))
    expected = decode(body_of(fixture["response"]))
    leader, transferee = request["localId"], request["remoteId"]

    # the leader's request: what our elector sends the transferee
    elector = _elector(tmp_path / "leader", leader, (request["takeLeadershipLedgerIndex"], -1))
    elector.state.term = request["term"]
    elector.state.change_to_leader(request["term"])
    sent: list[Body] = []

    async def call(peer: str, code: int, body: Body, timeout: float = 3.0) -> Body:  # noqa: ASYNC109
        assert (peer, code) == (transferee, DLedgerRequestCode.LEADERSHIP_TRANSFER)
        sent.append(body)
        return expected

    elector.rpc = cast(Any, SimpleNamespace(call=call))
    admin = base(request["group"], local_id=leader, remote_id=leader, leader_id=leader)
    admin.update(term=request["term"], transferId=leader, transfereeId=transferee)
    asyncio.run(elector.handle_leadership_transfer(admin))
    assert [encode(body) for body in sent] == [body_of(fixture["request"])]

    # the transferee's answer once it leads the next term
    taker = _elector(tmp_path / "taker", transferee, (-1, -1))

    async def take() -> Body:
        done: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        taker._take_leadership = (expected["term"], done)
        taker._check_take_leadership(expected["term"], Role.LEADER)
        return await done

    assert encode(asyncio.run(take())) == body_of(fixture["response"])


def _elector(tmp_path: Path, self_id: str, end: tuple[int, int]) -> DLedgerLeaderElector:
    peers = {peer: f"127.0.0.1:{40911 + i}" for i, peer in enumerate(PEER_IDS)}
    state = MemberState("RaftNode00", self_id, peers, tmp_path / "dledger")
    return DLedgerLeaderElector(state, DLedgerRpcService(peers, self_id), lambda: end)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("push-")])
def test_push_decoded_in_one_pass_as_the_general_way(name: str) -> None:
    """decode_push (msgspec, the follower's fast path) reads Java's pushes exactly as the
    general decode + push_entries does: the same fields and entries, the same span."""
    raw = body_of(load(name)["request"])
    general = decode(raw)
    fast = decode_push(raw)
    assert ENTRIES_KEY in fast
    for key in ("group", "localId", "remoteId", "leaderId", "term", "type", "commitIndex"):
        assert fast[key] == general.get(key), key
    for key in ("entry", "batchEntry"):  # the handler refuses a COMPARE without an entry
        assert bool(fast.get(key)) == bool(general.get(key)), key
    slow_entries = push_entries(general)
    fast_entries = push_entries(fast)
    assert len(fast_entries) == len(slow_entries)
    for a, b in zip(fast_entries, slow_entries, strict=True):
        assert same_entry(a, b) and (a.chain_crc, a.body_crc) == (b.chain_crc, b.body_crc)
    assert push_span(fast) == push_span(general)


def test_push_the_typed_decoder_refuses_goes_the_general_way() -> None:
    """Quoted numbers are read as numbers; a null number, bad base64 or a body that is not a
    push fall back to the general decoder and fail (or not) exactly as it does."""
    raw = body_of(load("push-append-200")["request"])
    body = json.loads(raw)
    body["entry"]["index"] = str(body["entry"]["index"])
    body["term"] = str(body["term"])
    quoted = decode_push(json.dumps(body).encode())
    assert quoted["term"] == int(body["term"])
    assert push_entries(quoted)[0].index == int(body["entry"]["index"])
    body["entry"]["pos"] = None
    nulled = decode_push(json.dumps(body).encode())
    assert ENTRIES_KEY not in nulled and nulled["entry"]["pos"] is None
    body["entry"]["pos"] = 0
    body["entry"]["body"] = "not base64!"
    bad = decode_push(json.dumps(body).encode())
    assert ENTRIES_KEY not in bad
    with pytest.raises(ValueError):
        push_entries(bad)
    for junk in (b"", b"[1]", b"{", b'"x"'):
        with pytest.raises(ValueError):
            decode_push(junk)
