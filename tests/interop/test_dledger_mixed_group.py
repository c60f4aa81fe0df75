"""One DLedger group of two real RocketMQ 4.9.7 brokers and one habroker peer.

In a private namespace: a Java name server, Java peers n0 and n1, habroker peer n2.  The group
elects a leader; messages the real Java producer sends replicate to every peer with
byte-identical DLedger entries (each peer's ``dledger-<id>/data`` files, entry by entry); the
leader, whichever it is, is killed (SIGKILL); the two left elect a leader at a higher term and
take writes; the killed peer restarts and catches up to the same entries.  All DLedger traffic
goes through recording proxies (tests/interop/dledger_recorder.py): every frame the habroker
peer sent must have the remoting header, the body form and the body fields Java peers use for
the same kind of frame.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from habroker.local import LocalBroker

from interop.dledger_java import GROUP, JavaDLedgerBroker, peers_text, start_dledger_group
from tests.interop.dledger_recorder import Exchange, Frame, Recorder
from tests.interop.rocketmq_java import (
    JavaNameServer,
    NetNS,
    events_of,
    run_driver,
    run_mqadmin,
    summary,
)

#: Client port and DLedger port of every peer are 30000 apart (as pods sharing 10911/40911 are):
#: a habroker follower finds its leader's client port that way.
PEERS = {"n0": "127.0.0.1:40911", "n1": "127.0.0.1:40921", "n2": "127.0.0.1:40931"}
JAVA_IDS = ("n0", "n1")
HABROKER_ID = "n2"
FILE_SIZE = 64 * 1024 * 1024  # the Java brokers' data files (mappedFileSizeCommitLog)
TOPIC = "DLedgerMixed"
PUSH = 51004
PUSH_RAW = 59104  # habroker's own APPEND; Java must refuse it so the leader falls back to JSON
REQUEST_CODE_NOT_SUPPORTED = 3
RAW_REFUSED = "PUSH_RAW refused with REQUEST_CODE_NOT_SUPPORTED"
ENTRY_MAGIC = 1
BLANK_MAGIC = 0xFFFFFFFF


@dataclass
class Peer:
    """A Java or habroker peer behind one face: role, data files, kill, restart."""

    self_id: str
    java: JavaDLedgerBroker | None = None
    habroker: LocalBroker | None = None

    @property
    def data_dir(self) -> Path:
        if self.java is not None:
            return self.java.data_dir
        assert self.habroker is not None
        return Path(self.habroker.config["storePathRootDir"]) / f"dledger-{self.self_id}" / "data"

    @property
    def running(self) -> bool:
        if self.java is not None:
            return self.java.running
        assert self.habroker is not None
        return self.habroker.running

    def status(self) -> tuple[str, int] | None:
        """(role, term) once this peer has taken the role (a leader: writable as master)."""
        if self.java is not None:
            last = self.java.role()
            return None if last is None else (last.role, last.term)
        assert self.habroker is not None
        try:
            code, body = self.habroker.request("GET", "/v1/status", timeout=2)
        except OSError:
            return None
        if code != 200 or not isinstance(body, dict) or "dledger" not in body:
            return None
        role, term = str(body["dledger"]["role"]), int(body["dledger"]["term"])
        if role == "LEADER" and body.get("brokerId") != 0:
            return ("LEADER-NOT-MASTER-YET", term)
        return role, term

    def kill(self) -> None:
        if self.java is not None:
            self.java.kill()
        else:
            assert self.habroker is not None
            self.habroker.kill()

    def start(self) -> None:
        if self.java is not None:
            self.java.start()
        else:
            assert self.habroker is not None
            self.habroker.start()

    def log_tail(self, lines: int = 30) -> str:
        if self.java is not None:
            return self.java.tail_log(lines)
        assert self.habroker is not None
        return self.habroker.tail_log(lines)

    def __repr__(self) -> str:
        return f"{self.self_id}({'java' if self.java is not None else 'habroker'})"


def read_entries(data_dir: Path) -> dict[int, bytes]:
    """Every DLedger entry in a peer's data files, by index, as the raw bytes on disk (header +
    body), checked to sit at the position it names."""
    entries: dict[int, bytes] = {}
    for path in sorted(data_dir.glob("[0-9]" * 20)):
        data = path.read_bytes()
        base = int(path.name)
        # a log rebuilt at a leader's first entry starts there, zeros before it; an entry's
        # magic (1) makes the first non-zero byte its fourth
        at = max(0, len(data) - len(data.lstrip(b"\0")) - 3) if not entries else 0
        while at + 48 <= len(data):
            magic = int.from_bytes(data[at : at + 4], "big")
            if magic == BLANK_MAGIC:
                break  # the rest of this file is unused
            if magic != ENTRY_MAGIC:
                break  # end of what was written
            size = int.from_bytes(data[at + 4 : at + 8], "big")
            index = int.from_bytes(data[at + 8 : at + 16], "big", signed=True)
            pos = int.from_bytes(data[at + 24 : at + 32], "big", signed=True)
            assert pos == base + at, f"{path}: entry {index} at {base + at} names pos {pos}"
            entries[index] = data[at : at + size]
            at += size
    return entries


def wait_leader(
    peers: Sequence[Peer], min_term: int = 0, timeout: float = 90.0, only: str | None = None
) -> tuple[Peer, int]:
    """Until a running peer (``only`` that one) leads (as master) at a term >= ``min_term`` and
    another running peer follows it at that term."""
    deadline = time.monotonic() + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = {p.self_id: p.status() for p in peers if p.running}
        for peer in peers:
            mine = seen.get(peer.self_id)
            if mine is None or mine[0] != "LEADER" or mine[1] < min_term:
                continue
            if only is not None and peer.self_id != only:
                continue
            if any(s == ("FOLLOWER", mine[1]) for i, s in seen.items() if i != peer.self_id):
                return peer, mine[1]
        time.sleep(0.2)
    tails = "\n".join(f"--- {p}\n{p.log_tail()}" for p in peers)
    raise TimeoutError(f"no leader at term >= {min_term} after {timeout}s: {seen}\n{tails}")


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what} not reached in {timeout}s; last: {last}")


def produce(ns: NetNS, prefix: str, count: int, timeout: float = 90.0) -> list[str]:
    """Send ``count`` messages with the real Java producer until all are SEND_OK (a new leader
    shows up in the name server's route once it registered as master); the acknowledged ids."""
    deadline = time.monotonic() + timeout
    acked: list[str] = []
    while True:
        events = run_driver(
            ns,
            "4.9.7",
            "produce",
            "--namesrv",
            "127.0.0.1:9876",
            "--topic",
            TOPIC,
            "--count",
            str(count),
            "--size",
            "200",
            "--id-prefix",
            f"{prefix}-{len(acked)}-",
            "--send-timeout-ms",
            "5000",
            check=False,
        )
        sends = events_of(events, "send")
        acked += [i for s in sends if s.get("status") == "SEND_OK" for i in s["ids"]]
        if events and events[-1].get("event") == "summary" and summary(events)["sendOk"] == count:
            return acked
        if time.monotonic() > deadline:
            raise AssertionError(f"sends after {timeout}s: {sends[-3:]}")
        time.sleep(1)


def create_topic(ns: NetNS, leader: Peer, timeout: float = 60.0) -> None:
    """mqadmin updateTopic on the cluster's master (the leader, once it registered as one).

    Explicit, not auto-created from TBW102: four queues whichever peer leads, and the topic
    exists before the first send."""
    deadline = time.monotonic() + timeout
    while True:
        out = run_mqadmin(
            ns, "4.9.7", "updateTopic", "-n", "127.0.0.1:9876", "-c", "DefaultCluster",
            "-t", TOPIC, "-r", "4", "-w", "4",
        )  # fmt: skip
        if "success" in out:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"updateTopic found no master ({leader} leads):\n{out}")
        time.sleep(1)


def same_entries(peers: Sequence[Peer], at_least: int) -> Callable[[], tuple[bool, Any]]:
    """A check: every peer's data files hold the same entries, at least ``at_least`` of them."""

    def check() -> tuple[bool, Any]:
        logs = {p.self_id: read_entries(p.data_dir) for p in peers}
        ends = {i: (min(e, default=None), max(e, default=None)) for i, e in logs.items()}
        first = next(iter(logs.values()))
        equal = all(log == first for log in logs.values())
        return equal and len(first) >= at_least, ends

    return check


def _kind(exchange: Exchange) -> str:
    """Request code, PUSH type, and ``/batch`` for a push of ``batchEntry`` (Java 4.9.7 peers
    push one ``entry`` at a time unless enableBatchPush; habroker batches what is waiting)."""
    request = exchange.request
    if request.code != PUSH:
        return str(request.code)
    body = request.body_json()
    return f"{request.code}/{body.get('type')}{'/batch' if body.get('batch') else ''}"


def check_habroker_frames(exchanges: Sequence[Exchange]) -> set[str]:
    """Every DLedger frame the habroker peer sent, as requester or answerer, against the
    frames Java peers sent of the same kind: remoting code (the request's; 200 for answers),
    flag, JSON header with Java's fields (habroker's remoting always writes ``extFields``, Java
    leaves an empty one out), body in fastjson's form, and the same body fields as some Java
    frame of that kind.  The kinds compared (both sides seen); :data:`RAW_REFUSED` among them
    when habroker's PUSH_RAW reached a Java peer, which must have refused it (remoting code 3,
    no body) for habroker to push JSON instead."""
    java: dict[tuple[str, bool], set[frozenset[str]]] = {}
    ours: dict[tuple[str, bool], list[Frame]] = {}
    compared: set[str] = set()
    for exchange in exchanges:
        if exchange.request.code == PUSH_RAW:
            fields = exchange.request.header.get("extFields", {})
            assert fields.get("localId") == HABROKER_ID, fields
            answer = exchange.response
            if answer is not None:
                where = (answer.header, answer.body[:200])
                assert answer.code == REQUEST_CODE_NOT_SUPPORTED, where
                assert answer.is_response and not answer.body, where
                compared.add(RAW_REFUSED)
            continue
        sent = [(exchange.request, False)]
        if exchange.response is not None:
            sent.append((exchange.response, True))
        for frame, is_answer in sent:
            request_body = exchange.request.body_json()
            sender = exchange.request.callee if is_answer else request_body.get("localId")
            key = (_kind(exchange), is_answer)
            if sender == HABROKER_ID:
                ours.setdefault(key, []).append(frame)
            else:
                java.setdefault(key, set()).add(frozenset(frame.body_json()))
    header_keys = {"code", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"}
    for (kind, is_answer), frames in ours.items():
        for frame in frames:
            where = f"habroker {'answer to' if is_answer else 'request'} {kind}"
            assert frame.serialize_type == 0, where
            assert set(frame.header) - {"extFields"} == header_keys, (where, frame.header)
            assert frame.header.get("extFields", {}) == {}, (where, frame.header)
            assert frame.header["flag"] == (1 if is_answer else 0), (where, frame.header)
            assert frame.header["code"] == (200 if is_answer else int(kind.split("/")[0])), (
                where,
                frame.header,
            )
            assert frame.body == fastjson(frame.body_json()), (where, frame.body)
            shapes = java.get((kind, is_answer))
            if shapes:
                assert frozenset(frame.body_json()) in shapes, (where, frame.body, shapes)
                compared.add(f"{'answer ' if is_answer else ''}{kind}")
    return compared


def fastjson(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def habroker_peer(
    netns: NetNS, extra: dict[str, Any], via: dict[str, str] | None = None
) -> LocalBroker:
    """The habroker peer n2 (not started): Java's key names, the Java peers' file size."""
    view = {p: a if p == HABROKER_ID else (via or {}).get(p, a) for p, a in PEERS.items()}
    return netns.local_broker(
        netns.root / HABROKER_ID,
        **{
            "brokerName": "broker-a",
            "listenPort": 10931,
            "namesrvAddr": "127.0.0.1:9876",
            "enableDLegerCommitLog": True,
            "dLegerGroup": GROUP,
            "dLegerPeers": peers_text(view),
            "dLegerSelfId": HABROKER_ID,
            "mappedFileSizeCommitLog": FILE_SIZE,
            "autoCreateTopicEnable": True,  # as the Java peers (rocketmq_java.JavaBroker.config)
            **extra,
        },
    )


def start_mixed_group(
    netns: NetNS, extra: dict[str, Any], via: dict[str, str] | None = None
) -> list[Peer]:
    """A Java name server, Java peers n0 and n1 and habroker peer n2, booted; ``extra`` goes to
    every peer's configuration, ``via`` (peer id -> proxy address) is how peers reach others."""
    JavaNameServer(netns, netns.root / "namesrv").start()  # first: brokers register at boot
    javas = start_dledger_group(
        netns, netns.root, PEERS, JAVA_IDS, via=via, extra=extra, wait=False
    )
    habroker = habroker_peer(netns, extra, via)
    habroker.start(wait=False)
    peers = [Peer(i, java=javas[i]) for i in JAVA_IDS] + [Peer(HABROKER_ID, habroker=habroker)]
    for broker in javas.values():
        broker.wait_booted()
    habroker.wait_healthy(60)
    return peers


@pytest.fixture
def recorder(netns: NetNS) -> Iterator[Recorder]:
    """Proxies through which every peer reaches every other (at its DLedger port + 1000)."""
    with Recorder(
        netns, {p: (int(a.rpartition(":")[2]) + 1000, a) for p, a in PEERS.items()}
    ) as started:
        yield started


@pytest.mark.parametrize("preferred", [None, HABROKER_ID], ids=["any-leader", "habroker-leads"])
def test_two_java_peers_and_a_habroker_peer_replicate_fail_over_and_catch_up(
    netns: NetNS, recorder: Recorder, preferred: str | None
) -> None:
    """``preferred``: every peer's preferredLeaderId (the leader hands leadership to it once it
    caught up, DLedger's LEADERSHIP_TRANSFER), so the habroker peer leads first."""
    extra = {} if preferred is None else {"preferredLeaderId": preferred}
    peers = start_mixed_group(netns, extra, recorder.via)

    leader, term = wait_leader(peers, only=preferred)
    first_leader = leader
    print(f"\nleader {leader} term {term}")
    create_topic(netns, leader)
    acked = produce(netns, "before", 6)
    entries = wait_until(same_entries(peers, len(acked)), "the same entries on every peer")
    print(f"{len(acked)} acked; entries on every peer: {entries}")

    killed_at = time.monotonic()
    leader.kill()
    survivors = [p for p in peers if p is not leader]
    new_leader, new_term = wait_leader(survivors, min_term=term + 1)
    print(
        f"killed {leader}; {new_leader} leads term {new_term} after {time.monotonic() - killed_at:.1f} s"
    )
    assert new_term > term
    acked += produce(netns, "after", 6)
    wait_until(same_entries(survivors, len(acked)), "the same entries on the two left")

    leader.start()
    entries = wait_until(
        same_entries(peers, len(acked)), "the restarted peer caught up", timeout=90
    )
    print(f"{leader} restarted and caught up: entries {entries}")
    stored = b"".join(read_entries(peers[0].data_dir).values())
    missing = [
        i for i in acked if not re.search(b"id\x01" + re.escape(i.encode()) + b"\\b", stored)
    ]
    assert not missing, f"acknowledged but in no entry: {missing}"
    status = leader.status()
    assert status is not None and status[1] >= new_term, status
    if preferred is None:
        assert status[0] == "FOLLOWER", status

    compared = check_habroker_frames(recorder.exchanges())
    print(f"habroker's frames have Java's shape in {len(compared)} kinds: {sorted(compared)}")
    if first_leader.self_id == HABROKER_ID:
        assert RAW_REFUSED in compared, "the habroker leader's PUSH_RAW reached no Java peer"
    for peer in peers:  # no graceful shutdown needed
        peer.kill()
