"""The CLI, run as a process, against a real ``habroker serve`` process over real sockets:
client commands on its listenPort (remoting), ``status`` on its httpListenPort."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pytest
from habroker.local import LocalBroker, free_port

from tests.habroker.metricsutil import scrape


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "habroker", *args], input=stdin, capture_output=True, timeout=60
    )


def one_clear_line(res: subprocess.CompletedProcess[bytes]) -> str:
    err = res.stderr.decode()
    assert res.returncode == 1, (res.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.fixture
def srv(broker_factory) -> LocalBroker:
    return broker_factory()


def test_produce_consume_status(srv):
    ns = ("--namesrv", srv.address)
    res = run("topic", "create", "cli", "--queues", "2", *ns)
    assert res.returncode == 0 and b"created topic cli (2 queues)" in res.stdout, res.stderr
    res = run("produce", *ns, "--topic", "cli", "--queue-id", "0", stdin=b"alpha\nbeta\ngamma\n")
    assert res.returncode == 0, res.stderr
    assert b'"SEND_OK": 3' in res.stderr
    res = run(
        "produce", *ns, "--topic", "cli", "--count", "500", "--size", "100", "--batch", "64",
        "--producers", "2", "--tags", "gen",
    )  # fmt: skip
    assert res.returncode == 0 and b"500 msgs" in res.stderr, res.stderr
    res = run(
        "consume", *ns, "--topic", "cli", "--group", "g", "--from", "earliest", "--count", "3",
        "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 3 and {r["brokerId"] for r in rows} == {0}
    q0 = [r["body"] for r in rows if r["queueId"] == 0]
    assert q0 == ["alpha", "beta", "gamma"][: len(q0)]
    assert all(len(r["msgId"]) == 32 and r["offsetMsgId"] != r["msgId"] for r in rows)
    # the group's progress was committed: the next run continues after what it saw
    again = run("consume", *ns, "--topic", "cli", "--group", "g", "--idle-timeout", "1")
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.splitlines()) == 503 - 3
    # a tag expression: only the generated messages carry "gen"
    tagged = run(
        "consume", *ns, "--topic", "cli", "--group", "t", "--tags", "gen", "--from", "earliest",
        "--idle-timeout", "1", "--no-commit",
    )  # fmt: skip
    assert len(tagged.stdout.splitlines()) == 500
    st = run("status", "--http", srv.http_address, "--json")
    assert json.loads(st.stdout)["role"] == "ASYNC_MASTER"
    assert b"role=ASYNC_MASTER" in run("status", "--http", srv.http_address).stdout


def test_missing_topic_is_one_line(srv):
    ns = ("--namesrv", srv.address)
    for args in (
        ("produce", *ns, "--topic", "missing"),
        ("consume", *ns, "--topic", "missing", "--group", "g"),
        ("topic", "stats", "missing", *ns),
    ):
        err = one_clear_line(run(*args, stdin=b"x\n"))
        assert "'missing' does not exist" in err and "habroker topic create missing" in err


def test_unreachable_broker_is_one_line():
    dead = f"127.0.0.1:{free_port()}"
    for args in (
        ("produce", "--topic", "t"),
        ("consume", "--topic", "t", "--group", "g"),
        ("topic", "list"),
        ("consumer", "progress", "--group", "g"),
    ):
        err = one_clear_line(run(*args, "--namesrv", dead, stdin=b"x\n"))
        assert "no name server answered" in err and dead in err
    err = one_clear_line(run("status", "--http", dead))
    assert "cannot reach" in err


def test_topic_and_cluster_commands(srv):
    ns = ("--namesrv", srv.address)
    assert run("topic", "create", "a1", "--queues", "3", *ns).returncode == 0
    assert run("topic", "create", "a2", *ns).returncode == 0
    listed = run("topic", "list", *ns).stdout.decode().split()
    assert {"a1", "a2"} <= set(listed)
    route = run("topic", "route", "a1", *ns).stdout.decode()
    assert "read=3" in route and f"0={srv.address}" in route
    run("produce", *ns, "--topic", "a1", "--queue-id", "2", stdin=b"x\ny\n")
    stats = run("topic", "stats", "a1", *ns).stdout.decode().splitlines()
    assert [line.split("\t")[:4] for line in stats[1:]] == [
        ["broker-a", "0", "0", "0"],
        ["broker-a", "1", "0", "0"],
        ["broker-a", "2", "0", "2"],
    ]
    cluster = run("cluster", "list", *ns).stdout.decode()
    assert cluster.strip() == f"DefaultCluster\tbroker-a\t0\t{srv.address}"
    res = run("topic", "delete", "a2", *ns)
    assert res.returncode == 0 and b"deleted topic a2" in res.stdout
    assert "a2" not in run("topic", "list", *ns).stdout.decode().split()
    err = one_clear_line(run("topic", "create", "bad name", *ns))
    assert "characters" in err


def test_progress_reset_and_view(srv):
    ns = ("--namesrv", srv.address)
    run("topic", "create", "pr", "--queues", "2", *ns)
    run("produce", *ns, "--topic", "pr", "--queue-id", "0", stdin=b"one\ntwo\nthree\n")
    time.sleep(0.05)
    boundary = dt.datetime.now().astimezone()
    time.sleep(0.05)
    run("produce", *ns, "--topic", "pr", "--queue-id", "1", stdin=b"four\n")
    consumed = run(
        "consume", *ns, "--topic", "pr", "--group", "cg", "--from", "earliest", "--format", "json",
        "--idle-timeout", "1",
    )  # fmt: skip
    rows = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(r["body"] for r in rows) == ["four", "one", "three", "two"]

    progress = run("consumer", "progress", "--group", "cg", "--topic", "pr", *ns, "--json")
    assert [(p["queueId"], p["consumerOffset"], p["lag"]) for p in json.loads(progress.stdout)] == [
        (0, 3, 0),
        (1, 1, 0),
    ]
    text = run("consumer", "progress", "--group", "cg", *ns).stdout.decode()
    assert "total lag: 0" in text

    res = run("offset", "reset", "--group", "cg", "--topic", "pr", "--to", "earliest", *ns)
    assert res.returncode == 0 and "pr\tbroker-a\t0\t3 -> 0" in res.stdout.decode()
    assert b"restart them" in res.stderr
    lag = json.loads(run("consumer", "progress", "--group", "cg", *ns, "--json").stdout)
    assert sum(p["lag"] for p in lag) == 4
    iso = boundary.isoformat()
    res = run("offset", "reset", "--group", "cg", "--topic", "pr", "--to", iso, *ns)
    assert "pr\tbroker-a\t0\t0 -> 3" in res.stdout.decode()
    assert "pr\tbroker-a\t1\t0 -> 0" in res.stdout.decode()
    again = run("consume", *ns, "--topic", "pr", "--group", "cg", "--idle-timeout", "1")
    assert again.stdout.decode().split() == ["four"]
    res = run("offset", "reset", "--group", "cg", "--topic", "pr", "--to", "latest", *ns)
    assert res.returncode == 0
    err = one_clear_line(
        run("offset", "reset", "--group", "cg", "--topic", "pr", "--to", "soon", *ns)
    )
    assert "is not a time" in err

    target = next(r for r in rows if r["body"] == "two")
    view = run("message", "view", "--id", target["offsetMsgId"], *ns)
    assert view.returncode == 0, view.stderr
    text = view.stdout.decode()
    assert "Body:             two" in text and f"Msg ID:           {target['msgId']}" in text
    as_json = json.loads(
        run("message", "view", "--id", target["offsetMsgId"], "--json", *ns).stdout
    )
    assert as_json["queueOffset"] == 1 and as_json["body"] == "two"
    err = one_clear_line(run("message", "view", "--id", "nothex", *ns))
    assert "not an offsetMsgId" in err


def test_help_lists_commands():
    out = run("--help").stdout.decode()
    for cmd in ("serve", "produce", "consume", "status", "topic", "consumer", "offset", "message"):
        assert cmd in out
    for sub in ("produce", "consume", "topic", "consumer", "offset", "message", "status"):
        res = run(sub, "--help")
        assert res.returncode == 0, res.stderr
    assert b"HABROKER_NAMESRV" in run("consume", "--help").stdout
    assert b"earliest|latest|TIME" in run("offset", "--help").stdout


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
    ns = ("--namesrv", broker.address)
    assert run("topic", "create", "zipped", "--queues", "1", *ns).returncode == 0
    res = run(
        "consume", *ns, "--topic", "zipped", "--group", "g", "--from", "earliest",
        "--count", "5", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["body"] for r in rows] == ["plain text"] + [ORIGINAL.decode()] * 4
    assert [r["sysFlag"] & 0x701 for r in rows] == [0, 0x1, 0x301, 0x101, 0x201]
    text = run(
        "consume", *ns, "--topic", "zipped", "--group", "g2", "--from", "earliest",
        "--count", "2",
    )  # fmt: skip
    assert text.stdout.decode() == "plain text\n" + ORIGINAL.decode() + "\n"


def test_client_commands_sign_for_an_acl_enabled_broker(broker_factory, tmp_path):
    """aclEnable (docs/security.md): unsigned commands are refused in one line; --access-key
    with the secret from HABROKER_SECRET_KEY signs them; the secret never reaches the output."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(
        "accounts:\n"
        "- {accessKey: cliAdmin1, secretKey: cli-admin-secret, admin: true}\n"
        "- {accessKey: cliWriter, secretKey: cli-writer-secret, defaultTopicPerm: PUB}\n"
    )
    srv = broker_factory(aclEnable=True, aclFile=str(acl))
    ns = ("--namesrv", srv.address)
    err = one_clear_line(run("topic", "create", "secured", *ns))
    assert "No accessKey is configured" in err, err

    def signed(key: str, secret: str, *args: str, stdin: bytes | None = None):
        env = {**os.environ, "HABROKER_SECRET_KEY": secret}
        return subprocess.run(
            [sys.executable, "-m", "habroker", *args, "--access-key", key],
            input=stdin, capture_output=True, timeout=60, env=env,
        )  # fmt: skip

    res = signed("cliAdmin1", "wrong-secret", "topic", "create", "secured", *ns)
    assert res.returncode == 1 and b"Check signature failed" in res.stderr, res.stderr
    res = signed("cliAdmin1", "cli-admin-secret", "topic", "create", "secured", *ns)
    assert res.returncode == 0 and b"created topic secured" in res.stdout, res.stderr
    res = signed("cliWriter", "cli-writer-secret", "topic", "create", "other", *ns)
    assert res.returncode == 1 and b"Need admin permission" in res.stderr, res.stderr
    res = signed("cliWriter", "cli-writer-secret", "produce", *ns, "--topic", "secured",
                 stdin=b"a\nb\n")  # fmt: skip
    assert res.returncode == 0 and b'"SEND_OK": 2' in res.stderr, res.stderr
    for out in (res.stdout, res.stderr, srv.log_path.read_bytes()):
        assert b"cli-writer-secret" not in out and b"cli-admin-secret" not in out
    # unsigned, wrong secret, not admin, and the producer's UNREGISTER_CLIENT at exit: it names
    # no consumer group, which RocketMQ checks as group "null" (cliWriter's default: DENY)
    refused = scrape(srv.http_address).values("habroker_acl_refused_requests_total")
    assert refused == [4.0], refused


def test_acl_enabled_without_a_file_does_not_start(broker_factory, tmp_path):
    srv = broker_factory(start=False, aclEnable=True, aclFile=str(tmp_path / "none.yml"))
    with pytest.raises(RuntimeError, match="exited"):
        srv.start(timeout=15)
    log = srv.log_path.read_text()
    assert "configuration error: cannot read the ACL file" in log and "Traceback" not in log, log


def test_a_broker_started_without_event_loop_runs_on_uvloop(srv):
    """uvloop is a dependency and ``--event-loop auto`` the default (bench/event_loop.py):
    a broker started as users start it says which loop it took, and serves on it."""
    res = run("status", "--http", srv.http_address)
    assert res.returncode == 0, res.stderr
    assert "event loop: uvloop" in srv.log_path.read_text()
