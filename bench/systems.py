"""The systems one benchmark run compares, started once and shared by the benchmark modules.

``habroker_async`` and ``habroker_sync`` are master + slave groups (ASYNC_MASTER, SYNC_MASTER);
``redis`` is a Redis master + replica. Each measurement is built as a :class:`bench.loadgen.Job`
by :func:`produce_job`, so every module drives every system with the same lean client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from habroker.local import LocalGroup

from bench import common, loadgen, servers

# names used in results: what each one is
SYSTEMS = {
    "habroker_async": "habroker ASYNC_MASTER + slave, HTTP batch produce",
    "habroker_sync": "habroker SYNC_MASTER + slave, HTTP batch produce (waits for the slave)",
    "redis_pipelined": "Redis master + replica, XADD pipelined",
    "redis_wait": "Redis master + replica, XADD pipelined + WAIT 1",
}
REDIS_WAIT_MS = 5000  # as habroker's syncFlushTimeout


@dataclass
class Systems:
    groups: dict[str, LocalGroup] = field(default_factory=dict)
    redis: servers.RedisPair | None = None
    redis_keys: set[str] = field(default_factory=set)

    def has(self, system: str) -> bool:
        if system.startswith("redis"):
            return self.redis is not None
        return system.removeprefix("habroker_") in self.groups

    def group(self, system: str) -> LocalGroup:
        return self.groups[system.removeprefix("habroker_")]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in SYSTEMS.items() if self.has(k)}
        if self.redis is not None:
            out["redis_version"] = self.redis.version
        return out

    def reset(self, system: str) -> None:
        """After a measurement: replicas catch up, old data goes (disk and memory stay bounded)."""
        if system.startswith("redis"):
            if self.redis is not None:
                self.redis.reset(sorted(self.redis_keys))
                self.redis_keys.clear()
        else:
            servers.habroker_reset(self.group(system))


@contextlib.contextmanager
def started(
    root: Path, habroker_modes: tuple[str, ...] = ("async", "sync"), redis: bool = True
) -> Iterator[Systems]:
    """Start what is asked for (Redis only if installed); stop everything on the way out."""
    systems = Systems()
    with contextlib.ExitStack() as stack:
        for mode in habroker_modes:
            systems.groups[mode] = stack.enter_context(
                servers.habroker_group(root / f"habroker-{mode}", mode.upper())
            )
        if redis and servers.redis_available():
            systems.redis = stack.enter_context(servers.redis_pair(root / "redis"))
        yield systems


def produce_job(
    systems: Systems,
    system: str,
    batch: int,
    producers: int,
    settings: common.Settings,
    **overrides: Any,
) -> loadgen.Job:
    """``producers`` connections, each sending batches of ``batch`` 1 KiB messages to its own
    queue (habroker) or stream (Redis)."""
    body = common.payload()
    processes = min(producers, 4)
    if system.startswith("habroker"):
        port = int(systems.group(system).master.config["httpListenPort"])  # the HTTP API
        requests = [
            loadgen.http_produce(port, servers.TOPIC, i % servers.QUEUES, body, batch)
            for i in range(producers)
        ]
        job = loadgen.Job("http", port, requests, batch)
    else:
        assert systems.redis is not None
        wait = REDIS_WAIT_MS if system == "redis_wait" else None
        requests = []
        replies = batch
        for i in range(producers):
            key = f"bench:{i}"
            systems.redis_keys.add(key)
            data, replies = loadgen.resp_xadd(key, body, batch, wait)
            requests.append(data)
        job = loadgen.Job(
            "resp",
            systems.redis.master_port,
            requests,
            batch,
            replies_per_request=replies,
            expect_wait=wait is not None,
        )
    job.duration = settings.duration
    job.warmup = settings.warmup
    job.processes = processes
    for key, value in overrides.items():
        setattr(job, key, value)
    return job
