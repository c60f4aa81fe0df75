"""The broker's ``/metrics`` through prometheus_client, one registry per broker.

Counters the hot paths bump stay plain ints (one event-loop thread; the RocketMQ admin
commands read them too) and, with every gauge, are read from the broker's live state by one
collector at scrape time, so a scrape costs nothing between scrapes. Latencies are
histograms observed where the work happens. Several brokers run in one process in tests,
hence a registry per broker rather than the library's global one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from habroker.config import BrokerRole
from habroker.store.commit_log import disk_used_ratio

if TYPE_CHECKING:
    from habroker.broker import BrokerController
    from habroker.dledger.message_store import DLedgerMessageStore

LABELS = ("broker", "brokerId")
# produce waits for SYNC_FLUSH / SYNC_MASTER acks up to syncFlushTimeout (5 s by default)
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
MASTER_ROLES = (BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER)


class BrokerStats:
    """Monotonic counters updated on the hot paths, the latency histograms, and the registry."""

    def __init__(self) -> None:
        self.put_messages = 0
        self.put_bytes = 0
        self.put_requests = 0
        self.pull_messages = 0
        self.pull_bytes = 0
        self.pull_requests = 0
        self.put_status: Counter[str] = Counter()
        self.request_errors: Counter[str] = Counter()
        self.acl_refused = 0  # remoting requests the ACL refused (aclEnable)
        self.registry = CollectorRegistry()
        self._children: dict[tuple[Histogram, tuple[str, str]], Histogram] = {}
        self.produce_latency = self._histogram(
            "habroker_produce_latency_seconds",
            "Produce requests, store append to answer (flush and SYNC waits included).",
        )
        self.pull_latency = self._histogram(
            "habroker_pull_latency_seconds",
            "Pull requests served from the store (long-polling hold time excluded).",
        )
        self.sync_wait = self._histogram(
            "habroker_sync_wait_seconds",
            "SYNC_MASTER producers waiting for a slave's acknowledgement.",
        )

    def observe(self, histogram: Histogram, labels: tuple[str, str], seconds: float) -> None:
        """One latency sample. The labelled child is looked up once per label pair: the
        client's ``labels()`` validates and takes a lock on every call, on every request."""
        key = (histogram, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = histogram.labels(*labels)
        child.observe(seconds)

    def count_acl_refusal(self) -> None:
        self.acl_refused += 1

    def _histogram(self, name: str, help_text: str) -> Histogram:
        return Histogram(name, help_text, LABELS, registry=self.registry, buckets=LATENCY_BUCKETS)


def exposition(broker: BrokerController, accept: str) -> tuple[bytes, str]:
    """The scrape body and its Content-Type, in the format the scraper's Accept asks for."""
    encoder, content_type = choose_encoder(accept)
    return encoder(broker.stats.registry), content_type


class BrokerCollector(Collector):
    """Counters and gauges read from a broker at scrape time."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def collect(self) -> Iterable[Metric]:
        return list(self._families())

    def _families(self) -> Iterator[Metric]:
        broker = self.broker
        labels = [broker.config.brokerName, str(broker.config.brokerId)]
        fams = _Families(labels)
        yield from self._store(fams)
        yield from self._counters(fams)
        yield from self._replicas(fams)
        status = broker.status()
        if "master" in status:
            yield from self._master(fams, status["master"])
        if "slave" in status:
            yield from self._slave(fams, status["slave"])
        if broker.role in MASTER_ROLES:
            yield self._consumer_lag(fams)
        if broker.dledger_store is not None:
            yield from self._dledger(fams, broker.dledger_store)

    def _store(self, f: _Families) -> Iterator[Metric]:
        store = self.broker.store
        cfg = self.broker.config
        yield f.gauge(
            "habroker_commitlog_max_offset",
            "Commit-log max physical offset (bytes).",
            store.max_phy_offset,
        )
        yield f.gauge(
            "habroker_commitlog_min_offset",
            "Commit-log min physical offset (bytes).",
            store.min_phy_offset,
        )
        yield f.gauge(
            "habroker_commitlog_flushed_offset",
            "Commit-log offset known to be on disk.",
            store.flushed_offset,
        )
        yield f.gauge(
            "habroker_dispatched_offset",
            "Commit-log offset indexed into consume queues.",
            store.dispatched_offset,
        )
        yield f.gauge(
            "habroker_store_disk_used_ratio",
            "Used fraction (0-1) of the file system holding the commit log.",
            disk_used_ratio(store.commit_log.queue.directory) / 100.0,
        )
        yield f.gauge(
            "habroker_store_disk_max_used_ratio",
            "diskMaxUsedSpaceRatio as a fraction: above it the oldest commit-log files go.",
            cfg.diskMaxUsedSpaceRatio / 100.0,
        )

    def _counters(self, f: _Families) -> Iterator[Metric]:
        s = self.broker.stats
        yield f.counter("habroker_put_requests", "Produce requests stored.", s.put_requests)
        yield f.counter("habroker_put_messages", "Messages stored.", s.put_messages)
        yield f.counter("habroker_put_bytes", "Commit-log bytes written by produce.", s.put_bytes)
        yield f.labelled(
            CounterMetricFamily,
            "habroker_put_status",
            "Produce results by status.",
            "status",
            sorted(s.put_status.items()),
        )
        yield f.counter("habroker_pull_requests", "Pull requests served.", s.pull_requests)
        yield f.counter("habroker_pull_messages", "Messages returned by pulls.", s.pull_messages)
        yield f.counter("habroker_pull_bytes", "Bytes returned by pulls.", s.pull_bytes)
        yield f.labelled(
            CounterMetricFamily,
            "habroker_request_errors",
            "Refused requests by error code.",
            "error",
            sorted(s.request_errors.items()),
        )
        yield f.counter(
            "habroker_acl_refused_requests",
            "Remoting requests refused by the ACL (aclEnable: no or unknown accessKey, bad "
            "signature, missing permission).",
            s.acl_refused,
        )
        auth = self.broker.ha_auth
        yield f.counter(
            "habroker_ha_auth_refused",
            "HA connections closed because the HA handshake failed (haAuthSecretFile: a peer "
            "without the secret, a wrong secret, a classic peer, silence).",
            auth.refused if auth is not None else 0,
        )

    def _replicas(self, f: _Families) -> Iterator[Metric]:
        broker = self.broker
        replicas = broker.replicas
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_role",
            "1 for the broker's current role (ASYNC_MASTER, SYNC_MASTER, SLAVE).",
            "role",
            [(broker.role.value, 1)],
        )
        yield f.gauge(
            "habroker_master",
            "1 while this broker is a master that accepts writes (master role, not fenced).",
            int(broker.role in MASTER_ROLES and not replicas.fenced),
        )
        yield f.gauge(
            "habroker_epoch", "The highest epoch this broker was told.", replicas.known_epoch
        )
        yield f.gauge(
            "habroker_fenced", "1 while writes are refused (fenced).", int(replicas.fenced)
        )
        yield f.counter(
            "habroker_truncated_bytes",
            "Commit-log bytes cut because a new master never had them (controller mode).",
            replicas.truncated_bytes_total,
        )
        yield f.gauge(
            "habroker_slave_diverged",
            "1 while this slave refuses a master whose history is not its own.",
            int(replicas.divergence is not None),
        )

    def _master(self, f: _Families, m: dict[str, Any]) -> Iterator[Metric]:
        yield f.gauge(
            "habroker_ha_push2slave_max_offset",
            "Highest offset any slave acknowledged.",
            m["push2SlaveMaxOffset"],
        )
        yield f.gauge("habroker_ha_connections", "Connected slaves.", m["connectionCount"])
        yield f.gauge(
            "habroker_ha_in_sync_slaves", "Slaves within haMaxGapNotInSync.", m["inSyncSlaves"]
        )
        yield f.gauge(
            "habroker_ha_waiting_producers",
            "SYNC_MASTER producers waiting for a slave's acknowledgement now.",
            m["waitingProducers"],
        )
        yield f.counter(
            "habroker_ha_sync_timeouts",
            "SYNC_MASTER waits that ended without an acknowledgement (FLUSH_SLAVE_TIMEOUT).",
            m["syncTimeoutTotal"],
        )
        yield f.counter(
            "habroker_ha_slave_not_available",
            "SYNC_MASTER puts answered SLAVE_NOT_AVAILABLE (no slave in sync).",
            m["slaveNotAvailableTotal"],
        )
        yield f.counter(
            "habroker_ha_refused_connections",
            "HA connections closed at accept because haMaxConnections were open.",
            m["refusedConnectionsTotal"],
        )
        slaves: list[dict[str, Any]] = m["slaves"]
        for name, key, help_text in (
            ("habroker_ha_slave_ack_offset", "ackOffset", "Offset the slave acknowledged."),
            ("habroker_ha_slave_lag_bytes", "lagBytes", "Master max offset minus the slave's ack."),
            ("habroker_ha_slave_in_sync", "inSync", "1 if the slave is in sync."),
            (
                "habroker_ha_slave_last_report_age_ms",
                "lastReportAgeMs",
                "Age of the slave's last report.",
            ),
        ):
            yield f.labelled(
                GaugeMetricFamily,
                name,
                help_text,
                "slave",
                [(sl["address"], int(sl[key] or 0)) for sl in slaves],
            )
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_ha_slave_lag_seconds",
            "Age of the oldest message the slave has not acknowledged (0 when caught up).",
            "slave",
            [(sl["address"], self._lag_seconds(sl)) for sl in slaves],
        )

    def _lag_seconds(self, slave: dict[str, Any]) -> float:
        if not slave["lagBytes"]:
            return 0.0
        stamp = self.broker.store.store_time_at(int(slave["ackOffset"]))
        if stamp is None:  # behind the commit log's start: as old as the oldest record kept
            stamp = self.broker.store.store_time_at(self.broker.store.min_phy_offset)
        return max(0.0, time.time() - stamp / 1000.0) if stamp is not None else 0.0

    def _slave(self, f: _Families, sl: dict[str, Any]) -> Iterator[Metric]:
        yield f.gauge(
            "habroker_ha_connected",
            "1 while connected to the master.",
            int(bool(sl.get("connected"))),
        )
        seen = sl.get("masterMaxOffsetSeen") or 0
        yield f.gauge(
            "habroker_ha_master_lag_bytes",
            "Latest master offset seen minus local max offset.",
            max(0, seen - self.broker.store.max_phy_offset),
        )
        yield f.counter(
            "habroker_ha_reconnects",
            "Reconnections to the master.",
            int(sl.get("reconnects") or 0),
        )

    def _dledger(self, f: _Families, store: DLedgerMessageStore) -> Iterator[Metric]:
        """A DLedger peer's view of its group; the per-peer series only on the leader, the one
        peer that knows the others' match indexes (what `kubectl get bg` shows per peer)."""
        server = store.dledger
        d = server.status()
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_dledger_role",
            "1 for the DLedger role (LEADER, FOLLOWER, CANDIDATE).",
            "role",
            [(d["role"], 1)],
        )
        yield f.gauge("habroker_dledger_term", "The DLedger term this peer is in.", d["term"])
        for name, key, help_text in (
            ("ledger_begin_index", "ledgerBeginIndex", "First entry index kept (-1: none)."),
            ("ledger_end_index", "ledgerEndIndex", "Last entry index in the log (-1: none)."),
            ("committed_index", "committedIndex", "Last entry index a quorum holds."),
        ):
            yield f.gauge(f"habroker_dledger_{name}", help_text, d[key])
        yield f.counter(
            "habroker_dledger_elections_won",
            "Times this peer became leader.",
            d["elections"],
        )
        leading = d["role"] == "LEADER"
        yield f.gauge(
            "habroker_dledger_pending_appends",
            "Leader only: appended entries whose producers wait for a quorum.",
            len(server.pusher.pending) if leading else 0,
        )
        others = [p for p in d["peers"] if not p["self"]] if leading else []
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_dledger_peer_match_index",
            "Leader only: the last entry index each follower acknowledged in this term.",
            "peer",
            [(p["id"], p["matchIndex"]) for p in others],
        )
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_dledger_peer_lag_entries",
            "Leader only: the leader's last entry index minus the follower's match index.",
            "peer",
            [(p["id"], p["lagEntries"] or 0) for p in others],
        )
        yield f.labelled(
            GaugeMetricFamily,
            "habroker_dledger_peer_live",
            "Leader only: 1 while the follower answers heartbeats (0 before its first answer, "
            "after a refused connection or a heartbeat unanswered within 3 s).",
            "peer",
            [(p["id"], int(bool(p["live"]))) for p in others],
        )

    def _consumer_lag(self, f: _Families) -> Metric:
        """Messages each group has yet to consume per queue: the queue's max offset minus the
        group's committed offset (masters only: slaves hold copies of the same offsets)."""
        store = self.broker.store
        fam = GaugeMetricFamily(
            "habroker_consumer_group_lag",
            "Messages not yet consumed: queue max offset minus the group's committed offset.",
            labels=[*LABELS, "group", "topic", "queueId"],
        )
        for key, queues in sorted(self.broker.offsets.table.items()):
            topic, _, group = key.partition("@")
            for queue_id, committed in sorted(queues.items()):
                lag = max(0, store.max_offset_in_queue(topic, queue_id) - committed)
                fam.add_metric([*f.labels, group, topic, str(queue_id)], lag)
        return fam


class _Families:
    """Metric families that all carry the broker's (broker, brokerId) labels."""

    def __init__(self, labels: list[str]) -> None:
        self.labels = labels

    def gauge(self, name: str, help_text: str, value: float) -> Metric:
        fam = GaugeMetricFamily(name, help_text, labels=LABELS)
        fam.add_metric(self.labels, value)
        return fam

    def counter(self, name: str, help_text: str, value: float) -> Metric:
        fam = CounterMetricFamily(name, help_text, labels=LABELS)
        fam.add_metric(self.labels, value)
        return fam

    def labelled(
        self,
        kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
        name: str,
        help_text: str,
        label: str,
        samples: Iterable[tuple[str, float]],
    ) -> Metric:
        fam = kind(name, help_text, labels=[*LABELS, label])
        for value_label, value in samples:
            fam.add_metric([*self.labels, value_label], value)
        return fam
