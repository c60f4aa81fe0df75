"""failOnDataLoss: offsets that retention removed fail the query, or are skipped with a warning.

Retention is made to happen now: the master's older commit-log files get an mtime far past
fileReservedTime, then ``POST /v1/admin/clean-expired`` (the broker's HTTP admin API) deletes
them (queues follow).
"""

import os
import time

import pytest
from brokergroup_spark.group import Group
from habroker.client.sync import BrokerConnection
from habroker.local import LocalGroup

from tests.brokergroup_spark.conftest import produce, read, wait_for


@pytest.fixture(scope="module")
def expired(tmp_path_factory):
    """A group whose master lost the head of topic ``old`` to retention."""
    group = LocalGroup(
        tmp_path_factory.mktemp("loss"),
        mappedFileSizeCommitLog=65536,
        maxMessageSize=16 * 1024,
    ).start()
    try:
        produce(group, "old", queues=1, per_queue=2000, size=100, chunk=100)  # ~380 KB: 6 files
        # retention only deletes files that are flushed (and dispatched)
        wait_for(
            lambda: (st := group.master.status())["flushedOffset"] >= st["maxOffset"],
            what="the master's flush",
        )
        files = sorted((group.master.root / "store" / "commitlog").iterdir())
        past = time.time() - 100 * 3600  # fileReservedTime defaults to 72 h
        for path in files[:-1]:
            os.utime(path, (past, past))
        cleaned = BrokerConnection(group.master.http_address).json(
            "POST", "/v1/admin/clean-expired"
        )
        assert cleaned["deletedFiles"] >= 1, cleaned
        with Group(group.master.address) as client:
            low, high = client.bounds(("old",))[("old", 0)]
        assert 0 < low < high == 2000
        yield group, low
    finally:
        group.stop()


def test_fail_on_data_loss_true_fails_with_a_clear_message(spark, expired):
    group, low = expired
    df = read(spark, group, "old", startingOffsets='{"old": {"0": 0}}')
    with pytest.raises(Exception, match=rf"offsets 0\.\.{low - 1} can no longer be read"):
        df.count()


def test_fail_on_data_loss_false_skips_what_is_gone(spark, expired, caplog):
    group, low = expired
    df = read(spark, group, "old", startingOffsets='{"old": {"0": 0}}', failOnDataLoss="false")
    offsets = sorted(r.queueOffset for r in df.select("queueOffset").collect())
    assert offsets == list(range(low, 2000))


def test_earliest_starts_at_what_is_left(spark, expired):
    group, low = expired
    assert read(spark, group, "old").count() == 2000 - low


def test_client_reports_loss_inside_a_range(expired):
    group, low = expired
    with Group(group.master.address) as client:
        with pytest.raises(RuntimeError, match="failOnDataLoss=false"):
            list(client.read_range("old", 0, 0, 2000))
        rows = sum(
            b.num_rows for b in client.read_range("old", 0, 0, 2000, fail_on_data_loss=False)
        )
    assert rows == 2000 - low
