"""The failover controller over local habroker processes (no Kubernetes): what the integration
tests and ``bench/failover.py`` drive.

Pods are names for :class:`habroker.local.LocalBroker` processes on 127.0.0.1; a pod with a
dead or stopped process still exists (as a pod does), and deleting one restarts its process on
the same store (what a StatefulSet does with a deleted pod).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from habroker.local import LocalBroker, LocalGroup
from habroker.message import decode_record

from .brokerapi import BrokerAPI
from .election import Assignment, default_assignment
from .failover import FailoverController, MasterAddresses
from .spec import GroupSpec

GROUP = "bg"
MASTER = f"{GROUP}-master-0"


@dataclass
class LocalMembers:
    """Pods backed by LocalBroker processes."""

    pods: dict[str, LocalBroker]
    restarts: list[str] = field(default_factory=list)

    def http(self, pod: str) -> str | None:
        return self.pods[pod].http_address

    def master_addresses(self, pod: str) -> MasterAddresses | None:
        b = self.pods[pod]
        return MasterAddresses(b.ha_address, b.http_address, b.address)

    def present(self, pod: str) -> bool:
        return True

    def uid(self, pod: str) -> str | None:
        return None  # a process has no pod identity; loss is seen as unreachability

    async def restart(self, pod: str) -> bool:
        """What the kubelet does for a deleted pod: a new process on the same volume."""
        broker = self.pods[pod]
        if broker.running:
            broker.resume()
            broker.kill()
        self.restarts.append(pod)
        await asyncio.to_thread(broker.start)
        return True


class LocalController:
    """A FailoverController and the assignment it persisted (what .status.failover holds)."""

    def __init__(
        self, members: LocalMembers, brokers: BrokerAPI, spec: GroupSpec, logger: logging.Logger
    ) -> None:
        self.members = members
        self.assignment: Assignment = default_assignment(spec)
        self.persisted: list[Assignment] = []

        async def persist(a: Assignment) -> None:
            self.persisted.append(a)
            self.assignment = a

        self.ctl = FailoverController(
            brokers=brokers,
            spec=spec,
            members=members,
            persist=persist,
            delete_pod=members.restart,
            logger=logger,
        )

    async def tick(self) -> Assignment:
        self.assignment = await self.ctl.tick(self.assignment)
        return self.assignment

    async def switchover(self, pod: str) -> Assignment:
        self.assignment = await self.ctl.switchover(self.assignment, pod)
        return self.assignment

    async def until(
        self, predicate: Callable[[], Awaitable[bool]], within: float = 30.0, what: str = ""
    ) -> None:
        """Tick until ``predicate`` holds; AssertionError naming ``what`` after ``within`` s."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await self.tick()
            if await predicate():
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; events: {self.ctl.events[-8:]}")

    def broker(self, pod: str) -> LocalBroker:
        return self.members.pods[pod]

    @property
    def master(self) -> LocalBroker:
        return self.broker(self.assignment.master)

    async def serving(self) -> bool:
        """The assigned master takes writes, every slave is in its in-sync set, and the
        controller has recorded that set (only recorded members may be promoted)."""
        everyone = {self.assignment.broker_ids[p] for p in self.assignment.slaves}
        if set(self.assignment.in_sync) != everyone:
            return False
        try:
            status = await asyncio.to_thread(self.master.status)
        except OSError:
            return False
        if status.get("fenced") or status.get("epoch") != self.assignment.epoch:
            return False
        in_sync = set((status.get("master") or {}).get("inSyncSet") or [])
        return in_sync == everyone

    def wait_caught_up(self, within: float = 60.0) -> None:
        """Blocking (run it in a thread): until every slave has the master's max offset."""
        target = int(self.master.status()["maxOffset"])
        deadline = time.monotonic() + within
        for pod in self.assignment.slaves:
            while int(self.broker(pod).status()["maxOffset"]) < target:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{pod} did not reach offset {target} in {within}s")
                time.sleep(0.05)

    async def promoted_from(self, old: str) -> bool:
        """Someone other than ``old`` is master and takes writes."""
        if self.assignment.master == old:
            return False
        status = await asyncio.to_thread(self.master.status)
        return not status.get("fenced")


@contextlib.contextmanager
def controlled_group(
    root: Path, slaves: int = 2, mode: str = "SYNC", **config: Any
) -> Iterator[tuple[LocalGroup, LocalMembers]]:
    """A group of local brokers in controller mode, as the operator deploys a failover group."""
    settings: dict[str, Any] = {
        "mappedFileSizeCommitLog": 1 << 20,
        "maxMessageSize": 1 << 16,
        "syncFlushTimeout": 2000,
    }
    settings.update(config)
    group = LocalGroup(
        root, slaves=slaves, mode=mode, brokerName=GROUP, enableControllerMode=True, **settings
    )
    pods = {MASTER: group.master}
    pods.update({f"{GROUP}-slave-{i}": s for i, s in enumerate(group.slaves)})
    try:
        group.start()
        yield group, LocalMembers(pods)
    finally:
        for broker in group.brokers:
            with contextlib.suppress(Exception):
                broker.resume()
        group.stop()


def log_bodies(store_root: Path) -> list[bytes]:
    """Every message body in a stopped broker's commit log, in log order."""
    bodies = []
    for path in sorted((store_root / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            total = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            try:
                record = decode_record(data, pos)
            except ValueError:
                break  # BLANK at the end of a file, or the zeroes after the last record
            bodies.append(record.body)
            pos += total
    return bodies
