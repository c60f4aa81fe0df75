"""ReplicasManager with real broker processes: a slave never appends a different history,
and the controller's calls (role, fence) keep to their epochs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from brokergroup_operator.local import log_bodies
from habroker.client import BrokerAPIError, Producer
from habroker.client.sync import BrokerConnection

SMALL = {"mappedFileSizeCommitLog": 64 * 1024, "maxMessageSize": 16 * 1024, "metaSyncInterval": 200}


def test_a_slave_never_appends_the_history_of_a_wiped_master(group_factory) -> None:
    """The finding of issue 13: the master's volume is deleted, it comes back empty, and grows
    past the slave's offset. The slave must stop with a divergence, never append."""
    group = group_factory(**SMALL)
    with Producer(group.master.http_address) as producer:
        producer.create_topic("w", 2)
        for i in range(40):
            producer.send_batch("w", [f"old-{i}-{j}".encode() * 20 for j in range(10)])
    group.wait_replicated()
    slave = group.slaves[0]
    slave_root = Path(slave.config["storePathRootDir"])
    before = slave.status()["maxOffset"]
    group.master.stop()
    shutil.rmtree(Path(group.master.config["storePathRootDir"]))
    group.master.start()
    with Producer(group.master.http_address) as producer:
        producer.create_topic("w", 2)
        for i in range(80):  # well past the slave's offset
            producer.send_batch("w", [f"new-{i}-{j}".encode() * 20 for j in range(10)])
    assert group.master.status()["maxOffset"] > before
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st = slave.status()["slave"]
        if st["divergence"] is not None:
            break
        time.sleep(0.2)
    time.sleep(2)  # a few reconnects: still nothing appended
    st = slave.status()
    assert st["slave"]["divergence"] is not None, st["slave"]
    assert "not this log's" in st["slave"]["divergence"]["reason"]
    assert st["maxOffset"] == before, "the slave appended the wiped master's bytes"
    assert st["ready"]  # it keeps serving what it has
    slave.stop()
    bodies = log_bodies(slave_root)
    assert bodies and all(b.startswith(b"old-") for b in bodies)


def test_controller_mode_starts_fenced_and_obeys_only_newer_epochs(group_factory) -> None:
    group = group_factory(slaves=0, enableControllerMode=True, **SMALL)
    conn = BrokerConnection(group.master.http_address)
    role = conn.json("GET", "/v1/admin/role")
    assert role["fenced"] and role["fenceReason"] == "awaiting role from controller"
    with pytest.raises(BrokerAPIError) as refused, Producer(group.master.http_address) as p:
        p.send("t", b"x")
    assert refused.value.status == 503 and refused.value.code == "fenced"
    body = {"role": "SYNC_MASTER", "epoch": 3, "brokerId": 0}
    first = conn.json("PUT", "/v1/admin/role", body)
    assert not first["fenced"] and first["epoch"] == 3
    assert conn.json("PUT", "/v1/admin/role", body)["epochEntries"] == first["epochEntries"]
    with pytest.raises(BrokerAPIError) as stale:
        conn.json("PUT", "/v1/admin/role", {**body, "epoch": 2})
    assert stale.value.status == 409 and stale.value.code == "stale_epoch"
    with pytest.raises(BrokerAPIError) as bad:
        conn.json("PUT", "/v1/admin/role", {"role": "SLAVE", "epoch": 4, "brokerId": 0})
    assert bad.value.status == 400
    with Producer(group.master.http_address) as producer:
        producer.create_topic("t", 1)
        producer.send("t", b"before the fence")
    fenced = conn.json("POST", "/v1/admin/fence", {"epoch": 4})
    assert fenced["fenced"] and fenced["epoch"] == 4
    with pytest.raises(BrokerAPIError) as err, Producer(group.master.http_address) as producer:
        producer.send("t", b"after the fence")
    assert err.value.status == 503 and err.value.code == "fenced"
    # restarted, it remembers the epoch it was told and waits for its role again
    group.master.stop()
    group.master.start()
    role = BrokerConnection(group.master.http_address).json("GET", "/v1/admin/role")
    assert role["epoch"] == 4 and role["fenced"]
    assert [e["epoch"] for e in role["epochEntries"]] == [3]
