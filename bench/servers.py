"""The systems under test, started and stopped by PID: habroker groups and a Redis pair.

habroker: a master and one slave (``habroker.local.LocalGroup``: real ``habroker serve``
processes on 127.0.0.1, each with its own store directory). Redis: Debian's ``redis-server``,
a master and a replica on free 127.0.0.1 ports with their own directories, AOF on with
``appendfsync everysec``, RDB snapshots off: never the system service.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from habroker.local import LocalGroup

from bench import common
from bench.loadgen import resp_command

TOPIC = "bench"
QUEUES = 8


# -- habroker -----------------------------------------------------------------------------------
@contextlib.contextmanager
def habroker_group(root: Path, mode: str, **config: Any) -> Iterator[LocalGroup]:
    """A running master + slave (``mode`` SYNC or ASYNC) with topic ``bench`` created."""
    group = LocalGroup(root, slaves=1, mode=mode, fileReservedTime=0, **config)
    try:
        group.master.start()
        assert group.master.proc is not None
        common.register(group.master.proc)
        for slave in group.slaves:
            slave.start()
            assert slave.proc is not None
            common.register(slave.proc)
        code, body = group.master.request(
            "POST",
            "/v1/topics",
            {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES},
        )
        if code not in (200, 201):
            raise RuntimeError(f"cannot create topic: {code} {body}")
        wait_slave_connected(group)
        yield group
    finally:
        for broker in reversed(group.brokers):
            common.stop(broker.proc)


def wait_slave_connected(group: LocalGroup, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if group.master.status()["master"]["connectionCount"] >= len(group.slaves):
            return
        time.sleep(0.05)
    raise TimeoutError(f"slave not connected after {timeout}s:\n{group.slaves[0].tail_log()}")


def habroker_offsets(group: LocalGroup) -> tuple[int, int]:
    """(master max offset, slave max offset) in commit-log bytes."""
    return group.master.status()["maxOffset"], group.slaves[0].status()["maxOffset"]


def habroker_reset(group: LocalGroup, timeout: float = 60.0) -> None:
    """Between measurements: let the slave catch up, then drop old commit-log files."""
    with contextlib.suppress(TimeoutError):  # the lag figures tell; never stop a run for it
        group.wait_replicated(timeout)
    for broker in group.brokers:
        broker.request("POST", "/v1/admin/clean-expired", timeout=60)


# -- Redis --------------------------------------------------------------------------------------
def redis_available() -> bool:
    return shutil.which("redis-server") is not None


class RedisClient:
    """A tiny blocking RESP client for control commands (the load uses :mod:`bench.loadgen`)."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def call(self, *args: str | bytes) -> Any:
        self.sock.sendall(resp_command(*args))
        return self._reply()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(f"redis error: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buf) < size + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("redis closed the connection")
                self.buf += chunk
            data, self.buf = self.buf[:size], self.buf[size + 2 :]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected RESP reply {line!r}")

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section).decode()
        out = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                out[key] = value
        return out

    def close(self) -> None:
        self.sock.close()


class RedisPair:
    def __init__(self, master_port: int, replica_port: int, version: str) -> None:
        self.master_port = master_port
        self.replica_port = replica_port
        self.version = version

    def offsets(self) -> tuple[int, int]:
        """(master_repl_offset, replica's own processed offset)."""
        m = RedisClient(self.master_port)
        r = RedisClient(self.replica_port)
        try:
            master = int(m.info("replication")["master_repl_offset"])
            replica = int(r.info("replication")["slave_repl_offset"])
        finally:
            m.close()
            r.close()
        return master, replica

    def reset(self, keys: list[str], timeout: float = 60.0) -> None:
        """Between measurements: wait for the replica, drop the streams."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            master, replica = self.offsets()
            if replica >= master:
                break
            time.sleep(0.05)
        c = RedisClient(self.master_port)
        try:
            if keys:
                c.call("DEL", *keys)
        finally:
            c.close()


def _start_redis(root: Path, port: int, replicaof: int | None) -> subprocess.Popen[bytes]:
    root.mkdir(parents=True, exist_ok=True)
    args = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "yes",
        "--dir",
        str(root),
        "--daemonize",
        "no",
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--logfile",
        str(root / "redis.log"),
        # a replica that falls behind under flat-out load must lag, not be cut off and resynced
        "--client-output-buffer-limit",
        "replica 0 0 0",
    ]
    if replicaof is not None:
        args += ["--replicaof", "127.0.0.1", str(replicaof)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    common.register(proc)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}; see {root}/redis.log")
        try:
            c = RedisClient(port, timeout=1)
            try:
                if c.call("PING") == "PONG":
                    return proc
            finally:
                c.close()
        except (OSError, RuntimeError):
            time.sleep(0.05)
    common.stop(proc)
    raise TimeoutError(f"redis-server on port {port} did not answer PING")


@contextlib.contextmanager
def redis_pair(root: Path) -> Iterator[RedisPair]:
    """A running Redis master + replica (link up) on 127.0.0.1."""
    master_port, replica_port = common.free_port(), common.free_port()
    master = replica = None
    try:
        master = _start_redis(root / "master", master_port, None)
        replica = _start_redis(root / "replica", replica_port, master_port)
        deadline = time.monotonic() + 30
        c = RedisClient(master_port)
        try:
            version = c.info("server")["redis_version"]
            while True:
                info = c.info("replication")
                if info.get("connected_slaves") == "1" and "online" in info.get("slave0", ""):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"redis replica not online: {info}")
                time.sleep(0.05)
        finally:
            c.close()
        yield RedisPair(master_port, replica_port, version)
    finally:
        common.stop(replica)
        common.stop(master)
