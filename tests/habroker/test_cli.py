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
