"""habroker under the real Java client and mqadmin: the oracle's scenarios, run against us.

tests/interop/test_java_oracle.py shows what a real RocketMQ 4.9.7 master and slave do for every
send mode, the lite-pull and push consumers (rebalancing, retries, %DLQ%) and mqadmin's tables.
The same test functions run here, unchanged, against a habroker SYNC master and slave in a
private network namespace, with the group itself as the name server (``namesrvAddr`` = the
master's client port: habroker answers the name server's requests for its own group).
Scenarios that need more than the oracle shows (redirection to the slave, restarts, admin
commands the oracle does not run, a Java slave of a habroker master) follow below.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from habroker.local import LocalBroker, LocalGroup, free_port

from tests.interop.rocketmq_java import (
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    cluster_list,
    events_of,
    loads_fastjson,
    run_driver,
    run_mqadmin,
    summary,
    topic_status,
)
from tests.interop.test_java_oracle import (  # the oracle's scenarios, collected again here
    V4,
    JavaGroup,
    create_topic,
    mqadmin_until,
    produce,
    sent_ids,
    test_a_send_to_a_topic_nobody_created_creates_it_from_tbw102,
    test_binary_header_serialization_round_trip,
    test_broker_permission_drains_writes_from_the_routes,
    test_every_send_mode_is_read_back_once_with_identical_bytes,
    test_failed_message_is_retried_then_dead_lettered,
    test_mqadmin_cluster_list_shows_master_and_slave,
    test_mqadmin_update_topic_then_list_and_route,
    test_system_topics_are_listed_and_routed,
    test_two_push_consumers_split_the_queues,
)

pytestmark = pytest.mark.timeout(240)

__all__ = [
    "test_a_send_to_a_topic_nobody_created_creates_it_from_tbw102",
    "test_binary_header_serialization_round_trip",
    "test_broker_permission_drains_writes_from_the_routes",
    "test_every_send_mode_is_read_back_once_with_identical_bytes",
    "test_failed_message_is_retried_then_dead_lettered",
    "test_mqadmin_cluster_list_shows_master_and_slave",
    "test_mqadmin_update_topic_then_list_and_route",
    "test_system_topics_are_listed_and_routed",
    "test_two_push_consumers_split_the_queues",
]

HABROKER_VERSION = "habroker-0.1.0"


@pytest.fixture(scope="module")
def habroker_group(module_netns: NetNS) -> Iterator[LocalGroup]:
    ns = module_netns
    group = ns.local_group(
        ns.root / "habroker",
        slaves=1,
        mode="SYNC",
        mappedFileSizeCommitLog=16 * 1024 * 1024,
        # retries come back after 1 s instead of 10 s (the oracle's Java broker: its default)
        messageDelayLevel="1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
        # as the oracle's Java broker (RocketMQ's defaults): topics created on first send
        autoCreateTopicEnable=True,
        defaultTopicQueueNums=8,
    )
    group.start()
    group.wait_replicated()
    # the slave registers with its master within a round: wait until routes name it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = group.master.status()
        if any(s.get("brokerId") == 1 for s in status["master"]["slaves"]):
            break
        time.sleep(0.2)
    yield group


@pytest.fixture(scope="module")
def group(module_netns: NetNS, habroker_group: LocalGroup) -> JavaGroup:
    """What the oracle's scenarios need to know about the group under test."""
    return JavaGroup(
        module_netns,
        habroker_group.master.address,
        habroker_group.slaves[0].address,
        namesrv=habroker_group.master.address,
        version=HABROKER_VERSION,
    )


# -- beyond the oracle's scenarios ----------------------------------------------------------------


def test_any_broker_of_the_group_answers_routes(group: JavaGroup) -> None:
    """An application may name the slave as its name server too (the namesrv Service does)."""
    create_topic(group.ns, "T-via-slave", 2, namesrv=group.namesrv)
    # a slave that has not copied the topic yet asks its master at once, so no wait is needed
    out = run_mqadmin(group.ns, V4, "topicRoute", "-n", group.slave_address, "-t", "T-via-slave")
    assert group.master_address in out and group.slave_address in out, out
    events = produce(group.ns, "T-via-slave", "--count", "5", "--id-prefix", "vs-",
                     namesrv=group.slave_address)  # fmt: skip
    assert summary(events)["sendOk"] == 5
    for send in events_of(events, "send"):
        assert send["status"] == "SEND_OK"


def test_consumer_restarts_from_its_committed_offset(group: JavaGroup) -> None:
    ns, topic, grp = group.ns, "T-restart", "g-restart"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    first = sent_ids(
        produce(ns, topic, "--count", "10", "--id-prefix", "a-", namesrv=group.namesrv)
    )
    events = run_driver(ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic,
                        "--group", grp, "--expect", "10", "--timeout-s", "45")  # fmt: skip
    assert {m["id"] for m in events_of(events, "message")} == set(first)
    time.sleep(6)  # the lite pull consumer commits every 5 s and at shutdown
    second = sent_ids(
        produce(ns, topic, "--count", "7", "--id-prefix", "b-", namesrv=group.namesrv)
    )
    events = run_driver(ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic,
                        "--group", grp, "--expect", "7", "--timeout-s", "45")  # fmt: skip
    again = Counter(m["id"] for m in events_of(events, "message"))
    assert again == Counter(dict.fromkeys(second, 1)), "restarted consumer re-read or skipped"


def test_java_lite_pull_of_1024_messages_a_pull(group: JavaGroup) -> None:
    """pullBatchSize 1024, the Java client's largest: answers of over a megabyte (habroker sends
    those from the commit log with sendfile) decode in the Java client, byte for byte."""
    ns, topic = group.ns, "T-large-pull"
    create_topic(ns, topic, 1, namesrv=group.namesrv)
    sends = sent_ids(
        produce(ns, topic, "--count", "1500", "--mode", "batch", "--batch", "100",
                "--size", "1000", "--id-prefix", "lp-", namesrv=group.namesrv)
    )  # fmt: skip
    assert len(sends) == 1500
    events = run_driver(ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic,
                        "--group", "g-large-pull", "--batch-size", "1024", "--expect", "1500",
                        "--timeout-s", "60")  # fmt: skip
    messages = events_of(events, "message")
    assert Counter(m["id"] for m in messages) == Counter(dict.fromkeys(sends, 1))
    assert all(m["sha256"] == sends[m["id"]]["sha"] for m in messages)
    assert [m["queueOffset"] for m in messages] == list(range(1500))


def test_mqadmin_status_progress_and_message_lookup(group: JavaGroup) -> None:
    ns, topic, grp = group.ns, "T-admin2", "g-admin2"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    sends = sent_ids(
        produce(ns, topic, "--count", "6", "--id-prefix", "ad-", namesrv=group.namesrv)
    )
    run_driver(ns, V4, "lite-pull", "--namesrv", group.namesrv, "--topic", topic, "--group", grp,
               "--expect", "6", "--timeout-s", "45")  # fmt: skip

    status = run_mqadmin(ns, V4, "topicStatus", "-n", group.namesrv, "-t", topic)
    assert "broker-a" in status, status
    broker_status = run_mqadmin(
        ns, V4, "brokerStatus", "-n", group.namesrv, "-b", group.master_address
    )
    assert "brokerVersionDesc" in broker_status and HABROKER_VERSION in broker_status
    assert "msgPutTotalTodayNow" in broker_status

    progress = mqadmin_until(ns, lambda o: "Diff Total: 0" in o, "consumerProgress",
                             "-n", group.namesrv, "-g", grp, timeout=20)  # fmt: skip
    assert topic in progress and "Diff Total: 0" in progress, progress

    send = next(iter(sends.values()))
    found = run_mqadmin(ns, V4, "queryMsgById", "-n", group.namesrv, "-i", send["offsetMsgId"])
    assert topic in found, found
    assert send["ids"][0] in found, found

    out = run_mqadmin(
        ns, V4, "deleteTopic", "-n", group.namesrv, "-c", "DefaultCluster", "-t", topic
    )
    assert "delete topic [" in out and "success" in out, out
    topics = run_mqadmin(ns, V4, "topicList", "-n", group.namesrv).split()
    assert topic not in topics


def test_mqadmin_finds_every_message_of_a_batch_by_its_offset_msg_id(group: JavaGroup) -> None:
    """A batch send's answer carries one offset msgId per message, comma-joined: the Java
    client splits them into its SendResult, and mqadmin's queryMsgById (the Java decoder of the
    id, then VIEW_MESSAGE_BY_ID at the address and offset it names) finds each message."""
    ns, topic = group.ns, "T-batch-ids"
    create_topic(ns, topic, 2, namesrv=group.namesrv)
    events = produce(ns, topic, "--mode", "batch", "--count", "4", "--batch", "4", "--id-prefix",
                     "bid-", namesrv=group.namesrv)  # fmt: skip
    [send] = events_of(events, "send")
    assert send["status"] == "SEND_OK", send
    offset_ids = send["offsetMsgId"].split(",")
    assert len(offset_ids) == len(send["ids"]) == 4, send
    assert len(set(offset_ids)) == 4, offset_ids
    body_files = []
    for message_id, offset_id in list(zip(send["ids"], offset_ids, strict=True))[::3]:
        found = run_mqadmin(ns, V4, "queryMsgById", "-n", group.namesrv, "-i", offset_id)
        assert topic in found and message_id in found, found
        body_files += re.findall(r"Message Body Path:\s*(\S+)", found)
    # mqadmin saved each body under the fixed /tmp/rocketmq/msgbodys: run_mqadmin removed them
    assert len(body_files) == 2, body_files
    assert not any(Path(name).exists() for name in body_files), body_files


# -- a Java slave of a habroker master --------------------------------------------------------------


def _habroker_master(netns: NetNS, role: str, **config: Any) -> LocalBroker:
    """A started habroker master on RocketMQ's default port, with the Java slave's file size
    and no VIP channel (10909: a Java slave copies metadata through it)."""
    master = netns.local_broker(
        netns.root / "habroker-master",
        brokerRole=role,
        mappedFileSizeCommitLog=64 * 1024 * 1024,
        listenPort=10911,
        fastListenPort=-1,
        **config,
    )
    return master.start()


def _java_slave(netns: NetNS, version: str, namesrv: str) -> JavaBroker:
    """A real RocketMQ SLAVE (not started yet) whose name server is the habroker master."""
    return JavaBroker(
        netns, version, netns.root / "java-slave",
        BrokerSpec(broker_id=1, role="SLAVE", namesrv_addr=namesrv, listen_port=10921,
                   extra={"mappedFileSizeCommitLog": 64 * 1024 * 1024}),
    )  # fmt: skip


def _slave_acked_all(master: LocalBroker, within: float = 30.0) -> dict[str, Any]:
    """The master's status once its first slave acknowledged its whole log (or ``within`` s)."""
    deadline = time.monotonic() + within
    while True:
        status: dict[str, Any] = master.status()
        slaves = status["master"]["slaves"]
        if slaves and slaves[0]["ackOffset"] == status["maxOffset"]:
            return status
        if time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def test_java_slave_copies_metadata_from_a_habroker_master(netns: NetNS) -> None:
    """A RocketMQ 4.9.7 SLAVE whose name server is the habroker master: it registers
    (REGISTER_BROKER), learns its master's client and HA addresses from the answer, replicates
    the commit log and copies topics, subscription groups and consumer offsets with its own
    SlaveSynchronize (GET_ALL_* requests)."""
    master = _habroker_master(netns, "ASYNC_MASTER")
    namesrv = master.address
    create_topic(netns, "T-js", 2, namesrv=namesrv)
    run_mqadmin(netns, V4, "updateSubGroup", "-n", namesrv, "-b", master.address, "-g", "g-js",
                "-r", "5")  # fmt: skip
    sends = sent_ids(produce(netns, "T-js", "--count", "8", "--id-prefix", "js-", namesrv=namesrv))
    run_driver(netns, V4, "lite-pull", "--namesrv", namesrv, "--topic", "T-js", "--group", "g-js",
               "--expect", "8", "--timeout-s", "45")  # fmt: skip

    slave = _java_slave(netns, V4, namesrv)
    slave.start()
    config = slave.store_dir / "config"

    def copied() -> dict[str, object] | None:
        try:
            topics = loads_fastjson((config / "topics.json").read_text())
            groups = loads_fastjson((config / "subscriptionGroup.json").read_text())
            offsets = loads_fastjson((config / "consumerOffset.json").read_text())
        except (OSError, ValueError):
            return None
        if "T-js" not in topics.get("topicConfigTable", {}):
            return None
        if "g-js" not in groups.get("subscriptionGroupTable", {}):
            return None
        if "T-js@g-js" not in offsets.get("offsetTable", {}):
            return None
        return {"topics": topics, "groups": groups, "offsets": offsets}

    deadline = time.monotonic() + 60
    got = copied()
    while got is None and time.monotonic() < deadline:
        time.sleep(1)
        got = copied()
    assert got is not None, f"the Java slave copied nothing in 60 s:\n{slave.tail_log()}"
    assert got["topics"]["topicConfigTable"]["T-js"]["readQueueNums"] == 2  # type: ignore[index]
    assert got["groups"]["subscriptionGroupTable"]["g-js"]["retryMaxTimes"] == 5  # type: ignore[index]
    assert sum(got["offsets"]["offsetTable"]["T-js@g-js"].values()) == len(sends)  # type: ignore[index]

    # it replicates too: the master sees a slave acknowledging everything it has
    status = _slave_acked_all(master)
    slaves = status["master"]["slaves"]
    assert slaves and slaves[0]["ackOffset"] == status["maxOffset"] > 0, status
    # new data once it is caught up: the ASYNC master lingers (haAsyncTransferLingerMs) before
    # sending, and the Java slave still gets every byte, identical
    lingers = slaves[0]["lingers"]
    more = sent_ids(produce(netns, "T-js", "--count", "8", "--id-prefix", "js2-",
                            namesrv=namesrv))  # fmt: skip
    assert len(more) == 8
    status = _slave_acked_all(master)
    slaves, top = status["master"]["slaves"], status["maxOffset"]
    assert slaves and slaves[0]["ackOffset"] == top and slaves[0]["lingers"] > lingers, status
    ours = sorted((master.root / "store" / "commitlog").iterdir())[0].read_bytes()[:top]
    theirs = sorted((slave.store_dir / "commitlog").iterdir())[0].read_bytes()[:top]
    assert len(ours) == top and ours == theirs, "the Java slave's commit log differs"
    # and routes now name it, as brokerId 1
    route = loads_fastjson(run_mqadmin(netns, V4, "topicRoute", "-n", namesrv, "-t", "T-js"))
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": master.address, "1": slave.address}
    slave.stop()


@pytest.mark.parametrize("version", ["4.9.7", "5.3.1"])
def test_java_slave_acks_confirm_sync_sends_on_a_habroker_sync_master(
    netns: NetNS, version: str
) -> None:
    """A habroker SYNC_MASTER counts a Java slave's acks as confirmations: the master confirms
    only bytes it sent on that connection (its first report is where the copy starts, not an
    ack), so every Java SYNC send answers SEND_OK through the real slave's reports."""
    master = _habroker_master(netns, "SYNC_MASTER")
    namesrv = master.address
    create_topic(netns, "T-sync", 2, namesrv=namesrv)
    early = produce(netns, "T-sync", "--count", "5", "--id-prefix", "e-", namesrv=namesrv)
    assert {e["status"] for e in events_of(early, "send")} == {"SLAVE_NOT_AVAILABLE"}
    slave = _java_slave(netns, version, namesrv)
    slave.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # copied the backlog: its acks cover sent bytes
        status = master.status()
        slaves = status["master"]["slaves"]
        if slaves and slaves[0]["confirmedOffset"] == status["maxOffset"]:
            break
        time.sleep(0.5)
    assert slaves and slaves[0]["confirmedOffset"] == status["maxOffset"] > 0, (
        f"{status}\n{slave.tail_log()}"
    )
    events = produce(netns, "T-sync", "--count", "20", "--id-prefix", "s-", namesrv=namesrv)
    sends = events_of(events, "send")
    assert [e["status"] for e in sends] == ["SEND_OK"] * 20, sends
    status = master.status()
    assert status["master"]["push2SlaveMaxOffset"] == status["maxOffset"]
    slave.stop()


@pytest.mark.parametrize("version", ["4.9.7", "5.3.1"])
def test_a_stopped_habroker_master_waits_for_its_java_slaves_last_ack(
    netns: NetNS, version: str
) -> None:
    """A clean stop (SIGTERM) of a habroker ASYNC master whose Java slave has not acknowledged
    its last writes yet (the slave's JVM is SIGSTOPped while they are taken): the master keeps
    running, its client port closed, until the real slave's HAClient reports every byte
    (haShutdownDrainTimeoutMs), then exits 0, and the slave's commit log is the master's."""
    master = _habroker_master(netns, "ASYNC_MASTER", haShutdownDrainTimeoutMs=20_000)
    namesrv = master.address
    create_topic(netns, "T-drain", 2, namesrv=namesrv)
    slave = _java_slave(netns, version, namesrv)
    slave.start()
    assert len(sent_ids(produce(netns, "T-drain", "--count", "8", "--id-prefix", "d-",
                                namesrv=namesrv))) == 8  # fmt: skip
    status = _slave_acked_all(master, within=60)
    slaves = status["master"]["slaves"]
    assert slaves and slaves[0]["ackOffset"] == status["maxOffset"] > 0, (
        f"{status}\n{slave.tail_log()}"
    )
    assert slave.proc is not None and master.proc is not None
    paused = 1.5
    os.kill(slave.proc.pid, signal.SIGSTOP)
    try:
        tail = produce(netns, "T-drain", "--count", "8", "--id-prefix", "t-", namesrv=namesrv)
        assert [e["status"] for e in events_of(tail, "send")] == ["SEND_OK"] * 8, tail
        status = master.status()
        top, acked = status["maxOffset"], status["master"]["slaves"][0]["ackOffset"]
        assert acked < top, status
        master.signal(signal.SIGTERM)
        time.sleep(paused)
        assert master.running, f"exited while its slave lacked {top - acked} bytes"
    finally:
        os.kill(slave.proc.pid, signal.SIGCONT)
    assert master.proc.wait(30) == 0, master.tail_log()
    log = master.log_path.read_text()
    drained = re.search(
        rf"stopping: 1 slave\(s\) hold every byte up to offset {top} \(drained in (\d+) ms\)",
        log,
    )
    assert drained, master.tail_log()
    print(f"tail of {top - acked} bytes held by the stopped {version} slave; the master waited "
          f"{drained.group(1)} ms for its acknowledgement")  # fmt: skip
    assert int(drained.group(1)) >= paused * 1000 * 0.9
    ours = sorted((master.root / "store" / "commitlog").iterdir())[0].read_bytes()[:top]
    theirs = sorted((slave.store_dir / "commitlog").iterdir())[0].read_bytes()[:top]
    assert len(theirs) == top and ours == theirs, "the Java slave's commit log differs"
    slave.stop()


def test_habroker_slave_acks_a_java_sync_master_and_holds_its_bytes(netns: NetNS) -> None:
    """The other direction: a habroker SLAVE of a real 4.9.7 SYNC_MASTER. Every Java SYNC send
    answers SEND_OK only through the slave's reports, and the slave's commit log is the
    master's, byte for byte."""
    namesrv = JavaNameServer(netns, netns.root / "namesrv").start()
    master = JavaBroker(
        netns, V4, netns.root / "java-master",
        BrokerSpec(role="SYNC_MASTER", namesrv_addr=namesrv.address, listen_port=10911),
    )  # fmt: skip
    master.start()
    slave = netns.local_broker(
        netns.root / "habroker-slave", brokerRole="SLAVE", brokerId=1,
        haMasterAddress=master.ha_address, mappedFileSizeCommitLog=64 * 1024 * 1024,
        listenPort=10921, fastListenPort=-1,
    )  # fmt: skip
    slave.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # connected and reported once: the master counts it
        ha = slave.status()["slave"]
        if ha["connected"] and ha["lastReportAgeMs"] is not None:
            break
        time.sleep(0.2)
    assert ha["connected"], f"{ha}\n{slave.tail_log()}"
    create_topic(netns, "T-jm", 2, namesrv=namesrv.address)
    events = produce(netns, "T-jm", "--count", "200", "--id-prefix", "jm-", namesrv=namesrv.address)
    sends = events_of(events, "send")
    assert [e["status"] for e in sends] == ["SEND_OK"] * 200, sends[:3]
    top = slave.status()["maxOffset"]
    theirs = sorted((master.store_dir / "commitlog").iterdir())[0].read_bytes()[:top]
    ours = sorted((slave.root / "store" / "commitlog").iterdir())[0].read_bytes()[:top]
    assert top > 200 * 100 and ours == theirs
    slave.stop()
    master.stop()


def test_a_habroker_master_with_the_ha_secret_refuses_a_java_slave(netns: NetNS) -> None:
    """The interop trade-off of haAuthSecretFile (docs/security.md): a Java slave cannot answer
    the handshake, so a master with the key refuses it and it never counts as a slave; SYNC
    sends answer SLAVE_NOT_AVAILABLE. The CHALLENGE it reads as a transfer header makes it append
    nothing (an earlier layout made an empty Java slave create a commit-log file at a huge
    offset). Groups with Java brokers run without the key (the test above)."""
    secret = netns.root / "ha-secret"
    secret.write_text("a-group-secret-of-enough-bytes\n")
    master = _habroker_master(netns, "SYNC_MASTER", haAuthSecretFile=str(secret))
    namesrv = master.address
    create_topic(netns, "T-auth", 2, namesrv=namesrv)
    slave = _java_slave(netns, "4.9.7", namesrv)
    slave.start()
    deadline = time.monotonic() + 60
    # a 4.9.7 slave sends its first report only haSendHeartbeatInterval (5 s) after connecting:
    # the master's 3 s handshake timeout closes it first
    refused = "HA handshake refused: nothing from the slave within 3 s"
    while time.monotonic() < deadline and refused not in master.log_path.read_text():
        time.sleep(0.5)
    assert refused in master.log_path.read_text(), f"{master.tail_log()}\n{slave.tail_log()}"
    assert master.status()["master"]["connectionCount"] == 0
    # the empty Java slave took the CHALLENGE for a transfer header and appended nothing: no
    # commit-log file at the offset its first 8 bytes spell
    commitlog = slave.store_dir / "commitlog"
    files = sorted(p.name for p in commitlog.iterdir()) if commitlog.exists() else []
    assert all(int(name) == 0 for name in files), files
    events = produce(netns, "T-auth", "--count", "3", "--id-prefix", "a-", namesrv=namesrv)
    assert {e["status"] for e in events_of(events, "send")} == {"SLAVE_NOT_AVAILABLE"}
    slave.stop()


# -- read redirection ------------------------------------------------------------------------------


def pulled_messages(ns: NetNS, broker: LocalBroker) -> int:
    """habroker_pull_messages_total from the broker's /metrics."""

    def fetch() -> str:
        with urllib.request.urlopen(f"http://{broker.http_address}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    for line in ns.call(fetch).splitlines():
        if line.startswith("habroker_pull_messages_total"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("no habroker_pull_messages_total in /metrics")


def test_a_slow_consumer_reads_its_backlog_from_the_slave(netns: NetNS) -> None:
    """suggestWhichBrokerId sends a Java consumer whose backlog is cold to the slave; once it has
    caught up it is sent back to the master.  The brokers' own counters say who served what."""
    group = netns.local_group(
        netns.root / "redirect",
        slaves=1,
        mode="SYNC",
        mappedFileSizeCommitLog=16 * 1024 * 1024,
        slaveReadEnable=True,
        # "memory" of 2 MiB: a backlog over 40 % of it is cold (RocketMQ's rule, scaled down)
        totalPhysicalMemorySize=2 * 1024 * 1024,
    )
    group.start()
    group.wait_replicated()
    master, slave = group.master, group.slaves[0]
    namesrv = master.address
    create_topic(netns, "T-cold", 1, namesrv=namesrv)
    sends = sent_ids(produce(netns, "T-cold", "--count", "3000", "--size", "1024",
                             "--id-prefix", "c-", namesrv=namesrv))  # fmt: skip
    assert len(sends) == 3000
    group.wait_replicated()
    before = (pulled_messages(netns, master), pulled_messages(netns, slave))
    events = run_driver(netns, V4, "lite-pull", "--namesrv", namesrv, "--topic", "T-cold",
                        "--group", "g-cold", "--expect", "3000", "--timeout-s", "90")  # fmt: skip
    messages = events_of(events, "message")
    assert Counter(m["id"] for m in messages) == Counter(dict.fromkeys(sends, 1))
    from_master = pulled_messages(netns, master) - before[0]
    from_slave = pulled_messages(netns, slave) - before[1]
    print(f"3000 messages read: {from_slave} served by the slave, {from_master} by the master")
    # most of the 3 MB backlog is cold: the slave served it; the warm tail came from the master
    assert from_slave >= 1500, (from_master, from_slave)
    assert from_master >= 1, (from_master, from_slave)
    # new messages, now that the consumer is caught up, are read from the master again
    produce(netns, "T-cold", "--count", "20", "--id-prefix", "w-", namesrv=namesrv)
    before = (pulled_messages(netns, master), pulled_messages(netns, slave))
    events = run_driver(netns, V4, "lite-pull", "--namesrv", namesrv, "--topic", "T-cold",
                        "--group", "g-cold", "--expect", "20", "--timeout-s", "60")  # fmt: skip
    assert {m["id"] for m in events_of(events, "message")} == {f"w-{i}" for i in range(20)}
    assert pulled_messages(netns, master) - before[0] >= 20
    assert pulled_messages(netns, slave) - before[1] == 0


# -- a habroker group behind a real RocketMQ NameServer ----------------------------------------------


def test_habroker_group_registers_with_a_java_name_server(netns: NetNS) -> None:
    """namesrvAddr: master and slave register with a real 4.9.7 NameServer; the slave is given no
    haMasterAddress and finds its master through the name server's answer, as a Java slave does.
    Java clients that know only the name server then produce and consume through the group."""
    namesrv = JavaNameServer(netns, netns.root / "namesrv").start()
    master = netns.local_broker(
        netns.root / "m", brokerRole="SYNC_MASTER", namesrvAddr=namesrv.address,
        mappedFileSizeCommitLog=16 * 1024 * 1024,
    )  # fmt: skip
    master.start()
    slave = netns.local_broker(
        netns.root / "s", brokerRole="SLAVE", brokerId=1, namesrvAddr=namesrv.address,
        registerNameServerPeriod=10000, mappedFileSizeCommitLog=16 * 1024 * 1024,
    )  # fmt: skip
    slave.start(wait=False)
    deadline = time.monotonic() + 30
    rows: list = []
    while time.monotonic() < deadline:
        rows = cluster_list(run_mqadmin(netns, V4, "clusterList", "-n", namesrv.address))
        if {(r.broker_id, r.address) for r in rows} == {(0, master.address), (1, slave.address)}:
            break
        time.sleep(1)
    assert {(r.broker_id, r.address, r.version) for r in rows} == {
        (0, master.address, HABROKER_VERSION),
        (1, slave.address, HABROKER_VERSION),
    }, rows
    slave.wait_healthy(30)
    assert slave.status()["slave"]["masterAddress"] == master.ha_address
    create_topic(netns, "T-ns", 2, namesrv=namesrv.address)
    # the topic reaches the name server with the next registration (as with a Java broker)
    deadline = time.monotonic() + 40
    while True:
        try:
            run_mqadmin(netns, V4, "topicRoute", "-n", namesrv.address, "-t", "T-ns")
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    sends = sent_ids(produce(netns, "T-ns", "--count", "12", "--id-prefix", "ns-",
                             namesrv=namesrv.address))  # fmt: skip
    assert all(s["status"] == "SEND_OK" for s in sends.values())  # SYNC: the slave acknowledged
    events = run_driver(netns, V4, "lite-pull", "--namesrv", namesrv.address, "--topic", "T-ns",
                        "--group", "g-ns", "--expect", "12", "--timeout-s", "45")  # fmt: skip
    assert Counter(m["id"] for m in events_of(events, "message")) == Counter(
        dict.fromkeys(sends, 1)
    )
    # a stopped broker unregisters: the name server forgets it at once
    slave.stop()
    rows = cluster_list(run_mqadmin(netns, V4, "clusterList", "-n", namesrv.address))
    assert {(r.broker_id, r.address) for r in rows} == {(0, master.address)}


# -- the 5.x remoting client ------------------------------------------------------------------------


def test_531_client_and_mqadmin_against_habroker(group: JavaGroup) -> None:
    """The 5.3.1 client: its lite-pull consumer pulls with LITE_PULL_MESSAGE (361), its producer
    sends heartbeats, and 5.3.1 mqadmin's topicStatus asks GET_TOPIC_CONFIG (351)."""
    from tests.interop.test_java_oracle import V5

    ns = group.ns
    create_topic(ns, "T-five", 2, version=V5, namesrv=group.namesrv)
    sends: dict[str, dict] = {}
    for mode in ("sync", "batch"):
        events = produce(ns, "T-five", "--mode", mode, "--count", "8", "--id-prefix", f"{mode}5-",
                         "--tags", "five", version=V5, namesrv=group.namesrv)  # fmt: skip
        assert summary(events)["sendOk"] == 8
        sends.update(sent_ids(events))
    events = run_driver(ns, V5, "lite-pull", "--namesrv", group.namesrv, "--topic", "T-five",
                        "--group", "g-five", "--expect", "16", "--timeout-s", "60",
                        "--trace")  # fmt: skip
    messages = events_of(events, "message")
    assert Counter(m["id"] for m in messages) == Counter(dict.fromkeys(sends, 1))
    assert all(m["sha256"] == sends[m["id"]]["sha"] for m in messages)
    assert "LITE_PULL_MESSAGE" in {r["name"] for r in events_of(events, "rpc")}
    rows = topic_status(run_mqadmin(ns, V5, "topicStatus", "-n", group.namesrv, "-t", "T-five"))
    assert len(rows) == 2 and sum(r.max_offset for r in rows) == 16, rows


def test_mqadmin_get_broker_epoch_reads_habrokers_epochs(
    group: JavaGroup, habroker_group: LocalGroup
) -> None:
    """5.3.1 mqadmin's getBrokerEpoch sends GET_BROKER_EPOCH_CACHE (1007) to every broker of the
    group and prints each EpochEntryCache: the master's epoch 1 from offset 0, and the slave's
    copy of it (a slave takes its master's entries after checking its history)."""
    from tests.interop.test_java_oracle import V5

    out = run_mqadmin(group.ns, V5, "getBrokerEpoch", "-n", group.namesrv, "-b", "broker-a")
    blocks = [b for b in out.split("#clusterName") if "#brokerAddr" in b]
    assert len(blocks) == 2, out
    for block in blocks:
        broker_id = int(block.split("#brokerId")[1].split()[0])
        member = habroker_group.brokers[broker_id]
        role = member.status()
        assert f"#brokerAddr\t{member.address}" in block, block
        epochs = [line for line in block.splitlines() if line.startswith("#Epoch:")]
        assert len(epochs) == len(role["epochEntries"]) == 1, (block, role)
        assert "epoch=1" in epochs[0] and "startOffset=0" in epochs[0], epochs


# -- external access ------------------------------------------------------------------------------


def test_external_listener_answers_routes_with_external_addresses(netns: NetNS) -> None:
    """A client outside the cluster (the operator's spec.externalAccess) talks to
    externalListenPort only: there, route answers name each broker's external address (what
    the operator PUTs on /v1/admin/external-addresses), while the ordinary port keeps naming
    the brokers' own. The real Java producer and consumer, knowing nothing but the master's
    external address, send and read back through it (they only know addresses from routes)."""
    group = netns.local_group(netns.root / "ext", slaves=1, mode="SYNC")
    external = {}
    for broker in group.brokers:
        port = netns.call(free_port)
        broker.config["externalListenPort"] = port
        external[str(broker.config["brokerId"])] = f"127.0.0.1:{port}"
    group.start()
    group.wait_replicated()
    for broker in group.brokers:
        code, body = broker.request(
            "PUT", "/v1/admin/external-addresses", {"brokerAddrs": external}
        )
        assert code == 200 and body["brokerAddrs"] == external, body
        assert broker.status()["externalAddrs"] == external
    code, body = group.master.request(
        "PUT", "/v1/admin/external-addresses", {"brokerAddrs": {"0": "no-port"}}
    )
    assert code == 400, body  # refused, and the map in force is unchanged
    assert group.master.status()["externalAddrs"] == external

    master, slave = group.master, group.slaves[0]
    create_topic(netns, "T-ext", 2, namesrv=master.address)
    internal = loads_fastjson(
        run_mqadmin(netns, V4, "topicRoute", "-n", master.address, "-t", "T-ext")
    )
    assert internal["brokerDatas"][0]["brokerAddrs"] == {"0": master.address, "1": slave.address}
    for via in external.values():  # either broker's external listener
        route = loads_fastjson(run_mqadmin(netns, V4, "topicRoute", "-n", via, "-t", "T-ext"))
        assert route["brokerDatas"][0]["brokerAddrs"] == external, route
    clusters = run_mqadmin(netns, V4, "clusterList", "-n", external["0"])
    assert external["0"] in clusters and master.address not in clusters, clusters

    sent = sent_ids(
        produce(netns, "T-ext", "--count", "20", "--id-prefix", "ext-", namesrv=external["0"])
    )
    assert len(sent) == 20
    events = run_driver(netns, V4, "lite-pull", "--namesrv", external["0"], "--topic", "T-ext",
                        "--group", "g-ext", "--expect", "20", "--timeout-s", "45")  # fmt: skip
    got = Counter(m["id"] for m in events_of(events, "message"))
    assert got == Counter(dict.fromkeys(sent, 1))
    print(f"external listener: 20 sent and read back through {external['0']}")


def test_dledger_external_routes_follow_the_leader(netns: NetNS) -> None:
    """A DLedger group's external listeners (spec.externalAccess on a DLEDGER group): the
    operator tells each peer every peer's external address by dLegerSelfId, since brokerIds
    follow the leader; each peer names the leader it knows as brokerId 0 and every follower by
    its id. The real Java producer and consumer, knowing only one external address, send and
    read back; after the leader is killed a survivor's external listener names the new leader
    as 0 and the same client code sends through it, with every message read back once."""
    group = netns.local_dledger_group(netns.root / "dl-ext", peers=3)
    external: dict[str, str] = {}
    for i, peer in enumerate(group.peers):
        port = netns.call(free_port)
        peer.config["externalListenPort"] = port
        external[f"n{i}"] = f"127.0.0.1:{port}"
    group.start()
    for peer in group.peers:
        code, body = peer.request("PUT", "/v1/admin/external-addresses", {"peerAddrs": external})
        assert code == 200 and body["peerAddrs"] == external, body
        assert peer.status()["externalPeerAddrs"] == external
    code, body = group.peers[0].request(
        "PUT", "/v1/admin/external-addresses", {"peerAddrs": {"x": "127.0.0.1:1"}}
    )
    assert code == 400, body  # a selfId RocketMQ cannot number; the map in force is unchanged
    assert group.peers[0].status()["externalPeerAddrs"] == external

    def expected(leader: LocalBroker, alive: list[LocalBroker]) -> dict[str, str]:
        out = {}
        for i, peer in enumerate(group.peers):
            if peer in alive:
                out["0" if peer is leader else str(i + 1)] = external[f"n{i}"]
        return out

    def named(via: str, topic: str, want: dict[str, str]) -> bool:
        out = run_mqadmin(netns, V4, "topicRoute", "-n", via, "-t", topic)
        return bool(loads_fastjson(out)["brokerDatas"][0]["brokerAddrs"] == want)

    def routes_settle(leader: LocalBroker, alive: list[LocalBroker], topic: str) -> None:
        want = expected(leader, alive)
        for peer in alive:  # every survivor's external listener
            via = external[f"n{group.peers.index(peer)}"]

            deadline = time.monotonic() + 60
            while not named(via, topic, want):
                assert time.monotonic() < deadline, f"{via} never named {want}"
                time.sleep(1)
        print(f"external routes name {want}")

    leader = group.leader()
    create_topic(netns, "T-dl-ext", 2, namesrv=leader.address)
    routes_settle(leader, list(group.peers), "T-dl-ext")
    follower_door = external[f"n{next(i for i, p in enumerate(group.peers) if p is not leader)}"]
    first = sent_ids(
        produce(netns, "T-dl-ext", "--count", "20", "--id-prefix", "a-", namesrv=follower_door)
    )
    assert len(first) == 20

    leader.kill()  # SIGKILL: the survivors elect, and their external routes follow
    alive = [p for p in group.peers if p is not leader]
    new_leader = group.leader(timeout=60, exclude=[leader])
    routes_settle(new_leader, alive, "T-dl-ext")
    survivor_door = external[f"n{group.peers.index(alive[0])}"]
    second = sent_ids(
        produce(netns, "T-dl-ext", "--count", "20", "--id-prefix", "b-", namesrv=survivor_door)
    )
    assert len(second) == 20
    events = run_driver(netns, V4, "lite-pull", "--namesrv", survivor_door, "--topic", "T-dl-ext",
                        "--group", "g-dl-ext", "--expect", "40", "--timeout-s", "60")  # fmt: skip
    got = Counter(m["id"] for m in events_of(events, "message"))
    assert got == Counter(dict.fromkeys([*first, *second], 1))
    print(f"DLedger external listeners: 40 sent and read back once across a leader kill "
          f"({leader.root.name} -> {new_leader.root.name})")  # fmt: skip
