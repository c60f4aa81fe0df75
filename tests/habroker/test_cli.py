"""The CLI against a real broker process."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "habroker", *args], input=stdin, capture_output=True, timeout=60
    )


def test_produce_consume_status(broker_factory):
    broker = broker_factory()
    addr = broker.http_address
    assert run("topic", "create", "cli", "--queues", "2", "--broker", addr).returncode == 0
    res = run(
        "produce",
        "--broker",
        addr,
        "--topic",
        "cli",
        "--queue-id",
        "0",
        stdin=b"alpha\nbeta\ngamma\n",
    )
    assert res.returncode == 0, res.stderr
    assert b'"PUT_OK": 3' in res.stderr
    res = run(
        "produce",
        "--broker",
        addr,
        "--topic",
        "cli",
        "--count",
        "500",
        "--size",
        "100",
        "--batch",
        "64",
        "--producers",
        "2",
    )
    assert res.returncode == 0 and b"500 msgs" in res.stderr, res.stderr
    res = run(
        "consume",
        "--broker",
        addr,
        "--topic",
        "cli",
        "--group",
        "g",
        "--from",
        "earliest",
        "--count",
        "3",
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    q0 = [r["body"] for r in rows if r["queueId"] == 0]
    assert q0 == ["alpha", "beta", "gamma"][: len(q0)]
    # the group's progress was committed: the next run continues after what it saw
    again = run(
        "consume", "--broker", addr, "--topic", "cli", "--group", "g", "--idle-timeout", "0.5"
    )
    assert again.returncode == 0
    assert len(again.stdout.splitlines()) == 503 - 3
    st = run("status", "--broker", addr, "--json")
    assert json.loads(st.stdout)["role"] == "ASYNC_MASTER"
    assert b"role=ASYNC_MASTER" in run("status", "--broker", addr).stdout


def test_produce_to_unknown_topic_fails_clearly(broker_factory):
    broker = broker_factory()
    res = run("produce", "--broker", broker.http_address, "--topic", "missing", stdin=b"x\n")
    assert res.returncode == 1 and b"unknown_topic" in res.stderr


def test_status_of_nothing_fails_clearly():
    res = run("status", "--broker", "127.0.0.1:1")
    assert res.returncode == 1 and b"cannot reach" in res.stderr


def test_help_lists_commands():
    out = run("--help").stdout.decode()
    for cmd in ("serve", "produce", "consume", "status", "topic"):
        assert cmd in out


def test_consume_prints_bodies_a_java_producer_compressed(broker_factory, tmp_path):
    """Bodies stored compressed (sysFlag COMPRESSED, RocketMQ's own compressors' bytes) come
    out as the producer wrote them; the JSON keeps the stored sysFlag."""
    import asyncio

    from .storeutil import CQ_FILE_SIZE, FILE_SIZE, producer_records, store_holding
    from .test_compression import JAVA, ORIGINAL

    bodies = [(b"plain text", 0)] + [
        (JAVA[name][1], JAVA[name][0]) for name in ("ZLIB_4.9.7", "ZLIB", "LZ4", "ZSTD")
    ]
    root = tmp_path / "b" / "store"
    asyncio.run(store_holding(root, producer_records("zipped", 0, bodies)))
    broker = broker_factory(
        "b",
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=FILE_SIZE,
        mappedFileSizeConsumeQueue=CQ_FILE_SIZE,
    )
    addr = broker.http_address
    assert run("topic", "create", "zipped", "--queues", "1", "--broker", addr).returncode == 0
    res = run(
        "consume", "--broker", addr, "--topic", "zipped", "--group", "g", "--from", "earliest",
        "--count", "5", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["body"] for r in rows] == ["plain text"] + [ORIGINAL.decode()] * 4
    assert [r["sysFlag"] & 0x701 for r in rows] == [0, 0x1, 0x301, 0x101, 0x201]
    text = run(
        "consume", "--broker", addr, "--topic", "zipped", "--group", "g2", "--from", "earliest",
        "--count", "2",
    )  # fmt: skip
    assert text.stdout.decode() == "plain text\n" + ORIGINAL.decode() + "\n"
