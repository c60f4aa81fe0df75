"""SIGKILL a broker under produce load, restart it: every acknowledged message is there exactly
once, at the queue offset it was acknowledged with, in send order per queue."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from habroker.client import BrokerGroupReader, OutgoingMessage, Producer

QUEUES = 4
PRODUCERS = 4
BATCH = 8


def _produce(address: str, pid: int, acked: list, stop: threading.Event) -> None:
    """Send batches to queue pid % QUEUES until the broker dies; record what was acknowledged."""
    seq = 0
    try:
        with Producer(address, timeout=5) as producer:
            while not stop.is_set():
                msgs = [
                    OutgoingMessage(f"{pid}:{seq + i}".encode(), keys=str(pid))
                    for i in range(BATCH)
                ]
                res = producer.send_batch("crash", msgs, queue_id=pid % QUEUES)
                for i in range(BATCH):
                    acked.append((seq + i, res.queue_id, res.queue_offset + i))
                seq += BATCH
    except OSError:
        return  # the broker was killed mid-request: that request is simply not acknowledged


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sigkill_under_load_loses_no_acknowledged_message(broker_factory, flush):
    broker = broker_factory(
        mappedFileSizeCommitLog=128 * 1024,
        maxMessageSize=65536,
        flushDiskType=flush,
        mappedFileSizeConsumeQueue=20 * 512,
    )
    assert (
        broker.request(
            "POST",
            "/v1/topics",
            {"topic": "crash", "readQueueNums": QUEUES, "writeQueueNums": QUEUES},
        )[0]
        == 201
    )
    stop = threading.Event()
    acked: dict[int, list] = {pid: [] for pid in range(PRODUCERS)}
    threads = [
        threading.Thread(target=_produce, args=(broker.http_address, pid, acked[pid], stop))
        for pid in range(PRODUCERS)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while sum(len(a) for a in acked.values()) < 4000 and time.monotonic() < deadline:
        time.sleep(0.02)
    broker.kill()
    stop.set()
    for t in threads:
        t.join(10)
    total_acked = sum(len(a) for a in acked.values())
    assert total_acked >= 1000, "the load did not get going"
    assert (broker.root / "store" / "abort").exists(), "a killed broker leaves its abort file"

    broker.start()
    found: dict[tuple[int, int], bytes] = {}
    with BrokerGroupReader(broker.http_address) as reader:
        for qid in range(QUEUES):
            offset = 0
            while True:
                res = reader.pull("crash", qid, offset, max_msgs=512)
                if res.status != "FOUND":
                    break
                for m in res.messages:
                    assert m.queue_offset == offset, "queue offsets are dense and in order"
                    found[(qid, offset)] = m.body
                    offset += 1
                offset = res.next_begin_offset
    bodies = Counter(found.values())
    duplicates = [b for b, n in bodies.items() if n > 1]
    assert not duplicates, f"duplicated messages: {duplicates[:5]}"
    for pid, records in acked.items():
        for seq, qid, qoff in records:
            assert found.get((qid, qoff)) == f"{pid}:{seq}".encode(), (
                f"acknowledged {pid}:{seq} lost or moved"
            )
        # in send order within the queue
        mine = [
            int(body.split(b":")[1])
            for (q, _), body in sorted(found.items())
            if body.startswith(f"{pid}:".encode())
        ]
        assert mine == sorted(mine)
    # and the broker takes new writes after recovery
    with Producer(broker.http_address) as producer:
        assert producer.send("crash", b"after", queue_id=0).status == "PUT_OK"
