"""``/metrics`` of real broker processes, parsed by prometheus_client: every family typed as
what it is, latency histograms that count the requests made, consumer lag that is the real
backlog, and replication lag in bytes and seconds while a slave is stopped."""

from __future__ import annotations

import time

from habroker.client import BrokerGroupReader, Producer

from tests.habroker.metricsutil import scrape
from tests.habroker.test_group import SMALL, wait_for

LABELS = {"broker": "broker-a", "brokerId": "0"}

COUNTERS = {
    "habroker_put_requests",
    "habroker_put_messages",
    "habroker_put_bytes",
    "habroker_put_status",
    "habroker_pull_requests",
    "habroker_pull_messages",
    "habroker_pull_bytes",
    "habroker_request_errors",
    "habroker_acl_refused_requests",
    "habroker_truncated_bytes",
}
GAUGES = {
    "habroker_commitlog_max_offset",
    "habroker_commitlog_min_offset",
    "habroker_commitlog_flushed_offset",
    "habroker_dispatched_offset",
    "habroker_store_disk_used_ratio",
    "habroker_store_disk_max_used_ratio",
    "habroker_role",
    "habroker_master",
    "habroker_epoch",
    "habroker_fenced",
    "habroker_slave_diverged",
    "habroker_consumer_group_lag",
}
HISTOGRAMS = {
    "habroker_produce_latency_seconds",
    "habroker_pull_latency_seconds",
    "habroker_sync_wait_seconds",
}


def test_types_latency_and_consumer_lag(broker_factory):
    broker = broker_factory(mappedFileSizeCommitLog=65536, defaultTopicQueueNums=2)
    with Producer(broker.http_address) as producer:
        producer.create_topic("orders", 2)
        for _ in range(4):
            producer.send_batch("orders", [b"m"] * 5, queue_id=0)
        producer.send_batch("orders", [b"n"] * 3, queue_id=1)
    with BrokerGroupReader(broker.http_address) as reader:
        got = reader.pull("orders", 0, 0, max_msgs=32, group="billing")
        assert len(got.messages) == 20
        reader.commit_offset("billing", "orders", 0, 8)
        reader.commit_offset("billing", "orders", 1, 0)
        m = scrape(broker.http_address)
        assert m.content_type.startswith("text/plain")
        for name in COUNTERS:
            assert m.types[name] == "counter", name
        for name in GAUGES:
            assert m.types[name] == "gauge", name
        for name in HISTOGRAMS:
            assert m.types[name] == "histogram", name
        assert m.value("habroker_put_messages_total", **LABELS) == 23
        assert m.value("habroker_put_status_total", status="PUT_OK", **LABELS) == 5
        assert m.value("habroker_role", role="ASYNC_MASTER", **LABELS) == 1
        assert m.value("habroker_master", **LABELS) == 1
        assert 0 < m.value("habroker_store_disk_used_ratio", **LABELS) < 1
        assert m.value("habroker_store_disk_max_used_ratio", **LABELS) == 0.75
        # one observation per request, in the +Inf bucket and the count alike
        assert m.value("habroker_produce_latency_seconds_count", **LABELS) == 5
        assert m.value("habroker_produce_latency_seconds_bucket", le="+Inf", **LABELS) == 5
        assert 0 < m.value("habroker_produce_latency_seconds_sum", **LABELS) < 5
        assert m.value("habroker_pull_latency_seconds_count", **LABELS) == 1
        # an ASYNC master never waits for a slave: no SYNC observations
        assert m.values("habroker_sync_wait_seconds_count", **LABELS) == []
        # the backlog per queue: 20 - 8 and 3 - 0
        lag = {"group": "billing", "topic": "orders", **LABELS}
        assert m.value("habroker_consumer_group_lag", queueId="0", **lag) == 12
        assert m.value("habroker_consumer_group_lag", queueId="1", **lag) == 3
        # a commit consumes the backlog; a new message grows it again
        reader.commit_offset("billing", "orders", 0, 20)
        with Producer(broker.http_address) as producer:
            producer.send_batch("orders", [b"o"], queue_id=1)
        m = scrape(broker.http_address)
        assert m.value("habroker_consumer_group_lag", queueId="0", **lag) == 0
        assert m.value("habroker_consumer_group_lag", queueId="1", **lag) == 4


def test_sync_wait_and_ha_lag_while_a_slave_is_stopped(group_factory):
    group = group_factory(mode="SYNC", syncFlushTimeout=500, **SMALL)
    slave_labels = {"broker": "broker-a", "brokerId": "1"}
    # a put before the master has the slave's first report is answered SLAVE_NOT_AVAILABLE at
    # once and waits for nothing (so it is not in habroker_sync_wait_seconds): wait for it
    wait_for(
        lambda: group.master.status()["master"]["connectionCount"] >= 1,
        what="the master to count its slave",
    )
    with Producer(group.master.http_address) as producer:
        producer.create_topic("st", 1)
        for _ in range(5):
            assert producer.send_batch("st", [b"y" * 100] * 10, queue_id=0).status == "PUT_OK"
        group.wait_replicated()
        m = wait_for(
            lambda: (
                (m := scrape(group.master.http_address)).values("habroker_ha_slave_lag_bytes")
                == [0]
                and m
            ),
            what="the slave's ack",
        )
        assert m.value("habroker_sync_wait_seconds_count", **LABELS) == 5
        assert m.value("habroker_ha_in_sync_slaves", **LABELS) == 1
        assert m.values("habroker_ha_slave_lag_bytes", **LABELS) == [0]
        assert m.values("habroker_ha_slave_lag_seconds", **LABELS) == [0]
        s = scrape(group.slaves[0].http_address)
        assert s.types["habroker_ha_reconnects"] == "counter"
        assert s.value("habroker_ha_connected", **slave_labels) == 1
        assert s.value("habroker_role", role="SLAVE", **slave_labels) == 1
        assert s.value("habroker_master", **slave_labels) == 0
        assert "habroker_consumer_group_lag" not in s.types  # only masters report it
        group.slaves[0].pause()
        try:
            # the producer waits syncFlushTimeout for an ack that cannot come
            sent = producer.send_batch("st", [b"z" * 100] * 10, queue_id=0)
            assert sent.status == "FLUSH_SLAVE_TIMEOUT"
            time.sleep(1.0)
            m = scrape(group.master.http_address)
            assert m.value("habroker_ha_sync_timeouts_total", **LABELS) == 1
            assert m.value("habroker_sync_wait_seconds_count", **LABELS) == 6
            # the un-acked message was stored over a second ago
            assert m.values("habroker_ha_slave_lag_bytes", **LABELS)[0] > 1000
            assert m.values("habroker_ha_slave_lag_seconds", **LABELS)[0] >= 1.0
        finally:
            group.slaves[0].resume()
    wait_for(
        lambda: scrape(group.master.http_address).values("habroker_ha_slave_lag_seconds") == [0],
        what="the slave to catch up",
    )
