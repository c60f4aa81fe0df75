"""The operator's sweep against real habroker processes on 127.0.0.1 (no Kubernetes).

Pods are stand-ins (all at 127.0.0.1, so one slave: the master tells its slaves apart by the
host of their HA connection); everything else is real: /v1/status, the admin API, replication.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from brokergroup_operator.brokerapi import BrokerAPI
from brokergroup_operator.settings import Settings
from brokergroup_operator.spec import GroupSpec, parse_spec
from brokergroup_operator.status import PodInfo
from brokergroup_operator.sweep import GroupState, sweep
from habroker.local import LocalGroup

LOG = logging.getLogger("test")


@pytest.fixture
def local_group(tmp_path: Path):
    group = LocalGroup(
        tmp_path / "g",
        slaves=1,
        mode="SYNC",
        mappedFileSizeCommitLog=1 << 20,
        maxMessageSize=1 << 16,
    ).start()
    group.wait_connected()
    yield group
    group.stop()


class Harness:
    def __init__(self, local: LocalGroup, session: aiohttp.ClientSession) -> None:
        self.local = local
        self.brokers = BrokerAPI(session, timeout=1.0)
        self.state = GroupState()
        self.status: dict[str, Any] = {}
        self.events: list[tuple[str, str]] = []
        # the operator talks to each broker's HTTP API (httpListenPort)
        self.addresses = {
            "bg-master-0": local.master.http_address,
            "bg-slave-0": local.slaves[0].http_address,
        }

    def pods(self) -> list[PodInfo]:
        return [
            PodInfo("bg-master-0", 0, ip="127.0.0.1", ready=True),
            PodInfo("bg-slave-0", 1, ip="127.0.0.1", ready=True),
        ]

    async def run(
        self, group: GroupSpec, pods: list[PodInfo] | None = None, doors: Any = ()
    ) -> dict[str, Any]:
        result = await sweep(
            brokers=self.brokers,
            settings=Settings(wiring="pod-ip"),
            group=group,
            pods=self.pods() if pods is None else pods,
            statefulsets={},
            previous=self.status,
            state=self.state,
            generation=1,
            delete_pod=None,
            logger=LOG,
            resolve=lambda _g, pod: self.addresses.get(pod.name),
            external_doors=doors,
        )
        self.status = result.status
        self.events += [(e.type, e.reason) for e in result.events]
        return result.status


async def test_offsets_read_policy_and_events_from_real_brokers(local_group: LocalGroup) -> None:
    async with aiohttp.ClientSession() as session:
        h = Harness(local_group, session)
        # pod-ip wiring points slaves at <master pod IP>:<spec.ports.ha>: give the spec the
        # local master's ports so the target is the real master
        group = parse_spec(
            "bg",
            "ns",
            {
                "image": "x",
                "replicationMode": "SYNC",
                "slaves": 1,
                "ports": {
                    "client": int(local_group.master.config["listenPort"]),
                    "ha": int(local_group.master.config["haListenPort"]),
                    "http": int(local_group.master.config["httpListenPort"]),
                },
                "readPolicy": {"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": 25},
            },
        )
        status = await h.run(group)
        assert status["master"]["reachable"] is True
        assert status["slaves"][0]["connected"] is True
        assert status["phase"] == "Running", status
        start = status["master"]["maxOffset"]

        # the read policy was pushed to both brokers through PATCH /v1/admin/config
        for broker in local_group.brokers:
            assert broker.status()["readPolicy"] == {
                "slaveReadEnable": True,
                "accessMessageInMemoryMaxRatio": 25,
            }
        assert status["readPolicy"]["whichBrokerWhenConsumeSlowly"] == 1  # auto: the slave

        # a subscription group created on the master gets whichBrokerWhenConsumeSlowly
        local_group.master.request(
            "PUT",
            "/v1/subscription-groups/cg",
            {"brokerId": 0, "whichBrokerWhenConsumeSlowly": 0, "consumeEnable": True},
        )
        await h.run(group)
        _, groups = local_group.master.request("GET", "/v1/subscription-groups")
        assert groups["subscriptionGroupTable"]["cg"]["whichBrokerWhenConsumeSlowly"] == 1

        # producing moves the offsets in status
        local_group.master.request(
            "POST", "/v1/topics", {"topic": "t", "readQueueNums": 1, "writeQueueNums": 1}
        )
        await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "-m",
                "habroker",
                "produce",
                "--namesrv",
                local_group.master.address,
                "--topic",
                "t",
                "--count",
                "200",
                "--size",
                "100",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        local_group.wait_replicated()
        status = await h.run(group)
        assert status["master"]["maxOffset"] > start
        assert status["slaves"][0]["ackOffset"] == status["master"]["maxOffset"]
        assert status["maxLagBytes"] == 0

        # a stopped slave: conditions change and a Warning event is produced
        local_group.slaves[0].stop()
        status = await h.run(group)
        cond = {c["type"]: c for c in status["conditions"]}
        assert cond["InSync"]["status"] == "False"
        assert cond["Replicating"]["status"] == "False"
        # a SYNC master without an in-sync slave cannot replicate writes: not Ready
        assert cond["Ready"]["reason"] == "NoInSyncSlave"
        assert ("Warning", "SlaveDisconnected") in h.events
        assert status["readPolicy"]["whichBrokerWhenConsumeSlowly"] == 0  # auto follows: master

        # it comes back and catches up
        local_group.slaves[0].start()
        local_group.wait_replicated()
        for _ in range(50):
            status = await h.run(group)
            if status["phase"] == "Running":
                break
        assert status["phase"] == "Running"
        assert ("Normal", "SlaveCaughtUp") in h.events
        assert status["readPolicy"]["whichBrokerWhenConsumeSlowly"] == 1


async def test_rewire_a_slave_pointing_elsewhere(local_group: LocalGroup) -> None:
    async with aiohttp.ClientSession() as session:
        h = Harness(local_group, session)
        ports = {
            "client": int(local_group.master.config["listenPort"]),
            "ha": int(local_group.master.config["haListenPort"]),
            "http": int(local_group.master.config["httpListenPort"]),
        }
        group = parse_spec("bg", "ns", {"image": "x", "slaves": 1, "ports": ports})
        slave = local_group.slaves[0]
        # point the slave at nothing, as if the master had moved
        slave.request("PUT", "/v1/admin/master-address", {"haMasterAddress": "127.0.0.1:1"})
        await h.run(group)
        assert ("Normal", "SlaveRewired") in h.events
        own = slave.status()["slave"]
        assert own["masterAddress"] == f"127.0.0.1:{ports['ha']}"
        # metadata is copied from the master's HTTP port, not RocketMQ's client port
        assert own["metadata"]["masterHttpAddress"] == local_group.master.http_address
        for _ in range(50):
            status = await h.run(group)
            if status["slaves"][0]["connected"]:
                break
        assert status["slaves"][0]["connected"] is True


async def test_external_addresses_reach_every_broker(local_group: LocalGroup) -> None:
    """The sweep tells both real brokers where clients outside reach each of them (node IP
    and node port here), once, and shows it in status."""
    from brokergroup_operator.external import ExternalDoor

    group = parse_spec(
        "bg", "ns", {"image": "x", "slaves": 1, "replicationMode": "SYNC",
                     "externalAccess": {"type": "NodePort"}},
    )  # fmt: skip
    doors = [
        ExternalDoor("bg-master-0-external", "NodePort", 31001),
        ExternalDoor("bg-slave-0-external", "NodePort", 31002),
    ]
    pods = [
        PodInfo("bg-master-0", 0, ip="127.0.0.1", host_ip="10.0.0.11", ready=True),
        PodInfo("bg-slave-0", 1, ip="127.0.0.1", host_ip="10.0.0.12", ready=True),
    ]
    want = {"0": "10.0.0.11:31001", "1": "10.0.0.12:31002"}
    async with aiohttp.ClientSession() as session:
        h = Harness(local_group, session)
        status = await h.run(group, pods, doors)
        assert status["master"]["externalAddress"] == want["0"]
        assert status["slaves"][0]["externalAddress"] == want["1"]
        for broker in local_group.brokers:
            assert broker.status()["externalAddrs"] == want
        # the slave moved to another node: the next sweep follows
        pods[1] = PodInfo("bg-slave-0", 1, ip="127.0.0.1", host_ip="10.0.0.13", ready=True)
        await h.run(group, pods, doors)
        assert local_group.master.status()["externalAddrs"]["1"] == "10.0.0.13:31002"
