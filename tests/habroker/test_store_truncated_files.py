"""Store files cut short (a crash or a full disk mid-write), against a real broker process.

The last file of the commit log (or of a consume queue) shorter than its configured size is
padded with zeros and recovery cuts at its last whole record, as RocketMQ recovers a torn tail;
a short commit-log file that is *not* the last is refused in one log line naming the file and
the repair (docs/storage.md); a damaged consume queue is rebuilt from the commit log.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.request

import pytest
from habroker.client import Producer

from .storeutil import walk_file

CL_SIZE = 64 * 1024
CQ_SIZE = 20 * 40  # 40 units a file: a few files per queue
QUEUES = 2
CONFIG = {
    "maxMessageSize": 4096,
    "mappedFileSizeCommitLog": CL_SIZE,
    "mappedFileSizeConsumeQueue": CQ_SIZE,
    "defaultTopicQueueNums": QUEUES,
}


def body(i: int) -> bytes:
    return f"message-{i:05d}-".encode() + bytes([i % 251]) * 900


def produce(broker, start: int, count: int) -> list[tuple[int, int, int, int]]:
    """(index, queueId, queueOffset, commitLogOffset) of each message sent."""
    sent = []
    with Producer(broker.http_address) as producer:
        for i in range(start, start + count):
            result = producer.send("t", body(i), queue_id=i % QUEUES)
            assert result.ok, result
            sent.append((i, result.queue_id, result.queue_offset, result.commit_log_offset))
    return sent


def pull_all(broker, queue_id: int) -> dict[int, bytes]:
    """queueOffset -> body of every message the broker serves from a queue."""
    out: dict[int, bytes] = {}
    offset = 0
    while True:
        req = urllib.request.Request(
            f"http://{broker.http_address}/v1/topics/t/queues/{queue_id}/messages"
            f"?offset={offset}&max=1024",
            headers={"Accept": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = json.loads(resp.read())
        if answer["status"] != "FOUND":
            return out
        for m in answer["messages"]:
            out[m["queueOffset"]] = base64.b64decode(m["body"])
        offset = answer["nextBeginOffset"]


def start_filled(broker_factory, count: int = 150, crash: bool = False):
    broker = broker_factory(**CONFIG)
    assert broker.request("POST", "/v1/topics", {"topic": "t"})[0] == 201
    sent = produce(broker, 0, count)
    if crash:
        broker.kill()  # SIGKILL: the abort file stays, the next start recovers as after a crash
        assert (broker.root / "store" / "abort").exists()
    else:
        assert broker.stop() == 0  # a clean stop: only the cut below is damage
    return broker, sent


def commit_log_files(broker) -> list:
    return sorted((broker.root / "store" / "commitlog").iterdir())


def assert_no_traceback(broker) -> None:
    text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]


@pytest.mark.parametrize("crash", [False, True], ids=["after-a-clean-stop", "after-sigkill"])
def test_truncated_last_commit_log_file_is_padded_and_cut_at_its_last_whole_record(
    broker_factory, crash
):
    broker, sent = start_filled(broker_factory, crash=crash)
    files = commit_log_files(broker)
    assert len(files) >= 3
    last = files[-1]
    records, _ = walk_file(last.read_bytes())
    assert len(records) >= 4
    cut_record = records[-3]  # cut mid-record: it and the two after it are gone
    cut = cut_record[0] + cut_record[1] // 2
    os.truncate(last, cut)
    lost_from = int(last.name) + cut_record[0]

    broker.start()
    assert last.stat().st_size == CL_SIZE  # padded back to its size
    kept = [s for s in sent if s[3] < lost_from]
    lost = [s for s in sent if s[3] >= lost_from]
    assert len(lost) == 3 and len(kept) == len(sent) - 3
    for q in range(QUEUES):
        served = pull_all(broker, q)
        assert served == {qo: body(i) for i, qid, qo, _ in kept if qid == q}, q
    # new puts go on after the last whole record, at the queue offsets the lost ones had
    again = produce(broker, 1000, 6)
    assert min(s[3] for s in again) == lost_from
    for q in range(QUEUES):
        expected = {qo: body(i) for i, qid, qo, _ in kept + again if qid == q}
        assert sorted(expected) == list(range(len(expected))), q
        assert pull_all(broker, q) == expected
    assert broker.stop() == 0
    text = broker.log_path.read_text()
    padded = [line for line in text.splitlines() if last.name in line and "padding" in line]
    assert len(padded) == 1 and " WARNING " in padded[0], padded
    assert_no_traceback(broker)


def test_short_commit_log_file_that_is_not_the_last_is_refused_in_one_line(broker_factory):
    broker, sent = start_filled(broker_factory)
    files = commit_log_files(broker)
    damaged = files[1]
    records, _ = walk_file(damaged.read_bytes())
    cut = records[len(records) // 2][0] + 7
    os.truncate(damaged, cut)
    log_before = len(broker.log_path.read_text().splitlines())

    broker.start(wait=False)
    assert broker.proc is not None
    assert broker.proc.wait(30) != 0
    new_lines = broker.log_path.read_text().splitlines()[log_before:]
    errors = [line for line in new_lines if " ERROR " in line or " CRITICAL " in line]
    assert len(errors) == 1, new_lines
    assert str(damaged) in errors[0] and "docs/storage.md" in errors[0], errors
    assert files[2].name in errors[0]  # the files to move away are named
    assert_no_traceback(broker)
    assert damaged.stat().st_size == cut  # refused: nothing was changed

    # the documented repair: move the later files away, start; the damaged file is then the
    # last one and is cut at its last whole record
    backup = broker.root / "commitlog-after-damage"
    backup.mkdir()
    for path in files[2:]:
        shutil.move(path, backup / path.name)
    broker.start()
    lost_from = int(damaged.name) + records[len(records) // 2][0]
    kept = [s for s in sent if s[3] < lost_from]
    for q in range(QUEUES):
        assert pull_all(broker, q) == {qo: body(i) for i, qid, qo, _ in kept if qid == q}
    again = produce(broker, 1000, 4)
    assert min(s[3] for s in again) == lost_from
    assert_no_traceback(broker)


def test_truncated_consume_queue_files_are_rebuilt_from_the_commit_log(broker_factory):
    broker, sent = start_filled(broker_factory, count=240)  # 120 a queue: 3 files each
    cq0 = broker.root / "store" / "consumequeue" / "t" / "0"
    cq1 = broker.root / "store" / "consumequeue" / "t" / "1"
    files0 = sorted(cq0.iterdir())
    files1 = sorted(cq1.iterdir())
    assert len(files0) >= 3 and len(files1) >= 3
    os.truncate(files0[-1], 20 * 5 + 7)  # the last file of queue 0, mid-unit
    os.truncate(files1[0], 20 * 3 + 11)  # a file of queue 1 that is not its last

    broker.start()
    for path in (files0[-1], files1[0]):
        assert path.stat().st_size == CQ_SIZE
    for q in range(QUEUES):
        assert pull_all(broker, q) == {qo: body(i) for i, qid, qo, _ in sent if qid == q}, q
    again = produce(broker, 1000, 4)
    for i, qid, qo, _ in again:
        assert qo == len([s for s in sent if s[1] == qid]) + (i - 1000) // QUEUES
    assert broker.stop() == 0
    text = broker.log_path.read_text()
    assert any("rebuil" in line and "t-1" in line for line in text.splitlines()), text[-3000:]
    assert_no_traceback(broker)


def test_truncated_last_consume_queue_file_gets_its_lost_units_back(broker_factory):
    """Only queue 0 is cut: queue 1 indexes records past the cut, so re-dispatch must start
    where queue 0 now ends, not where the furthest queue does."""
    broker, sent = start_filled(broker_factory, count=240)
    files0 = sorted((broker.root / "store" / "consumequeue" / "t" / "0").iterdir())
    os.truncate(files0[-1], 20 * 5 + 7)

    broker.start()
    for q in range(QUEUES):
        assert pull_all(broker, q) == {qo: body(i) for i, qid, qo, _ in sent if qid == q}, q
    assert_no_traceback(broker)
