"""The failover controller against real habroker processes on 127.0.0.1 (no Kubernetes).

Pods are names for LocalBroker processes; killing a pod is SIGKILL, partitioning it is
SIGSTOP, and "deleting" it restarts the process on its own store (what a StatefulSet does).
Everything the controller touches is real: /v1/status, PUT /v1/admin/role, POST
/v1/admin/fence, replication, the remoting producers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
from brokergroup_operator.brokerapi import BrokerAPI
from brokergroup_operator.local import (
    GROUP,
    MASTER,
    LocalController,
    LocalMembers,
    controlled_group,
    log_bodies,
)
from brokergroup_operator.spec import GroupSpec
from habroker.client import MQAdmin, MQProducer
from habroker.client.errors import MQClientError
from habroker.client.producer import SendStatus

LOG = logging.getLogger("test.failover")
TOPIC = "FailoverTopic"
SLAVE_0, SLAVE_1 = f"{GROUP}-slave-0", f"{GROUP}-slave-1"


def group_spec(**overrides: Any) -> GroupSpec:
    base: dict[str, Any] = {
        "name": GROUP,
        "namespace": "ns",
        "image": "habroker:test",
        "replication_mode": "SYNC",
        "slaves": 2,
        "failover_enabled": True,
        "failover_master_lost_seconds": 2.0,
    }
    base.update(overrides)
    return GroupSpec(**base)


async def started(
    members: LocalMembers, session: aiohttp.ClientSession, **spec: Any
) -> LocalController:
    ctl = LocalController(members, BrokerAPI(session, timeout=1.0), group_spec(**spec), LOG)
    await ctl.until(ctl.serving, what="the initial roles")
    admin = MQAdmin(namesrv_addr=ctl.master.address)
    try:
        await admin.create_topic(TOPIC, queues=4, broker_addr=ctl.master.address)
    finally:
        await admin.close()
    return ctl


# -- the tests -------------------------------------------------------------------------------
async def test_roles_come_from_the_controller(tmp_path: Path) -> None:
    """Brokers in controller mode start fenced; the first tick assigns every role at epoch 1."""
    with controlled_group(tmp_path) as (_group, members):
        before = members.pods[MASTER].status()
        assert before["fenced"] and before["controllerMode"], before
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
        assert ctl.assignment.epoch == 1 and ctl.assignment.master == MASTER
        for pod, broker in members.pods.items():
            status = broker.status()
            assert status["epoch"] == 1, (pod, status)
            assert status["brokerId"] == ctl.assignment.broker_ids[pod]
        assert not members.pods[MASTER].status()["fenced"]


async def test_promotion_picks_the_in_sync_slave_with_the_highest_offset(tmp_path: Path) -> None:
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
            async with MQProducer(ctl.master.address, retry_times=0) as producer:
                for i in range(50):
                    result = await producer.send(TOPIC, f"m{i}".encode())
                    assert result.status is SendStatus.SEND_OK
            # slave 0 (brokerId 1) stops taking bytes while slave 1 acknowledges more; the
            # master still counts it in sync, so only the offsets can tell them apart (the
            # tie-break alone would pick brokerId 1)
            members.pods[SLAVE_0].pause()
            # (more than the sockets between them buffer: a stopped process still receives)
            async with MQProducer(ctl.master.address, retry_times=0) as producer:
                for i in range(128):
                    batch = [f"n{i}-{j}".encode() + bytes(4000) for j in range(32)]
                    result = await producer.send_batch(TOPIC, batch)
                    assert result.status is SendStatus.SEND_OK
            members.pods[MASTER].kill()
            members.pods[SLAVE_0].resume()
            await ctl.until(
                lambda: ctl.promoted_from(MASTER), within=30, what="a promotion after the kill"
            )
            assert ctl.assignment.master == SLAVE_1, ctl.ctl.events
            assert ctl.assignment.epoch == 2
            reasons = [e.reason for e in ctl.ctl.events]
            assert "FailoverStarted" in reasons and "MasterPromoted" in reasons, reasons
            # the old master came back (the controller "deleted" it) and follows as a slave
            await ctl.until(ctl.serving, within=60, what="the old master rejoining")
            old = members.pods[MASTER].status()
            assert old["role"] == "SLAVE" and old["epoch"] == 2
            assert old["brokerId"] == ctl.assignment.broker_ids[MASTER] == 2


async def test_no_eligible_slave_means_no_promotion(tmp_path: Path) -> None:
    with controlled_group(tmp_path, slaves=1) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session, slaves=1)
            members.pods[SLAVE_0].kill()
            # the master drops it from the in-sync set, then the master dies too
            await ctl.until(
                lambda: _in_sync_is(ctl, set()), within=40, what="the slave leaving the set"
            )
            await asyncio.to_thread(members.pods[SLAVE_0].start)
            members.pods[MASTER].kill()
            ctl.ctl.delete_pod = None
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                await ctl.tick()
                await asyncio.sleep(0.2)
            assert ctl.assignment.master == MASTER
            assert ctl.ctl.condition["reason"] == "NoEligibleSlave", ctl.ctl.condition
            assert "NoEligibleSlave" in [e.reason for e in ctl.ctl.events]


async def _in_sync_is(ctl: LocalController, expected: set[int]) -> bool:
    return set(ctl.assignment.in_sync) == expected


async def test_partitioned_old_master_acknowledges_nothing_after_the_promotion(
    tmp_path: Path,
) -> None:
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
            ctl.ctl.delete_pod = None  # the partitioned pod stays; only SIGCONT brings it back
            old = members.pods[MASTER]
            old.pause()
            await ctl.until(lambda: ctl.promoted_from(MASTER), within=30, what="the promotion")
            new_master = ctl.assignment.master
            old.resume()
            # before the controller reaches it again: SYNC writes on it are not acknowledged
            statuses = []
            async with MQProducer(old.address, retry_times=0, send_timeout=4) as producer:
                for i in range(5):
                    try:
                        result = await producer.send(TOPIC, f"late{i}".encode(), queue=0)
                        statuses.append(result.status.value)
                    except MQClientError as exc:
                        statuses.append(type(exc).__name__)
                    await ctl.tick()
            assert "SEND_OK" not in statuses, statuses
            await ctl.until(ctl.serving, within=30, what="the old master demoted")
            status = old.status()
            assert status["role"] == "SLAVE" and status["epoch"] == ctl.assignment.epoch
            assert ctl.assignment.master == new_master


async def test_old_master_truncates_its_unacknowledged_tail(tmp_path: Path) -> None:
    """The slaves stop reading (SIGSTOP) while the master takes more than their sockets can
    buffer: none of it is acknowledged (SYNC), and part of it never leaves the master. After the
    promotion the old master comes back, cuts exactly that unshared tail, and follows."""
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
            async with MQProducer(ctl.master.address, retry_times=0) as producer:
                acked = [await producer.send(TOPIC, f"a{i}".encode(), queue=0) for i in range(30)]
            assert all(r.status is SendStatus.SEND_OK for r in acked)
            for pod in (SLAVE_0, SLAVE_1):
                members.pods[pod].pause()
            async with MQProducer(ctl.master.address, retry_times=0, send_timeout=10) as producer:
                tail = await asyncio.gather(
                    *(
                        producer.send_batch(
                            TOPIC, [f"t{i}-{j}".encode() + bytes(4000) for j in range(32)]
                        )
                        for i in range(128)
                    )
                )
            assert all(r.status is not SendStatus.SEND_OK for r in tail), {r.status for r in tail}
            old_root = Path(members.pods[MASTER].config["storePathRootDir"])
            members.pods[MASTER].kill()
            before = log_bodies(old_root)  # the old master's log as it died
            for pod in (SLAVE_0, SLAVE_1):
                members.pods[pod].resume()
            await ctl.until(lambda: ctl.promoted_from(MASTER), within=30, what="the promotion")
            await ctl.until(ctl.serving, within=60, what="the old master rejoining")
            old = members.pods[MASTER].status()
            assert old["role"] == "SLAVE" and old["slave"]["truncatedBytesTotal"] > 0, old
            await asyncio.to_thread(ctl.wait_caught_up)
            winner = ctl.assignment.master
        for broker in members.pods.values():
            broker.stop()
        final = log_bodies(Path(members.pods[winner].config["storePathRootDir"]))
        for pod, broker in members.pods.items():
            assert log_bodies(Path(broker.config["storePathRootDir"])) == final, pod
        assert [b for b in final if b.startswith(b"a")] == [f"a{i}".encode() for i in range(30)]
        shared = len(final)
        assert before[:shared] == final, "the new master's log is not a prefix of the old one's"
        cut = before[shared:]
        assert cut and all(b.startswith(b"t") for b in cut), "only unacknowledged bodies are cut"
        print(f"\nold master cut {len(cut)} unacknowledged messages; {shared} shared")


async def test_switchover_moves_mastership_without_losing_a_write(tmp_path: Path) -> None:
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
            stop = asyncio.Event()
            acked: list[bytes] = []

            async def produce() -> None:
                async with MQProducer(
                    ";".join(b.address for b in members.pods.values()), retry_times=0
                ) as producer:
                    i = 0
                    while not stop.is_set():
                        body = f"s{i}".encode()
                        i += 1
                        try:
                            r = await producer.send(TOPIC, body, queue=0)
                        except MQClientError:
                            producer.instance.routes.invalidate(TOPIC)
                            await asyncio.sleep(0.02)
                            continue
                        if r.status is SendStatus.SEND_OK:
                            acked.append(body)
                        else:
                            producer.instance.routes.invalidate(TOPIC)

            task = asyncio.create_task(produce())
            await asyncio.sleep(1.0)
            ctl.assignment = await ctl.ctl.switchover(ctl.assignment, SLAVE_1)
            assert ctl.assignment.master == SLAVE_1
            done = [e for e in ctl.ctl.events if e.reason == "SwitchoverDone"]
            assert done, ctl.ctl.events
            await ctl.until(ctl.serving, within=30, what="the group after the switchover")
            await asyncio.sleep(1.0)
            stop.set()
            await task
            count_after = len(acked)
            assert count_after > 0
        for broker in members.pods.values():
            broker.stop()
        got = set(log_bodies(Path(members.pods[SLAVE_1].config["storePathRootDir"])))
        missing = [b for b in acked if b not in got]
        assert not missing, f"{len(missing)} acknowledged messages missing on the new master"
        LOG.warning("switchover: %s; %d acknowledged, all present", done[0].message, len(acked))


FAILOVERS = int(os.environ.get("BG_FAILOVERS", "20"))
PRODUCERS = 4


async def test_acknowledged_writes_survive_repeated_failovers(tmp_path: Path) -> None:
    """The history: 4 producers with unique ids in SYNC mode while the master is SIGKILLed or
    partitioned (SIGSTOP) again and again; every acknowledged message must be on the final
    master and every slave exactly once, in each producer's order."""
    rng = random.Random(13)
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session)
            stop = asyncio.Event()
            acked: dict[int, list[bytes]] = {k: [] for k in range(PRODUCERS)}
            refused = 0
            errors: dict[str, int] = {}
            namesrv = ";".join(b.address for b in members.pods.values())

            async def produce(k: int) -> None:
                nonlocal refused
                async with MQProducer(namesrv, retry_times=0, send_timeout=3) as producer:
                    seq = 0
                    while not stop.is_set():
                        body = f"p{k}-{seq:06d}".encode()
                        seq += 1
                        try:
                            r = await producer.send(TOPIC, body, queue=k % 4)
                        except Exception as exc:
                            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                            refused += 1
                            producer.instance.routes.invalidate(TOPIC)
                            await asyncio.sleep(0.05)
                            continue
                        if r.status is SendStatus.SEND_OK:
                            acked[k].append(body)
                        else:
                            refused += 1
                            producer.instance.routes.invalidate(TOPIC)

            async def control() -> None:
                while not stop.is_set():
                    await ctl.tick()
                    await asyncio.sleep(0.25)

            tasks = [asyncio.create_task(produce(k)) for k in range(PRODUCERS)]
            controller = asyncio.create_task(control())
            outages: list[float] = []
            try:
                for n in range(FAILOVERS):
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
                    victim_pod = ctl.assignment.master
                    victim = members.pods[victim_pod]
                    kind = "kill" if n % 2 == 0 else "partition"
                    before = sum(len(v) for v in acked.values())
                    lost_at = time.monotonic()
                    if kind == "kill":
                        victim.kill()
                    else:
                        victim.pause()
                    await _wait(lambda v=victim_pod: ctl.assignment.master != v, 30, "promotion")
                    await _wait(
                        lambda b=before: sum(len(v) for v in acked.values()) > b,
                        30,
                        f"a write (errors so far {errors}, producers done: "
                        f"{[t.exception() for t in tasks if t.done()]})",
                    )
                    outages.append(time.monotonic() - lost_at)
                    if kind == "partition":
                        # (unless the controller already "deleted the pod": restarted it)
                        with contextlib.suppress(RuntimeError):
                            victim.resume()
                    # the old master must be back in sync before the next round, or there
                    # would be no eligible slave (the group waits, as it should)
                    await _wait_async(ctl.serving, 90, f"round {n}: the group in sync")
                    LOG.warning(
                        "failover %d (%s %s -> %s, epoch %d): %.1fs without an accepted write; %s",
                        n + 1,
                        kind,
                        victim_pod,
                        ctl.assignment.master,
                        ctl.assignment.epoch,
                        outages[-1],
                        errors,
                    )
            finally:
                stop.set()
                await asyncio.gather(*tasks, controller, return_exceptions=True)
            await ctl.until(ctl.serving, within=60, what="the final group in sync")
            await asyncio.to_thread(ctl.wait_caught_up)
            final_master = ctl.assignment.master
            epoch = ctl.assignment.epoch
        for broker in members.pods.values():
            broker.stop()
        total = sum(len(v) for v in acked.values())
        print(
            f"\nfailovers={FAILOVERS} epoch={epoch} final master={final_master} "
            f"acknowledged={total} not-acknowledged={refused} "
            f"outage s: max={max(outages):.1f} mean={sum(outages) / len(outages):.1f}"
        )
        assert epoch == 1 + FAILOVERS
        for pod, broker in members.pods.items():
            bodies = log_bodies(Path(broker.config["storePathRootDir"]))
            seen: dict[bytes, int] = {}
            for body in bodies:
                seen[body] = seen.get(body, 0) + 1
            missing = [b for v in acked.values() for b in v if b not in seen]
            doubled = [b for v in acked.values() for b in v if seen.get(b, 0) > 1]
            print(
                f"{pod}: {len(bodies)} records, {len(missing)} acknowledged missing, "
                f"{len(doubled)} acknowledged twice"
            )
            assert not missing, f"{pod} lost {len(missing)} acknowledged, e.g. {missing[:5]}"
            assert not doubled, f"{pod} holds {len(doubled)} acknowledged twice: {doubled[:5]}"
            position = {b: i for i, b in enumerate(bodies)}
            for k, mine in acked.items():
                places = [position[b] for b in mine]
                assert places == sorted(places), f"{pod}: producer {k} out of order"


async def _wait(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def _wait_async(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def test_a_master_back_without_its_data_is_never_confirmed(tmp_path: Path) -> None:
    """The master's volume is lost (wiped) and it restarts empty within masterLostSeconds: the
    controller must not confirm it (the slaves hold messages it lacks) but promote a slave, and
    the empty broker becomes a slave that copies everything."""
    with controlled_group(tmp_path) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = await started(members, session, failover_master_lost_seconds=30.0)
            async with MQProducer(ctl.master.address, retry_times=0) as producer:
                for i in range(50):
                    assert (
                        await producer.send(TOPIC, f"k{i}".encode())
                    ).status is SendStatus.SEND_OK
            await asyncio.to_thread(ctl.wait_caught_up)
            old = members.pods[MASTER]
            old.kill()
            shutil.rmtree(Path(old.config["storePathRootDir"]))
            await asyncio.to_thread(old.start)
            await ctl.until(lambda: ctl.promoted_from(MASTER), within=10, what="a promotion")
            assert "lost data" in " ".join(e.message for e in ctl.ctl.events), ctl.ctl.events
            await ctl.until(ctl.serving, within=60, what="the empty broker following")
            await asyncio.to_thread(ctl.wait_caught_up)
            assert old.status()["role"] == "SLAVE"
        for broker in members.pods.values():
            broker.stop()
        for pod, broker in members.pods.items():
            bodies = log_bodies(Path(broker.config["storePathRootDir"]))
            assert [b for b in bodies if b.startswith(b"k")] == [
                f"k{i}".encode() for i in range(50)
            ], pod
