"""A store whose disk fills up, on a real small file system (a tmpfs this test mounts).

Past diskSpaceWarningLevelRatio the broker refuses produces with a clear answer (HTTP 503
store_not_writable; SERVICE_NOT_AVAILABLE on the client port) instead of failing a write or
dying on a mapped page; every acknowledged message is still there; with
cleanFileForciblyEnable the oldest files go whatever their age and writes are taken again.
Run for a classic master and for a one-peer DLedger group (the same guard, DLedger's files).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from habroker.client import BrokerAPIError, BrokerGroupReader, OutgoingMessage, Producer
from habroker.local import LocalBroker, LocalGroup, free_port

DISK = 16 << 20
TOPIC = "full"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a {DISK >> 20} MiB tmpfs here: {mounted.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def used_percent(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * (usage.total - usage.free) / usage.total


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_full_disk_refuses_produces_keeps_what_was_acked_and_forced_cleaning_frees_it(
    small_disk: Path, tmp_path: Path, mode: str
) -> None:
    config: dict[str, Any] = {
        "storePathRootDir": str(small_disk),
        "mappedFileSizeCommitLog": 512 << 10,
        "mappedFileSizeConsumeQueue": 20 * 4096,
        "maxMessageSize": 64 * 1024,
        "cleanResourceInterval": 200,
        "cleanFileForciblyEnable": False,
        "autoCreateTopicEnable": True,
        "flushIntervalCommitLog": 100,
    }
    if mode == "dledger":
        config |= {
            "enableDLegerCommitLog": True,
            "dLegerPeers": f"n0-127.0.0.1:{free_port()}",
            "dLegerSelfId": "n0",
        }
    broker = LocalBroker(tmp_path / "broker", **config).start()
    try:
        acked: list[bytes] = []
        refused: BrokerAPIError | None = None
        with Producer(broker.http_address) as producer:
            for batch in range(800):  # 800 x 33 KiB: more than the disk
                bodies = [b"%06d-%04d" % (batch, i) + b"x" * 1000 for i in range(32)]
                try:
                    res = producer.send_batch(
                        TOPIC, [OutgoingMessage(b) for b in bodies], queue_id=0
                    )
                except BrokerAPIError as exc:
                    refused = exc
                    break
                assert res.status == "PUT_OK", res
                acked += bodies
                time.sleep(0.005)  # < 7 MB/s: the broker looks at the disk every 0.1 s
        print(f"{mode}: {len(acked)} acked, then refused at {used_percent(small_disk):.1f}% used")
        assert refused is not None, f"never refused; disk {used_percent(small_disk):.1f}% used"
        assert refused.status == 503 and refused.code == "store_not_writable", refused
        assert "diskSpaceWarningLevelRatio" in refused.message
        assert broker.running and 85 < used_percent(small_disk) <= 100
        with BrokerGroupReader(broker.http_address) as reader:
            stored: list[bytes] = []
            offset = 0
            while True:
                res = reader.pull(TOPIC, 0, offset, max_msgs=256)
                if res.status != "FOUND":
                    break
                stored += [m.body for m in res.messages]
                offset = res.next_begin_offset
        assert stored == acked, "an acknowledged message is missing or out of order"

        code, body = broker.request("PATCH", "/v1/admin/config", {"cleanFileForciblyEnable": True})
        assert code == 200, body
        deadline = time.monotonic() + 20
        while True:
            try:
                with Producer(broker.http_address) as producer:
                    res = producer.send_batch(TOPIC, [OutgoingMessage(b"after")], queue_id=0)
                break
            except BrokerAPIError as exc:
                assert exc.code == "store_not_writable", exc
                assert time.monotonic() < deadline, "forced cleaning never freed the disk"
                time.sleep(0.2)
        assert res.status == "PUT_OK"
        print(f"{mode}: forced cleaning brought the disk to {used_percent(small_disk):.1f}%")
        assert used_percent(small_disk) < 90
        assert "writes are refused until retention frees space" in broker.log_path.read_text()
    finally:
        broker.stop()


def test_a_slave_whose_disk_fills_cleans_forcibly_and_keeps_replicating(
    small_disk: Path, tmp_path: Path
) -> None:
    """A slave on a smaller disk than its master: it deletes its oldest files whatever their age
    once past diskSpaceCleanForciblyRatio, as a RocketMQ slave does, and keeps up with the
    master, byte for byte in what it still holds."""
    config: dict[str, Any] = {
        "mappedFileSizeCommitLog": 512 << 10,
        "mappedFileSizeConsumeQueue": 20 * 4096,
        "maxMessageSize": 64 * 1024,
        "cleanResourceInterval": 200,
        "autoCreateTopicEnable": True,
        "flushIntervalCommitLog": 100,
    }
    group = LocalGroup(tmp_path / "group", slaves=1, mode="ASYNC", **config)
    slave = group.slaves[0]
    slave.config["storePathRootDir"] = str(small_disk)
    group.start()
    try:
        with Producer(group.master.http_address) as producer:
            for batch in range(800):  # 800 x 33 KiB: more than the slave's disk
                bodies = [b"%06d-%04d" % (batch, i) + b"x" * 1000 for i in range(32)]
                res = producer.send_batch(TOPIC, [OutgoingMessage(b) for b in bodies], queue_id=0)
                assert res.status == "PUT_OK", res
                time.sleep(0.005)
        master_end = group.master.status()["maxOffset"]
        deadline = time.monotonic() + 60
        while True:
            status = slave.status()
            if status["maxOffset"] == master_end:
                break
            assert slave.running, slave.tail_log(40)
            assert time.monotonic() < deadline, (
                status["maxOffset"],
                master_end,
                slave.tail_log(40),
            )
            time.sleep(0.2)
        print(
            f"slave caught up to {master_end} with its disk {used_percent(small_disk):.1f}% "
            f"used; its log begins at {status['minOffset']}"
        )
        assert status["minOffset"] > 0, "nothing was cleaned"
        deadline = time.monotonic() + 20
        while used_percent(small_disk) >= 85:  # diskSpaceCleanForciblyRatio: cleaning goes on
            assert time.monotonic() < deadline, f"{used_percent(small_disk):.1f}% used"
            time.sleep(0.2)
        time.sleep(0.5)  # a pass that was deleting when the disk crossed the line is over
        mine = sorted((small_disk / "commitlog").iterdir())
        theirs = Path(group.master.config["storePathRootDir"]) / "commitlog"
        for path in mine:
            assert path.read_bytes() == (theirs / path.name).read_bytes(), path.name
    finally:
        group.stop()


def test_a_full_consume_queue_disk_refuses_produces_too(small_disk: Path, tmp_path: Path) -> None:
    """storePathCommitLog on one disk, the consume queues (storePathRootDir) on another that
    fills up (a ballast file here): produces are refused as for a full commit-log disk, and
    taken again once it has room."""
    broker = LocalBroker(
        tmp_path / "broker",
        storePathRootDir=str(small_disk),
        storePathCommitLog=str(tmp_path / "commitlog"),
        mappedFileSizeCommitLog=512 << 10,
        mappedFileSizeConsumeQueue=20 * 4096,
        autoCreateTopicEnable=True,
    ).start()
    ballast = small_disk / "ballast"
    try:
        with Producer(broker.http_address) as producer:
            assert producer.send(TOPIC, b"before", queue_id=0).status == "PUT_OK"
            room = shutil.disk_usage(small_disk)
            ballast.write_bytes(b"\0" * int(room.total * 0.95 - (room.total - room.free)))
            assert used_percent(small_disk) > 90
            time.sleep(0.2)  # the put path looks at the disks every 0.1 s
            with pytest.raises(BrokerAPIError) as refused:
                producer.send(TOPIC, b"refused", queue_id=0)
            assert refused.value.status == 503 and refused.value.code == "store_not_writable"
            assert str(small_disk) in broker.log_path.read_text()
            ballast.unlink()
            time.sleep(0.2)
            assert producer.send(TOPIC, b"after", queue_id=0).status == "PUT_OK"
    finally:
        ballast.unlink(missing_ok=True)
        broker.stop()
