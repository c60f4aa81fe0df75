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


def spec() -> GroupSpec:
    return parse_spec("bg", "ns", {"image": "x", "replicationMode": "DLEDGER", "replicas": 3})


class Harness:
    def __init__(self, local: LocalDLedgerGroup, session: aiohttp.ClientSession) -> None:
        self.local = local
        self.brokers = BrokerAPI(session, timeout=2.0)
        self.state = GroupState()
        self.status: dict[str, Any] = {}
        self.addresses = {f"bg-peers-{i}": p.http_address for i, p in enumerate(local.peers)}
        self.deleted: list[str] = []

    def resolve(self, group: GroupSpec, pod: PodInfo) -> str | None:
        return self.addresses.get(pod.name)

    def pods(self, revisions: dict[str, str] | None = None) -> list[PodInfo]:
        revisions = revisions or {}
        return [
            PodInfo(name, i + 1, ip="127.0.0.1", ready=True, revision=revisions.get(name, "r2"))
            for i, name in enumerate(self.addresses)
        ]

    async def reports(self) -> list[BrokerReport]:
        return list(
            await asyncio.gather(
                *(poll_broker(self.brokers, self.resolve, spec(), p) for p in self.pods())
            )
        )

    async def run(self, revisions: dict[str, str] | None = None) -> Any:
        async def delete_pod(name: str) -> bool:
            self.deleted.append(name)
            return True

        result = await sweep(
            brokers=self.brokers,
            settings=Settings(),
            group=spec(),
            pods=self.pods(revisions),
            statefulsets={"bg-peers": StsInfo("bg-peers", 1, 1, update_revision="r2", replicas=3)},
            previous=self.status,
            state=self.state,
            generation=1,
            delete_pod=delete_pod,
            logger=LOG,
            resolve=self.resolve,
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


async def _ran_and_deleted(h: Harness, revisions: dict[str, str], pod: str) -> bool:
    await h.run(revisions)
    return pod in h.deleted
