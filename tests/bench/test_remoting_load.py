"""Smoke tests of the remoting load generator (bench/loadgen.py) and the RocketMQ peer's path.

The frames the benchmark sends must be stored by both brokers: habroker on its client port, and
a real Java RocketMQ 4.9.7 broker (in a private network namespace). Speed is not asserted; what
is asserted is that every request was answered SUCCESS and that the messages are in the queues.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from habroker.local import LocalGroup

from bench import common, loadgen, rocketmq, servers

BODY = common.payload()


def _job(port: int, batch: int, producers: int = 2) -> loadgen.Job:
    return loadgen.Job(
        "remoting",
        port,
        [loadgen.remoting_send(servers.TOPIC, q, BODY, batch) for q in range(producers)],
        batch,
        duration=0.5,
        warmup=0.05,
        processes=producers,
        timeout=20,
    )


def _queue_offsets(group: LocalGroup) -> dict[int, int]:
    url = f"http://{group.master.http_address}/v1/topics/{servers.TOPIC}/offsets"
    with urllib.request.urlopen(url, timeout=10) as resp:
        data = json.load(resp)
    return {int(q): int(v["maxOffset"]) for q, v in data["queues"].items()}


def test_remoting_frames_decode_and_code() -> None:
    """A frame's response code is read from JSON and ROCKETMQ-serialized headers alike."""
    from habroker.remoting.command import RemotingCommand, SerializeType

    for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
        req = RemotingCommand.request(310, {"a": "g"}, b"x", serialize_type=st)
        for code in (0, 1, 12, 207):
            frame = req.response(code, remark="r").encode_bytes()
            assert loadgen.remoting_code(frame) == code
    one = loadgen.remoting_send("t", 3, BODY, 1)
    many = loadgen.remoting_send("t", 3, BODY, 32)
    assert b'"code":310' in one and b'"code":320' in many
    assert len(many) > 32 * len(BODY) > len(one)


@pytest.mark.timeout(180)
def test_remoting_load_against_habroker(tmp_path: Path) -> None:
    """Batch 1 and 32 over habroker's client port: every request SUCCESS, every message stored."""
    with servers.habroker_group(tmp_path / "g", "ASYNC", **rocketmq.STORE) as group:
        port = int(group.master.config["listenPort"])
        before = sum(_queue_offsets(group).values())
        stored = 0
        for batch in (1, 32):
            result = loadgen.run(_job(port, batch))
            assert result["requests"] > 0 and result["not_ok"] == 0, result
            stored += result["messages"]
        # the warm-up's requests are stored too: at least what was counted
        after = sum(_queue_offsets(group).values())
        assert after - before >= stored > 0


def _state(pid: int) -> str:
    """The process state letter of /proc/<pid>/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


@pytest.mark.timeout(180)
def test_other_groups_are_paused_only_while_one_is_measured(tmp_path: Path) -> None:
    """others_paused stops every process of the other groups, not the measured one's, and
    resumes them: the paused pair then still takes writes and replicates them."""
    with servers.habroker_group(tmp_path / "g", "ASYNC", **rocketmq.STORE) as group:
        pids = [b.proc.pid for b in group.brokers if b.proc is not None]
        run = rocketmq.Running("ASYNC", group, 0, 0, None, pids={"habroker": pids})
        with rocketmq.others_paused(run, "habroker") as paused:
            assert paused == [] and {_state(p) for p in pids} != {"T"}
        with rocketmq.others_paused(run, "rocketmq") as paused:
            assert paused == ["habroker"]
            assert {_state(p) for p in pids} == {"T"}
        deadline = time.monotonic() + 10
        while {_state(p) for p in pids} & {"T", "t"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not {_state(p) for p in pids} & {"T", "t"}
        result = loadgen.run(_job(int(group.master.config["listenPort"]), 32))
        assert result["requests"] > 0 and result["not_ok"] == 0, result
        servers.habroker_reset(group)  # waits for the slave to have it all
        master, slave = servers.habroker_offsets(group)
        assert master == slave > 0


@pytest.mark.timeout(180)
def test_refused_requests_are_counted_by_their_code(tmp_path: Path) -> None:
    """A SYNC master without its slave answers SLAVE_NOT_AVAILABLE (11): the load generator
    counts such answers apart from the SUCCESS ones, by code, and keeps one answer's header."""
    with servers.habroker_group(tmp_path / "g", "SYNC", **rocketmq.STORE) as group:
        group.slaves[0].stop()
        deadline = time.monotonic() + 20
        while group.master.status()["master"]["connectionCount"] and time.monotonic() < deadline:
            time.sleep(0.05)
        result = loadgen.run(_job(int(group.master.config["listenPort"]), 1, producers=1))
    assert result["requests"] > 0 and result["messages"] == 0, result
    assert result["not_ok"] == result["requests"]
    assert result["not_ok_codes"] == {"11": result["requests"]}
    assert '"code":11' in result["not_ok_sample"]


@pytest.mark.timeout(300)
def test_remoting_load_against_java_broker(tmp_path: Path) -> None:
    """The same frames against a real RocketMQ 4.9.7 master (no slave) in a private namespace:
    every request answered SUCCESS, and check_accepted's one-shot sends too."""
    from tests.interop import rocketmq_java as rmq

    rmq.ensure_installed([rocketmq.VERSION])
    with rmq.NetNS(tmp_path / "ns") as ns:
        rmq.JavaNameServer(ns, tmp_path / "namesrv", port=rocketmq.NAMESRV_PORT).start()
        spec = rmq.BrokerSpec(
            role="ASYNC_MASTER",
            listen_port=rocketmq.MASTER_PORT,
            namesrv_addr=f"127.0.0.1:{rocketmq.NAMESRV_PORT}",
            extra={**rocketmq.STORE, **rocketmq.BROKER_EXTRA},
        )
        master = rmq.JavaBroker(ns, rocketmq.VERSION, tmp_path / "master", spec).start()

        def drive() -> list[dict[str, object]]:
            for batch in (1, 32):
                for queue in range(servers.QUEUES):
                    frame = loadgen.remoting_send(servers.TOPIC, queue, BODY, batch)
                    code, answer = rocketmq._invoke(rocketmq.MASTER_PORT, frame)
                    assert code == 0, answer[:400]
            out = []
            for batch in (1, 32):
                result = loadgen.run(_job(rocketmq.MASTER_PORT, batch))
                out.append({k: v for k, v in result.items() if k != "latencies_ns"})
            return out

        for result in ns.call(drive, timeout=120):
            assert result["requests"] > 0 and result["not_ok"] == 0, result  # type: ignore[operator]
        status = rmq.topic_status(
            rmq.run_mqadmin(
                ns,
                rocketmq.VERSION,
                "topicStatus",
                "-n",
                f"127.0.0.1:{rocketmq.NAMESRV_PORT}",
                "-t",
                servers.TOPIC,
            )
        )
        assert sum(q.max_offset for q in status) > 0, status
        master.stop()
