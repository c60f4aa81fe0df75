"""The operator's DLEDGER sweep against a real DLedger group of habroker processes on 127.0.0.1
(no Kubernetes): the status it derives from the peers' own reports, and a rolling step that
transfers leadership off an outdated leader through the real admin endpoint.

Pods are stand-ins (``bg-peers-<i>`` for peer n<i>); the brokers, their elections and the
leadership transfer are real.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from brokergroup_operator.brokerapi import BrokerAPI
from brokergroup_operator.dledger import find_leader
from brokergroup_operator.rolling import StsInfo
from brokergroup_operator.settings import Settings
from brokergroup_operator.spec import GroupSpec, parse_spec
from brokergroup_operator.status import BrokerReport, PodInfo
from brokergroup_operator.sweep import GroupState, poll_broker, sweep
from habroker.local import LocalDLedgerGroup

from tests.habroker.test_dledger import FAST as BROKER_FAST
from tests.habroker.test_dledger import (
    agreed_statuses,
    create_topic,
    log_entries,
    produce,
    read_all,
)

LOG = logging.getLogger("test")
FAST = {
    "dLegerHeartBeatIntervalMs": 300,
    "dLegerMaxHeartBeatLeak": 3,
    "dLegerMinVoteIntervalMs": 100,
    "dLegerMaxVoteIntervalMs": 300,
    "dLegerMaxWaitAckTimeMs": 2000,
}


@pytest.fixture
def quorum(tmp_path: Path):
    group = LocalDLedgerGroup(tmp_path / "g", 3, **FAST).start()
    yield group
    group.stop()


def spec(replicas: int = 3) -> GroupSpec:
    return parse_spec(
        "bg", "ns", {"image": "x", "replicationMode": "DLEDGER", "replicas": replicas}
    )


class Harness:
    def __init__(self, local: LocalDLedgerGroup, session: aiohttp.ClientSession) -> None:
        self.local = local
        self.brokers = BrokerAPI(session, timeout=2.0)
        self.state = GroupState()
        self.status: dict[str, Any] = {}
        self.deleted: list[str] = []
        self.replicas = 3
        self.sizes: list[tuple[int, int]] = []
        self.spec: GroupSpec | None = None  # spec(replicas) unless set
        self.doors: list[Any] = []  # external Services
        self.host_ips: dict[str, str] = {}  # pod -> its node's IP

    @property
    def addresses(self) -> dict[str, str]:
        return {f"bg-peers-{i}": p.http_address for i, p in enumerate(self.local.peers)}

    async def apply_size(self, size: tuple[int, int]) -> None:
        """What applying the children does for a DLEDGER group's size: broker.conf names
        ``members`` peers (a pod started now boots with it) and the StatefulSet runs
        ``replicas`` pods, added or removed at the highest ordinal."""
        members, replicas = size
        self.sizes.append(size)
        local = self.local
        while len(local.peers) < replicas:
            i = len(local.peers)
            peer = local._peer(i, local.members_text(members))
            local.peers.append(peer)
            await asyncio.to_thread(peer.start, False)
        while len(local.peers) > replicas:
            await asyncio.to_thread(local.peers.pop().stop)

    def resolve(self, group: GroupSpec, pod: PodInfo) -> str | None:
        return self.addresses.get(pod.name)

    def pods(self, revisions: dict[str, str] | None = None) -> list[PodInfo]:
        revisions = revisions or {}
        return [
            PodInfo(
                name,
                i + 1,
                ip="127.0.0.1",
                host_ip=self.host_ips.get(name),
                ready=True,
                revision=revisions.get(name, "r2"),
            )
            for i, name in enumerate(self.addresses)
        ]

    async def reports(self) -> list[BrokerReport]:
        return list(
            await asyncio.gather(
                *(poll_broker(self.brokers, self.resolve, spec(), p) for p in self.pods())
            )
        )

    async def run(self, revisions: dict[str, str] | None = None, replicas: int = 3) -> Any:
        async def delete_pod(name: str) -> bool:
            self.deleted.append(name)
            return True

        sts = StsInfo(
            "bg-peers", 1, 1, update_revision="r2", replicas=len(self.local.peers), members=3
        )
        result = await sweep(
            brokers=self.brokers,
            settings=Settings(),
            group=self.spec or spec(replicas),
            pods=self.pods(revisions),
            statefulsets={"bg-peers": sts},
            previous=self.status,
            state=self.state,
            generation=1,
            delete_pod=delete_pod,
            logger=LOG,
            resolve=self.resolve,
            apply_dledger_size=self.apply_size,
            dledger_peers_text=self.local.members_text,
            external_doors=self.doors,
        )
        self.status = result.status
        return result


def leader_pod(local: LocalDLedgerGroup) -> str:
    leader = local.leader()
    return f"bg-peers-{local.peers.index(leader)}"


async def until(check: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        await asyncio.sleep(0.2)


async def test_status_follows_the_real_leader_and_a_roll_transfers_leadership(
    quorum: LocalDLedgerGroup,
) -> None:
    async with aiohttp.ClientSession() as session:
        h = Harness(quorum, session)
        old = leader_pod(quorum)
        quorum.wait_converged()

        async def serving() -> bool:
            result = await h.run()
            peers = result.status["dledger"]["peers"]
            return result.status["phase"] == "Running" and all(p["inSync"] for p in peers)

        await until(serving, 30, "the quorum Running with every peer caught up")
        d = h.status["dledger"]
        assert d["leader"] == old
        assert d["leaderId"] == f"n{old.rsplit('-', 1)[1]}"
        assert d["term"] >= 1
        assert [p["id"] for p in d["peers"]] == ["n0", "n1", "n2"]
        assert {p["role"] for p in d["peers"] if p["pod"] != old} == {"FOLLOWER"}
        assert all(p["live"] and p["lagEntries"] == 0 for p in d["peers"])
        assert h.status["master"]["pod"] == old
        leader = find_leader(spec(), await h.reports())
        assert leader is not None and leader.pod == old

        # only the leader is outdated: the sweep moves leadership before anything restarts
        term = d["term"]
        result = await h.run({old: "r1"})
        assert h.deleted == []
        transferred = [e for e in result.events if e.reason == "LeadershipTransferred"]
        assert transferred, [(e.reason, e.message) for e in result.events]
        new = leader_pod(quorum)
        assert new != old

        async def followed() -> bool:
            await h.run({old: "r1"})
            return bool(h.status["dledger"].get("leader") == new)

        await until(followed, 30, "the status naming the new leader")
        assert h.status["dledger"]["term"] > term
        # the old leader is now a caught-up follower: the next step restarts it
        await until(lambda: _ran_and_deleted(h, {old: "r1"}, old), 30, "the old leader restarted")


async def test_external_addresses_go_to_every_peer_by_self_id(quorum: LocalDLedgerGroup) -> None:
    """spec.externalAccess on a DLEDGER group: the sweep tells every real peer each peer's
    node IP and node port by dLegerSelfId, once, and shows them in status; the peers then
    name the leader they know as brokerId 0 (tests/interop: the Java client through them)."""
    from brokergroup_operator.external import ExternalDoor

    async with aiohttp.ClientSession() as session:
        h = Harness(quorum, session)
        h.spec = parse_spec(
            "bg", "ns", {"image": "x", "replicationMode": "DLEDGER", "replicas": 3,
                         "externalAccess": {"type": "NodePort"}},
        )  # fmt: skip
        h.doors = [ExternalDoor(f"bg-peers-{i}-external", "NodePort", 31000 + i) for i in range(3)]
        h.host_ips = {f"bg-peers-{i}": f"10.0.0.{11 + i}" for i in range(3)}
        want = {f"n{i}": f"10.0.0.{11 + i}:{31000 + i}" for i in range(3)}
        old = leader_pod(quorum)
        await h.run()
        for peer in quorum.peers:
            assert peer.status()["externalPeerAddrs"] == want
        d = h.status["dledger"]
        assert {p["id"]: p["externalAddress"] for p in d["peers"]} == want
        assert h.status["master"]["externalAddress"] == want[f"n{old.rsplit('-', 1)[1]}"]
        assert sorted(s["externalAddress"] for s in h.status["slaves"]) == sorted(
            v for k, v in want.items() if k != f"n{old.rsplit('-', 1)[1]}"
        )
        code, body = quorum.leader().request("GET", "/v1/admin/external-addresses")
        assert code == 200 and body == {"brokerAddrs": {}, "peerAddrs": want}, body
        # a peer moved to another node: the next sweep tells them all
        h.host_ips["bg-peers-1"] = "10.0.0.99"
        await h.run()
        for peer in quorum.peers:
            assert peer.status()["externalPeerAddrs"]["n1"] == "10.0.0.99:31001"


async def _ran_and_deleted(h: Harness, revisions: dict[str, str], pod: str) -> bool:
    await h.run(revisions)
    return pod in h.deleted


async def test_resize_three_to_five_to_three_one_peer_at_a_time(tmp_path: Path) -> None:
    """spec.replicas 3 → 5 → 3 through the operator's sweeps against real peers: each step
    tells every running peer the new membership before a pod is added, and removes a pod only
    after every member has forgotten it; the leader leaves last by a transfer; writes keep
    being acknowledged and the peers that remain hold every one of them."""
    local = LocalDLedgerGroup(tmp_path / "g", 3, slots=5, **BROKER_FAST).start()
    try:
        async with aiohttp.ClientSession() as session:
            h = Harness(local, session)
            await asyncio.to_thread(create_topic, local)
            sent: list[str] = []

            async def write(tag: str) -> None:
                leader = await asyncio.to_thread(local.leader)
                sent.extend(await asyncio.to_thread(produce, leader, tag, 16))

            events: list[str] = []

            async def settled(replicas: int) -> bool:
                result = await h.run(replicas=replicas)
                events.extend(f"{e.reason}: {e.message}" for e in result.events)
                d = result.status["dledger"]
                return bool(
                    d["members"] == replicas
                    and "membership" not in d
                    and len(local.peers) == replicas
                    and result.status["phase"] == "Running"
                )

            await until(lambda: settled(3), 30, "a settled group of 3")
            await write("three")
            events.clear()

            async def grown() -> bool:
                await write("growing")
                return await settled(5)

            await until(grown, 120, "five members")
            assert h.sizes == [(4, 3), (4, 4), (5, 4), (5, 5)], h.sizes
            assert sum("MembershipChanged" in e for e in events) == 2, events
            for peer in local.peers:
                status = local.dledger_status(peer)
                assert status is not None
                assert [p["id"] for p in status["peers"]] == [f"n{i}" for i in range(5)]
            # the leader must leave last: put it on the last peer, the sweep moves it back
            await asyncio.to_thread(agreed_statuses, local)
            current = local.leader()
            if current is not local.peers[-1]:
                code, body = current.request(
                    "POST",
                    "/v1/admin/dledger/leadership-transfer",
                    {"transfereeId": "n4"},
                    timeout=30,
                )
                assert code == 200, body
            h.sizes.clear()
            events.clear()

            async def shrunk() -> bool:
                await write("shrinking")
                return await settled(3)

            await until(shrunk, 120, "three members again")
            assert h.sizes == [(4, 5), (4, 4), (3, 4), (3, 3)], h.sizes
            assert sum("MembershipChanged" in e for e in events) == 2, events
            await write("three-again")
            end = await asyncio.to_thread(local.wait_converged)
            got = await asyncio.to_thread(read_all, await asyncio.to_thread(local.leader))
            assert sorted(got) == sorted(x.encode() for x in sent)
        local.stop()
        logs = [log_entries(p) for p in local.peers]
        assert all(log == logs[0] for log in logs), "every remaining peer holds the same log"
        kept = [b.decode() for *_, b in logs[0]]
        assert sorted(kept) == sorted(sent), "every acknowledged message, once"
        print(f"3 → 5 → 3 by the sweep: {len(sent)} acknowledged, on every peer; ledger end {end}")
    finally:
        local.stop()
