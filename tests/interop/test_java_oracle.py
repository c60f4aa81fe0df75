"""The interop tooling against the real thing: Apache RocketMQ 4.9.7 and 5.3.1 from Maven Central.

Before habroker is checked against the Java client, mqadmin and Java brokers, the tools that run
them must be shown to see what a real RocketMQ does: a Java name server, a SYNC_MASTER and its
SLAVE in a private network namespace; every send mode of DefaultMQProducer; DefaultLitePullConsumer
and DefaultMQPushConsumer (two instances rebalancing, retries, %DLQ%); mqadmin's tables; and a
5.3.1 broker with the 5.3.1 client.  See docs/interop.md.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.interop.rocketmq_java import (
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    cluster_list,
    events_of,
    expected_body,
    loads_fastjson,
    run_driver,
    run_mqadmin,
    start_sync_group,
    summary,
    topic_status,
)

V4 = "4.9.7"
V5 = "5.3.1"
NAMESRV = "127.0.0.1:9876"

pytestmark = pytest.mark.timeout(240)


@dataclass
class JavaGroup:
    """A master and its slave as the scenarios see them: where to find them, what they say.

    tests/interop/test_habroker_java_clients.py runs the same scenarios against habroker with a
    group of its own; everything that differs between the two brokers is a field here.
    """

    ns: NetNS
    master_address: str
    slave_address: str
    namesrv: str = NAMESRV
    version: str = "V4_9_7"  # what mqadmin clusterList prints in its version column
    system_topics: frozenset[str] = frozenset({"TBW102"})


@pytest.fixture(scope="module")
def group(module_netns: NetNS) -> Iterator[JavaGroup]:
    """Java name server + SYNC_MASTER + SLAVE (4.9.7), booted once for the module."""
    ns = module_netns
    master, slave = start_sync_group(ns)
    yield JavaGroup(ns, master.address, slave.address)


def cluster_rows(
    ns: NetNS,
    version: str,
    want: set[tuple[Any, ...]],
    timeout: float = 30.0,
    namesrv: str = NAMESRV,
) -> set[tuple[Any, ...]]:
    """clusterList rows as (cluster, name, id, address, version), asked again until they are
    ``want``: under load mqadmin's GET_BROKER_RUNTIME_INFO can time out, and then it prints the
    row without a version (and a stack trace) rather than failing."""
    deadline = time.monotonic() + timeout
    while True:
        rows = cluster_list(run_mqadmin(ns, version, "clusterList", "-n", namesrv))
        got = {(r.cluster, r.broker_name, r.broker_id, r.address, r.version) for r in rows}
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(1)


def mqadmin_until(ns: NetNS, done: Callable[[str], bool], *args: str, timeout: float = 30.0) -> str:
    """mqadmin's output once ``done`` accepts it (asked again each second), or the last one."""
    deadline = time.monotonic() + timeout
    while True:
        out = run_mqadmin(ns, V4, *args)
        if done(out) or time.monotonic() > deadline:
            return out
        time.sleep(1)


def create_topic(
    ns: NetNS, topic: str, queues: int, version: str = V4, namesrv: str = NAMESRV
) -> str:
    return run_mqadmin(
        ns, version, "updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", topic,
        "-r", str(queues), "-w", str(queues),
    )  # fmt: skip


def produce(
    ns: NetNS, topic: str, *args: str, version: str = V4, namesrv: str = NAMESRV
) -> list[dict[str, Any]]:
    return run_driver(ns, version, "produce", "--namesrv", namesrv, "--topic", topic, *args)


def sent_ids(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """id -> the send event (with that id's own sha256) for every message a producer sent."""
    out = {}
    for send in events_of(events, "send"):
        for i, message_id in enumerate(send["ids"]):
            out[message_id] = {**send, "sha": send["sha256"][i]}
    return out


# -- the namespace itself -----------------------------------------------------------------------


def test_namespace_has_only_loopback_and_runs_habroker(netns: NetNS, tmp_path: Path) -> None:
    assert [name for _, name in netns.call(socket.if_nameindex)] == ["lo"]
    group = netns.local_group(tmp_path / "habroker", slaves=1).start()
    try:
        for key in ("listenPort", "httpListenPort"):  # remoting and the HTTP API
            assert netns.connectable(int(group.master.config[key])), key
        group.wait_replicated()  # the HTTP probes ran inside the namespace
        assert group.master.status()["maxOffset"] == 0
        assert sorted(netns.pids()) == sorted(b.proc.pid for b in group.brokers if b.proc)
    finally:
        group.stop()
    assert netns.pids() == []


# -- mqadmin ------------------------------------------------------------------------------------


def test_mqadmin_cluster_list_shows_master_and_slave(group: JavaGroup) -> None:
    want = {
        ("DefaultCluster", "broker-a", 0, group.master_address, group.version),
        ("DefaultCluster", "broker-a", 1, group.slave_address, group.version),
    }
    assert cluster_rows(group.ns, V4, want, namesrv=group.namesrv) == want


def test_mqadmin_update_topic_then_list_and_route(group: JavaGroup) -> None:
    out = create_topic(group.ns, "T-admin", 3, namesrv=group.namesrv)
    assert f"create topic to {group.master_address} success." in out
    assert "readQueueNums=3, writeQueueNums=3, perm=RW-" in out

    topics = run_mqadmin(group.ns, V4, "topicList", "-n", group.namesrv).split()
    assert "T-admin" in topics and group.system_topics <= set(topics)

    route = loads_fastjson(
        run_mqadmin(group.ns, V4, "topicRoute", "-n", group.namesrv, "-t", "T-admin")
    )
    [broker] = route["brokerDatas"]
    assert broker["brokerName"] == "broker-a" and broker["cluster"] == "DefaultCluster"
    # the slave registered the topic it synchronised from the master: both addresses are routed
    assert broker["brokerAddrs"] == {"0": group.master_address, "1": group.slave_address}
    [queues] = route["queueDatas"]
    assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == (3, 3, 6)


def test_loads_fastjson_quotes_only_bare_integer_keys() -> None:
    text = '{"offsetTable":{"T@g":{0:250,12:7}},"s":"a,1:b"}'
    assert loads_fastjson(text) == {"offsetTable": {"T@g": {"0": 250, "12": 7}}, "s": "a,1:b"}


# -- producer and lite pull consumer ------------------------------------------------------------


def test_every_send_mode_is_read_back_once_with_identical_bytes(group: JavaGroup) -> None:
    ns, topic = group.ns, "T-modes"
    create_topic(ns, topic, 4, namesrv=group.namesrv)
    common = ("--tags", "TagA,TagB", "--prop", "color=red", "--prop", "unit=m s")
    sends: dict[str, dict[str, Any]] = {}
    runs = [
        ("sync", ("--count", "6", "--size", "300", "--keys-prefix", "ks-")),
        ("async", ("--count", "6", "--size", "1", "--keys-prefix", "ka-")),
        # (an empty body is refused by the client itself: "the message body length is zero")
        ("oneway", ("--count", "6", "--size", "2", "--keys-prefix", "ko-")),
        ("batch", ("--count", "8", "--batch", "4", "--size", "700", "--keys-prefix", "kb-")),
        # compressible bodies over compressMsgBodyOverHowmuch: sent zlib-compressed (sysFlag bit 0)
        ("sync", ("--count", "2", "--size", "9000", "--body", "text", "--id-prefix", "big-")),
    ]
    sizes: dict[str, tuple[int, str]] = {}
    for mode, extra in runs:
        args = ("--mode", mode, *common, *extra)
        if "--id-prefix" not in extra:
            args += ("--id-prefix", f"{mode}-")
        events = produce(ns, topic, *args, namesrv=group.namesrv)
        done = summary(events)
        assert done["failed"] == 0, done
        size = int(extra[extra.index("--size") + 1])
        kind = "text" if "text" in extra else "hash"
        for message_id, send in sent_ids(events).items():
            sends[message_id] = send
            sizes[message_id] = (size, kind)
            # SYNC_MASTER with its slave connected: every acknowledged send is SEND_OK
            assert send["status"] == ("ONEWAY" if mode == "oneway" else "SEND_OK"), send
    assert len(sends) == 28

    events = run_driver(
        ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic, "--group", "g-modes",
        "--expect", "28", "--timeout-s", "60",
    )  # fmt: skip
    messages = events_of(events, "message")
    assert Counter(m["id"] for m in messages) == Counter(dict.fromkeys(sends, 1))
    slots = {(m["queueId"], m["queueOffset"]) for m in messages}
    assert len(slots) == 28 and {q for q, _ in slots} == {0, 1, 2, 3}
    for m in messages:
        send = sends[m["id"]]
        size, kind = sizes[m["id"]]
        assert m["bodyLength"] == size
        assert (
            m["sha256"]
            == send["sha"]
            == hashlib.sha256(expected_body(m["id"], size, kind)).hexdigest()
        )
        seq = int(m["id"].rsplit("-", 1)[1])
        assert m["tags"] == ("TagA", "TagB")[seq % 2]
        prefix = m["id"].split("-")[0]
        if prefix != "big":
            assert m["keys"] == f"k{prefix[0]}-{seq}"
        assert m["properties"] == {"color": "red", "unit": "m s", "id": m["id"], "seq": str(seq)}
        assert m["storeHost"] == group.master_address and m["reconsumeTimes"] == 0
        if "msgId" in send and len(send["ids"]) == 1:
            assert m["msgId"] == send["msgId"]  # the client-made unique id (UNIQ_KEY)
    big = [m for m in messages if m["id"].startswith("big-")]
    # the client compressed them (sysFlag bit 0 survives on the consumer side), nothing else
    assert len(big) == 2 and all(m["sysFlag"] & 1 for m in big)
    assert not any(m["sysFlag"] & 1 for m in messages if m not in big)


def test_a_send_to_a_topic_nobody_created_creates_it_from_tbw102(group: JavaGroup) -> None:
    """autoCreateTopicEnable: the producer finds no route for the topic, sends along TBW102's
    route (defaultTopic=TBW102, defaultTopicQueueNums=4) and the broker creates the topic with
    min(4, TBW102's 8 write queues) queues, perm RW, and routes it."""
    ns, topic = group.ns, "T-auto"
    key = loads_fastjson(run_mqadmin(ns, V4, "topicRoute", "-n", group.namesrv, "-t", "TBW102"))
    [key_queues] = key["queueDatas"]
    assert (key_queues["writeQueueNums"], key_queues["perm"]) == (8, 7), key_queues
    events = produce(ns, topic, "--count", "12", "--id-prefix", "auto-", namesrv=group.namesrv)
    assert summary(events)["sendOk"] == 12, summary(events)
    out = mqadmin_until(ns, lambda o: "queueDatas" in o, "topicRoute", "-n", group.namesrv,
                        "-t", topic)  # fmt: skip
    [queues] = loads_fastjson(out)["queueDatas"]
    assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == (4, 4, 6)
    events = run_driver(
        ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic, "--group", "g-auto",
        "--expect", "12", "--timeout-s", "60",
    )  # fmt: skip
    messages = events_of(events, "message")
    assert sorted(m["id"] for m in messages) == sorted(f"auto-{i}" for i in range(12))
    assert {m["queueId"] for m in messages} == {0, 1, 2, 3}


#: RocketMQ 4.9.7's TopicConfigManager: the topics every broker keeps beside TBW102, as
#: (readQueueNums, writeQueueNums, perm) with the defaults (clusterTopicEnable and
#: brokerTopicEnable on: the cluster's and the broker group's topics are RW and inherit)
SYSTEM_TOPIC_ROUTES = {
    "SELF_TEST_TOPIC": (1, 1, 6),
    "BenchmarkTest": (1024, 1024, 6),
    "DefaultCluster": (16, 16, 7),
    "broker-a": (1, 1, 7),
    "OFFSET_MOVED_EVENT": (1, 1, 6),
    "SCHEDULE_TOPIC_XXXX": (18, 18, 6),
    "DefaultCluster_REPLY_TOPIC": (1, 1, 6),
}


def test_system_topics_are_listed_and_routed(group: JavaGroup) -> None:
    """mqadmin topicList names the broker's system topics, and their routes carry the queue
    counts and permissions the broker keeps them with."""
    listed = set(run_mqadmin(group.ns, V4, "topicList", "-n", group.namesrv).split())
    assert set(SYSTEM_TOPIC_ROUTES) <= listed, sorted(set(SYSTEM_TOPIC_ROUTES) - listed)
    for topic, want in SYSTEM_TOPIC_ROUTES.items():
        route = loads_fastjson(
            run_mqadmin(group.ns, V4, "topicRoute", "-n", group.namesrv, "-t", topic)
        )
        [broker] = route["brokerDatas"]
        assert broker["brokerName"] == "broker-a", (topic, broker)
        [queues] = route["queueDatas"]
        got = (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"])
        assert got == want, (topic, got)


def _route_perm(out: str) -> int | None:
    try:
        [queues] = loads_fastjson(out)["queueDatas"]
    except (ValueError, KeyError):
        return None
    return int(queues["perm"])


def test_broker_permission_drains_writes_from_the_routes(group: JavaGroup) -> None:
    """mqadmin updateBrokerConfig brokerPermission=4 (read only) on the master: the route of
    every topic loses write permission at once, so producers go elsewhere; 6 restores it."""
    ns, topic = group.ns, "T-perm"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    route = ("topicRoute", "-n", group.namesrv, "-t", topic)

    def set_permission(value: int) -> None:
        out = run_mqadmin(ns, V4, "updateBrokerConfig", "-n", group.namesrv,
                          "-b", group.master_address, "-k", "brokerPermission", "-v", str(value))  # fmt: skip
        assert "success" in out, out

    assert _route_perm(mqadmin_until(ns, lambda o: _route_perm(o) is not None, *route)) == 6
    try:
        set_permission(4)
        assert _route_perm(mqadmin_until(ns, lambda o: _route_perm(o) == 4, *route)) == 4
    finally:
        set_permission(6)
    assert _route_perm(mqadmin_until(ns, lambda o: _route_perm(o) == 6, *route)) == 6
    events = produce(ns, topic, "--count", "4", "--id-prefix", "perm-", namesrv=group.namesrv)
    assert summary(events)["sendOk"] == 4


def test_binary_header_serialization_round_trip(group: JavaGroup) -> None:
    """-Drocketmq.serialize.type=ROCKETMQ: the client's headers in RocketMQ's binary encoding."""
    ns, topic = group.ns, "T-binary"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    events = run_driver(
        ns, V4, "produce", "--namesrv", group.namesrv, "--topic", topic, "--count", "4",
        "--id-prefix", "bin-", "--prop", "k=v", "--trace", serialize="ROCKETMQ",
    )  # fmt: skip
    assert summary(events)["sendOk"] == 4
    rpcs = events_of(events, "rpc")
    assert rpcs and {r["serialize"] for r in rpcs} == {"ROCKETMQ"}
    sends = sent_ids(events)
    events = run_driver(
        ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic, "--group", "g-binary",
        "--expect", "4", "--timeout-s", "45", serialize="ROCKETMQ",
    )  # fmt: skip
    messages = events_of(events, "message")
    assert sorted(m["id"] for m in messages) == sorted(sends)
    assert all(m["sha256"] == sends[m["id"]]["sha"] for m in messages)
    assert all(m["properties"]["k"] == "v" for m in messages)


# -- push consumers ---------------------------------------------------------------------------


def test_two_push_consumers_split_the_queues(group: JavaGroup, tmp_path: Path) -> None:
    ns, topic = group.ns, "T-push"
    create_topic(ns, topic, 4, namesrv=group.namesrv)
    ready = ns.root / "push-ready"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pushing = pool.submit(
            run_driver,
            ns, V4, "push", "--namesrv", group.namesrv, "--topic", topic, "--group", "g-push",
            "--consumers", "2", "--expect", "24", "--timeout-s", "90", "--ready-file", str(ready),
            "--trace",
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and not pushing.done():
            time.sleep(0.2)
        assert ready.exists(), "push consumers never all held queues"
        produce(ns, topic, "--count", "24", "--id-prefix", "p-", namesrv=group.namesrv)
        events = pushing.result()
    assert summary(events)["complete"]
    deliveries = events_of(events, "delivery")
    assert {d["id"] for d in deliveries} == {f"p-{i}" for i in range(24)}
    assigned = {
        a["consumer"]: {q for q in a["queues"] if q.startswith(f"{topic}@")}
        for a in events_of(events, "assignment")
    }
    assert set(assigned) == {"push-0", "push-1"}
    assert all(len(queues) == 2 for queues in assigned.values()), assigned
    assert assigned["push-0"] | assigned["push-1"] == {f"{topic}@broker-a:{q}" for q in range(4)}
    for d in deliveries:
        assert f"{topic}@broker-a:{d['queueId']}" in assigned[d["consumer"]], d
    # the broker told the first consumer that the group changed, and both asked who is in it
    rpcs = events_of(events, "rpc")
    assert any(r["dir"] == "in" and r["name"] == "NOTIFY_CONSUMER_IDS_CHANGED" for r in rpcs)
    assert {"HEART_BEAT", "GET_CONSUMER_LIST_BY_GROUP", "PULL_MESSAGE"} <= {r["name"] for r in rpcs}


def test_failed_message_is_retried_then_dead_lettered(group: JavaGroup) -> None:
    ns, topic, grp = group.ns, "T-retry", "g-retry"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    sends = sent_ids(produce(ns, topic, "--count", "6", "--id-prefix", "r-", namesrv=group.namesrv))
    events = run_driver(
        ns, V4, "push", "--namesrv", group.namesrv, "--topic", topic, "--group", grp,
        "--expect", "5", "--fail-ids", "r-2", "--max-reconsume", "2", "--timeout-s", "90",
        "--trace",
    )  # fmt: skip
    deliveries = events_of(events, "delivery")
    failing = [d for d in deliveries if d["id"] == "r-2"]
    assert all(d["result"] == "RECONSUME_LATER" for d in failing)
    assert sorted({d["reconsumeTimes"] for d in failing}) == [0, 1, 2]
    assert all(d["sha256"] == sends["r-2"]["sha"] for d in failing)
    assert {d["id"] for d in deliveries if d["result"] == "CONSUME_SUCCESS"} == set(sends) - {"r-2"}
    backs = [r for r in events_of(events, "rpc") if r["name"] == "CONSUMER_SEND_MSG_BACK"]
    assert len(backs) >= 3 and all(r["header"]["maxReconsumeTimes"] == "2" for r in backs)

    # after maxReconsumeTimes the broker moved it to %DLQ%<group>: one message there
    dlq = f"%DLQ%{grp}"
    deadline = time.monotonic() + 20
    while True:
        rows = topic_status(run_mqadmin(ns, V4, "topicStatus", "-n", group.namesrv, "-t", dlq))
        if sum(r.max_offset for r in rows) == 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sum(r.max_offset for r in rows) == 1, rows
    # a DLQ is created write-only; make it readable and read the message back
    run_mqadmin(
        ns, V4, "updateTopic", "-n", group.namesrv, "-c", "DefaultCluster", "-t", dlq,
        "-r", "1", "-w", "1", "-p", "6",
    )  # fmt: skip
    events = run_driver(
        ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", dlq, "--group", "g-dlq-reader",
        "--expect", "1", "--timeout-s", "45",
    )  # fmt: skip
    [dead] = events_of(events, "message")
    assert dead["id"] == "r-2" and dead["sha256"] == sends["r-2"]["sha"]
    assert dead["reconsumeTimes"] == 3  # the send-back that dead-letters it counts one more


# -- 5.3.1 --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_531_broker_and_client_round_trip(netns: NetNS) -> None:
    """A 5.3.1 broker registers with the 4.9.7 name server; the 5.3.1 client and mqadmin use it."""
    JavaNameServer(netns, netns.root / "namesrv").start()
    broker = JavaBroker(netns, V5, netns.root / "broker", BrokerSpec(role="ASYNC_MASTER")).start()
    want = {("DefaultCluster", "broker-a", 0, broker.address, "V5_3_1")}
    assert cluster_rows(netns, V5, want) == want
    create_topic(netns, "T5", 2, version=V5)
    sends = {}
    for mode in ("sync", "batch"):
        events = produce(netns, "T5", "--mode", mode, "--count", "8", "--id-prefix", f"{mode}-",
                         "--tags", "five", "--keys-prefix", "k", version=V5)  # fmt: skip
        assert summary(events)["sendOk"] == 8
        sends.update(sent_ids(events))
    events = run_driver(
        netns, V5, "lite-pull", "--namesrv", NAMESRV, "--topic", "T5", "--group", "g5",
        "--expect", "16", "--timeout-s", "60",
    )  # fmt: skip
    messages = events_of(events, "message")
    assert Counter(m["id"] for m in messages) == Counter(dict.fromkeys(sends, 1))
    for m in messages:
        assert m["sha256"] == sends[m["id"]]["sha"] and m["tags"] == "five"
        assert m["storeHost"] == broker.address
