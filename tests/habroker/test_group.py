"""Master + slave as real processes: metadata copy, refused writes, read redirection, status,
and a slave rewired at runtime to a master that came back at a new address."""

from __future__ import annotations

import filecmp
import time
from pathlib import Path

import pytest
from habroker.client import BrokerAPIError, BrokerGroupReader, OutgoingMessage, Producer
from habroker.client.sync import BrokerConnection
from habroker.local import free_port

from tests.habroker.metricsutil import scrape

SMALL = {"mappedFileSizeCommitLog": 64 * 1024, "maxMessageSize": 16 * 1024, "metaSyncInterval": 200}


def wait_for(predicate, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def commit_logs_identical(a: Path, b: Path) -> None:
    names_a = sorted(p.name for p in (a / "store" / "commitlog").iterdir())
    names_b = sorted(p.name for p in (b / "store" / "commitlog").iterdir())
    assert names_a == names_b
    _match, mismatch, errors = filecmp.cmpfiles(
        a / "store" / "commitlog", b / "store" / "commitlog", names_a, shallow=False
    )
    assert not mismatch and not errors, f"differing commit-log files: {mismatch or errors}"


def test_slave_copies_metadata_and_refuses_writes(group_factory):
    group = group_factory(**SMALL)
    master = BrokerConnection(group.master.http_address)
    master.json("POST", "/v1/topics", {"topic": "meta", "readQueueNums": 3, "writeQueueNums": 3})
    master.json("PUT", "/v1/subscription-groups/g1", {"whichBrokerWhenConsumeSlowly": 1})
    master.json("PUT", "/v1/consumer-offsets/g1/meta/2", {"offset": 0})
    slave = BrokerConnection(group.slaves[0].http_address)
    wait_for(
        lambda: "meta" in slave.json("GET", "/v1/topics")["topicConfigTable"], what="topic copy"
    )
    wait_for(
        lambda: "g1" in slave.json("GET", "/v1/subscription-groups")["subscriptionGroupTable"],
        what="group copy",
    )
    wait_for(
        lambda: slave.json("GET", "/v1/consumer-offsets")["offsetTable"].get("meta@g1") == {"2": 0},
        what="offset copy",
    )
    assert group.slaves[0].status()["slave"]["metadata"]["lastError"] is None
    with Producer(group.slaves[0].http_address) as producer, pytest.raises(BrokerAPIError) as exc:
        producer.send("meta", b"x", queue_id=0)
    assert exc.value.status == 403 and exc.value.code == "not_master"
    with pytest.raises(BrokerAPIError) as exc:
        slave.json("PUT", "/v1/consumer-offsets/g1/meta/2", {"offset": 1})
    assert exc.value.code == "not_master"
    with pytest.raises(BrokerAPIError) as exc:
        slave.json("POST", "/v1/topics", {"topic": "nope"})
    assert exc.value.code == "not_master"
    assert slave.json("GET", "/v1/admin/role")["role"] == "SLAVE"


def test_status_and_metrics_show_replication(group_factory):
    group = group_factory(**SMALL)
    with Producer(group.master.http_address) as producer:
        producer.create_topic("st", 1)
        for _ in range(20):
            producer.send_batch("st", [b"y" * 1000] * 20, queue_id=0)
    group.wait_replicated()
    st = wait_for(
        lambda: (
            (s := group.master.status())["master"]["slaves"]
            and s["master"]["slaves"][0]["ackOffset"] == s["maxOffset"]
            and s
        ),
        what="slave ack",
    )
    m = st["master"]
    assert m["connectionCount"] == 1 and m["inSyncSlaves"] == 1
    assert m["push2SlaveMaxOffset"] == st["maxOffset"] > 400_000
    slave_row = m["slaves"][0]
    assert (
        slave_row["lagBytes"] == 0
        and slave_row["inSync"] is True
        and slave_row["lastReportAgeMs"] < 10_000
    )
    # the slave announced which HA connection is its own
    row = wait_for(
        lambda: (r := group.master.status()["master"]["slaves"][0])["brokerId"] is not None and r,
        what="slave identity",
    )
    assert row["brokerId"] == 1 and row["listenAddress"] == group.slaves[0].address
    assert row["httpAddress"] == group.slaves[0].http_address
    assert row["address"] == group.slaves[0].status()["slave"]["localAddress"]
    sst = group.slaves[0].status()
    assert sst["role"] == "SLAVE" and sst["slave"]["connected"] is True
    assert sst["slave"]["masterAddress"] == group.master.ha_address
    assert sst["maxOffset"] == st["maxOffset"]
    metrics = scrape(group.master.http_address)
    assert metrics.values("habroker_ha_slave_lag_bytes", slave=row["address"]) == [0]
    assert metrics.value("habroker_ha_in_sync_slaves") == 1
    slave_metrics = scrape(group.slaves[0].http_address)
    assert slave_metrics.value("habroker_ha_connected", broker="broker-a", brokerId="1") == 1
    commit_logs_identical(group.master.root, group.slaves[0].root)


@pytest.mark.parametrize("slave_read", [True, False])
def test_backlog_is_redirected_to_the_slave(group_factory, slave_read):
    policy = {
        "slaveReadEnable": slave_read,
        "totalPhysicalMemorySize": 1 << 20,
        "accessMessageInMemoryMaxRatio": 10,
    }
    group = group_factory(**SMALL, **policy)
    bodies = [f"msg-{i:05d}".encode() * 20 for i in range(3000)]  # ~200 bytes each, ~700 KB of log
    with Producer(group.master.http_address) as producer:
        producer.create_topic("rd", 1)
        for start in range(0, len(bodies), 100):
            producer.send_batch(
                "rd", [OutgoingMessage(b) for b in bodies[start : start + 100]], queue_id=0
            )
    group.wait_replicated()
    wait_for(
        lambda: group.slaves[0].status()["dispatchedOffset"] == group.master.status()["maxOffset"],
        what="slave dispatch",
    )
    got: list[bytes] = []
    served: list[int] = []
    with BrokerGroupReader(group.http_endpoints) as reader:
        offset = 0
        while True:
            res = reader.pull("rd", 0, offset, max_msgs=100, group="readers")
            if res.status != "FOUND":
                break
            got.extend(m.body for m in res.messages)
            served.extend([res.broker_id] * len(res.messages))
            offset = res.next_begin_offset
        final_suggestion = res.suggest_which_broker_id
    assert got == bodies
    if slave_read:
        # the first pull is the master's; it sends the cold backlog to broker 1, which serves it
        # until the consumer is within 10% of 1 MiB of the end; then back to the master
        assert served[0] == 0 and served.count(1) > 2000
        assert final_suggestion == 0
    else:
        assert set(served) == {0}


def test_slave_follows_a_master_that_moved(group_factory):
    group = group_factory(**SMALL)
    with Producer(group.master.http_address) as producer:
        producer.create_topic("mv", 2)
        for _ in range(30):
            producer.send_batch("mv", [b"before" * 100] * 10)
    group.wait_replicated()
    # the master comes back elsewhere (a rescheduled pod: same volume, new address)
    group.master.stop()
    group.master.config["listenPort"] = free_port()
    group.master.config["haListenPort"] = free_port()
    group.master.config["httpListenPort"] = free_port()
    group.master.start()
    slave = BrokerConnection(group.slaves[0].http_address)
    slave.json(
        "PUT",
        "/v1/admin/master-address",
        {
            "haMasterAddress": group.master.ha_address,
            "masterHttpAddress": group.master.http_address,
        },
    )
    with Producer(group.master.http_address) as producer:
        for _ in range(30):
            producer.send_batch("mv", [b"after" * 100] * 10)
    group.wait_replicated()
    st = group.slaves[0].status()["slave"]
    assert st["masterAddress"] == group.master.ha_address and st["connected"]
    group.stop()
    commit_logs_identical(group.master.root, group.slaves[0].root)


def test_bad_master_address_is_refused(group_factory):
    group = group_factory(**SMALL)
    slave = BrokerConnection(group.slaves[0].http_address)
    with pytest.raises(BrokerAPIError) as exc:
        slave.json("PUT", "/v1/admin/master-address", {"haMasterAddress": "no-port"})
    assert exc.value.status == 400 and "haMasterAddress" in exc.value.message
    assert group.slaves[0].status()["slave"]["masterAddress"] == group.master.ha_address


def test_slave_identity_keeps_a_known_http_address(tmp_path):
    """An announcement without the HTTP address (a remoting registration) keeps the one the
    slave's HTTP metadata copy gave, so status does not flap between the two."""
    from habroker.broker import BrokerController
    from habroker.config import BrokerConfig

    broker = BrokerController(BrokerConfig(storePathRootDir=str(tmp_path)))
    broker.note_slave_identity("10.0.0.6:5000", 1, "10.0.0.6:10911", "10.0.0.6:10913")
    broker.note_slave_identity("10.0.0.6:5000", 1, "10.0.0.6:10911")
    assert broker.slave_identities["10.0.0.6:5000"] == (1, "10.0.0.6:10911", "10.0.0.6:10913")
    broker.note_slave_identity("10.0.0.6:5000", 2, "10.0.0.6:10921")  # another slave now
    assert broker.slave_identities["10.0.0.6:5000"] == (2, "10.0.0.6:10921", "")
