"""DLedger pieces on their own: peers parsing, the persisted term and vote, the vote rules,
heartbeat answers and the JSON bodies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from habroker.config import BrokerConfig, ConfigError, broker_id_of, parse_peers
from habroker.dledger.entry_pusher import WaterMarks
from habroker.dledger.leader_elector import DLedgerLeaderElector
from habroker.dledger.member_state import MemberState, Role
from habroker.dledger.protocol import (
    DLedgerResponseCode,
    PushType,
    VoteResult,
    decode,
    encode,
    push_entries,
    push_request,
    push_span,
)
from habroker.dledger.rpc_service import DLedgerRpcService

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def test_peers_are_parsed_in_order_and_bad_ones_named():
    assert parse_peers(PEERS, "n1") == {
        "n0": "127.0.0.1:40911",
        "n1": "127.0.0.1:40912",
        "n2": "127.0.0.1:40913",
    }
    with pytest.raises(ConfigError, match="not one of dLegerPeers"):
        parse_peers(PEERS, "n7")
    with pytest.raises(ConfigError, match="expected <id>-<host>:<port>"):
        parse_peers("n0-localhost", "n0")
    with pytest.raises(ConfigError, match="twice"):
        parse_peers("n0-a:1;n0-b:2", "n0")
    assert broker_id_of("n0") == 1 and broker_id_of("n4") == 5
    with pytest.raises(ConfigError, match="digits"):
        broker_id_of("leader")


def test_config_requires_self_id_and_valid_timings():
    with pytest.raises(ConfigError, match="dLegerSelfId"):
        BrokerConfig(enableDLegerCommitLog=True, dLegerPeers=PEERS)
    with pytest.raises(ConfigError, match="dLegerMaxVoteIntervalMs"):
        BrokerConfig(
            enableDLegerCommitLog=True,
            dLegerPeers=PEERS,
            dLegerSelfId="n0",
            dLegerMinVoteIntervalMs=500,
            dLegerMaxVoteIntervalMs=400,
        )
    with pytest.raises(ConfigError, match="preferredLeaderId"):
        BrokerConfig(
            enableDLegerCommitLog=True, dLegerPeers=PEERS, dLegerSelfId="n0", preferredLeaderId="n9"
        )
    cfg = BrokerConfig(
        enableDLegerCommitLog=True, dLegerPeers=PEERS, dLegerSelfId="n0", brokerName="payments"
    )
    assert cfg.dledger_group == "payments"


def _state(tmp_path: Path, self_id: str = "n0") -> MemberState:
    return MemberState("g", self_id, parse_peers(PEERS, self_id), tmp_path / "dl")


def test_term_and_vote_survive_a_restart(tmp_path):
    st = _state(tmp_path)
    st.change_to_candidate(0)
    assert st.next_term() == 1
    st.set_vote_for("n2")
    text = (tmp_path / "dl" / "currterm").read_text()
    assert "currTerm=1" in text and "voteLeader=n2" in text
    again = _state(tmp_path)
    assert (again.term, again.vote_for) == (1, "n2")
    # a candidate that heard of term 7 jumps there, vote cleared
    again.change_to_candidate(7)
    assert again.next_term() == 7 and again.vote_for is None
    assert _state(tmp_path).term == 7


def _elector(tmp_path: Path, end: tuple[int, int]) -> DLedgerLeaderElector:
    st = _state(tmp_path, "n1")
    rpc = DLedgerRpcService(st.peers, "n1")
    return DLedgerLeaderElector(st, rpc, lambda: end)


def _vote(term: int, leader: str = "n0", end_index: int = 10, end_term: int = 2) -> dict:
    return {
        "group": "g",
        "leaderId": leader,
        "remoteId": "n1",
        "localId": leader,
        "term": term,
        "ledgerEndIndex": end_index,
        "ledgerEndTerm": end_term,
    }


def test_votes_go_only_to_logs_at_least_as_up_to_date_and_once_per_term(tmp_path):
    async def run() -> None:
        el = _elector(tmp_path, (10, 2))
        st = el.state
        st.term = 3
        # a newer term: become its candidate first, the sender asks again
        r = await el.handle_vote(_vote(4))
        assert r["voteResult"] == VoteResult.REJECT_TERM_NOT_READY
        st.change_to_candidate(4)
        st.next_term()  # now term 4, as maintainAsCandidate would do
        assert (await el.handle_vote(_vote(4, end_term=1)))["voteResult"] == (
            VoteResult.REJECT_EXPIRED_LEDGER_TERM
        )
        assert (await el.handle_vote(_vote(4, end_index=9)))["voteResult"] == (
            VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        )
        assert (await el.handle_vote(_vote(3)))["voteResult"] == VoteResult.REJECT_EXPIRED_VOTE_TERM
        assert (await el.handle_vote(_vote(4, leader="n7")))["voteResult"] == (
            VoteResult.REJECT_UNKNOWN_LEADER
        )
        ok = await el.handle_vote(_vote(4, end_index=12))
        assert ok["voteResult"] == VoteResult.ACCEPT and st.vote_for == "n0"
        assert (await el.handle_vote(_vote(4, leader="n2", end_index=20)))["voteResult"] == (
            VoteResult.REJECT_ALREADY_VOTED
        )
        # asking again for the same candidate is fine
        assert (await el.handle_vote(_vote(4)))["voteResult"] == VoteResult.ACCEPT

    asyncio.run(run())


def test_heartbeats_make_a_follower_or_are_refused(tmp_path):
    async def run() -> None:
        el = _elector(tmp_path, (-1, -1))
        st = el.state
        st.term = 5
        hb = {"group": "g", "leaderId": "n2", "remoteId": "n1", "localId": "n2", "term": 5}
        r = await el.handle_heartbeat(hb)
        assert r["code"] == DLedgerResponseCode.SUCCESS
        assert st.role == Role.FOLLOWER and st.leader_id == "n2"
        other = {**hb, "leaderId": "n0"}
        assert (await el.handle_heartbeat(other))["code"] == DLedgerResponseCode.INCONSISTENT_LEADER
        stale = {**hb, "term": 4}
        r = await el.handle_heartbeat(stale)
        assert r["code"] == DLedgerResponseCode.EXPIRED_TERM and r["term"] == 5
        newer = {**hb, "term": 6}
        assert (await el.handle_heartbeat(newer))["code"] == DLedgerResponseCode.TERM_NOT_READY
        assert st.role == Role.CANDIDATE and el.need_increase_term

    asyncio.run(run())


def test_commit_index_is_the_median_water_mark(tmp_path):
    st = _state(tmp_path)
    st.term = 2
    marks = WaterMarks(st)
    for peer, index in (("n0", 9), ("n1", 4), ("n2", 7)):
        marks.update(2, peer, index)
    assert marks.quorum_index(2) == 7
    assert not marks.update(2, "n1", 3), "water marks never go back"
    assert not marks.update(1, "n1", 99), "an old term's answer is ignored"
    st.term = 3
    assert marks.quorum_index(3) == -1, "a new term starts over"


def test_bodies_are_fastjson_like():
    body = push_request(
        "g", local_id="n0", remote_id="n1", term=3, push_type=PushType.COMMIT, commit_index=41
    )
    raw = encode(body)
    parsed = json.loads(raw)
    assert list(parsed) == sorted(parsed), "fields in name order"
    assert "entry" not in parsed, "nulls are left out"
    assert parsed["type"] == "COMMIT" and parsed["commitIndex"] == 41
    assert decode(raw) == parsed
    with pytest.raises(ValueError):
        decode(b"[1]")


# -- malformed input from the network (found by fuzz/: dledger_entry, dledger_push) -------------
def test_entry_decode_refuses_a_short_buffer_with_value_error():
    from habroker.dledger.entry import DLedgerEntry
    from habroker.dledger.entry import decode as decode_entry

    raw = bytes(DLedgerEntry(index=1, term=1, body=b"abc", pos=0).encode())
    assert decode_entry(raw).body == b"abc"
    for cut in (0, 1, 47):  # the fuzzer's first find: b"" was a struct.error
        with pytest.raises(ValueError, match="48-byte header"):
            decode_entry(raw[:cut])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"APPEND","entry":{"body":1}}',  # the fuzzer's find: TypeError from a2b_base64
        b'{"type":"APPEND","entry":{"index":"x"}}',
        b'{"type":"APPEND","entry":{"index":[1]}}',
        b'{"type":"APPEND","entry":{"index":1e400}}',
        b'{"type":"APPEND","entry":[1]}',
        b'{"type":"APPEND","batchEntry":{"index":1}}',
        b'{"type":"APPEND","batchEntry":[1,2]}',
        b'{"type":"APPEND","batchEntry":[{"index":{}}]}',
    ],
)
def test_malformed_pushes_are_value_errors(raw):
    body = decode(raw)
    with pytest.raises(ValueError):
        push_entries(body)
    if b'"body"' not in raw:
        with pytest.raises(ValueError):
            push_span(body)


def test_pushed_entries_still_decode():
    from habroker.dledger.entry import DLedgerEntry, to_json_dict

    entry = DLedgerEntry(index=7, term=3, body=b"\x00payload", pos=96)
    body = decode(json.dumps({"type": "APPEND", "entry": to_json_dict(entry)}).encode())
    assert push_span(body) == (7, 1)
    assert push_entries(body) == [entry]
    quoted = decode(b'{"batchEntry":[{"index":"8","term":"3"},{"index":9}]}')
    assert push_span(quoted) == (8, 2)
    assert [e.index for e in push_entries(quoted)] == [8, 9]


def test_a_deeply_nested_body_is_a_value_error():
    with pytest.raises(ValueError, match="nests too deeply"):
        decode(b"[" * 100_000)
