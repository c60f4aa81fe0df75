"""brokerPermission, RocketMQ's switch for draining a broker (mqadmin updateBrokerConfig -k
brokerPermission -v 4): routes and registrations show every topic's permission cut by it, so
clients stop writing (4) or reading (2) there; pulls of a broker that is not readable, sends to
order topics and send-backs of one that is not writable answer NO_PERMISSION; the change takes
effect at runtime with a new topic data version.  The Java side: tests/interop/test_java_oracle.py
``test_broker_permission_drains_writes_from_the_routes``, run against both brokers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from habroker import fastjson
from habroker.local import LocalGroup
from habroker.registration import register_header
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode

from tests.habroker.remoting.retry_support import RunningBroker
from tests.habroker.remoting.test_remoting_server import RawPeer


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    broker = await RunningBroker(tmp_path / "b").start()
    await broker.create_topic("T")
    assert (await broker.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "ORD", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
         "topicFilterType": "SINGLE_TAG", "order": True, "defaultTopic": "TBW102"},
    )).code == ResponseCode.SUCCESS  # fmt: skip
    yield broker
    await broker.stop()


async def set_permission(running: RunningBroker, value: object) -> RemotingCommand:
    return await running.call(
        RequestCode.UPDATE_BROKER_CONFIG, {}, f"brokerPermission={value}\n".encode()
    )


async def route_perm(running: RunningBroker, topic: str) -> int:
    answer = await running.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == ResponseCode.SUCCESS, answer
    [queues] = fastjson.loads(answer.body_bytes)["queueDatas"]
    return int(queues["perm"])


def registered_perms(running: RunningBroker) -> dict[str, int]:
    _, payload = register_header(running.b)
    table = fastjson.loads(payload)["topicConfigSerializeWrapper"]["topicConfigTable"]
    return {name: int(cfg["perm"]) for name, cfg in table.items()}


async def test_read_only_drains_writes(running: RunningBroker) -> None:
    version = running.b.topics.data_version.counter
    assert (await set_permission(running, 4)).code == ResponseCode.SUCCESS
    assert running.b.topics.data_version.counter == version + 1
    assert await route_perm(running, "T") == 4
    assert registered_perms(running)["T"] == 4
    assert running.b.topics.get("T").perm == 6  # the topic itself is unchanged

    assert len(await running.pull("T")) == 0  # reads still served
    assert (await running.send("T", b"in flight")).code == ResponseCode.SUCCESS
    refused = await running.send("ORD", b"ordered")
    assert refused.code == ResponseCode.NO_PERMISSION, refused
    assert "sending message is forbidden" in (refused.remark or "")
    [msg] = await running.wait_for("T")
    refused = await running.send_back(msg, "G")
    assert refused.code == ResponseCode.NO_PERMISSION, refused

    assert (await set_permission(running, 6)).code == ResponseCode.SUCCESS
    assert await route_perm(running, "T") == 6 and registered_perms(running)["T"] == 6
    assert (await running.send("ORD", b"ordered")).code == ResponseCode.SUCCESS


async def test_write_only_stops_pulls(running: RunningBroker) -> None:
    assert (await set_permission(running, 2)).code == ResponseCode.SUCCESS
    assert await route_perm(running, "T") == 2
    answer = await running.pull_answer("T")
    assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert "pulling message is forbidden" in (answer.remark or "")
    assert (await running.send("ORD", b"ordered")).code == ResponseCode.SUCCESS


async def test_a_bad_value_is_refused_and_changes_nothing(running: RunningBroker) -> None:
    answer = await set_permission(running, 9)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerPermission=9" in (
        answer.remark or ""
    )
    assert running.b.config.brokerPermission == 6 and await route_perm(running, "T") == 6


def test_a_slave_answers_routes_with_its_masters_permission(tmp_path: Path) -> None:
    """Any broker of a group answers routes (the namesrv Service may reach the slave): a
    drained master must not look writable through its slave."""
    group = LocalGroup(tmp_path / "g", slaves=1, metaSyncInterval=500).start()
    try:
        master, slave = group.master, group.slaves[0]
        code, body = master.request(
            "POST", "/v1/topics", {"topic": "T", "readQueueNums": 2, "writeQueueNums": 2}
        )
        assert code in (200, 201), body
        peer = RawPeer(slave.address)
        try:
            for value in (4, 6):
                code, body = master.request(
                    "PATCH", "/v1/admin/config", {"brokerPermission": value}
                )
                assert code == 200, body
                deadline = time.monotonic() + 15
                while (perm := slave_route_perm(peer)) != value:
                    assert time.monotonic() < deadline, f"the slave still routes perm {perm}"
                    time.sleep(0.2)
        finally:
            peer.close()
    finally:
        group.stop()


def slave_route_perm(peer: RawPeer) -> int | None:
    answer = peer.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}))
    if answer.code != ResponseCode.SUCCESS:
        return None
    [queues] = fastjson.loads(answer.body_bytes)["queueDatas"]
    return int(queues["perm"])
