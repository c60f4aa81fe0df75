"""Failover and switchover, measured: seconds without an accepted write, and acknowledged loss.

    python -m bench.failover [--rounds 5] [--master-lost-seconds 10] [--producers 4]

Real parts: a SYNC group of three habroker processes (master + two slaves) in controller mode
on 127.0.0.1, the operator's own FailoverController (brokergroup_operator.failover) ticking
every second as the kopf daemon does, and producers using habroker's RocketMQ remoting client
(one message at a time, no retries; a failed send is not repeated with the same body).

Rounds, each with the default settings (masterLostSeconds 10 unless told otherwise):
* kill: SIGKILL the master (its "pod" is restarted on the same store by the controller);
* partition: SIGSTOP the master, SIGCONT after the promotion;
* switchover: move mastership to a slave on purpose.
Measured per round: seconds from the event (the kill, the stop, the switchover's start) to the
first write the new master accepted (the issue's targets: <= 15 s for a lost master, <= 2 s for
a switchover), and at the end every acknowledged body is
looked up in every broker's commit log. Results: bench/results/failover.json and failover.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from brokergroup_operator.brokerapi import BrokerAPI
from brokergroup_operator.local import GROUP, LocalController, controlled_group, log_bodies
from brokergroup_operator.spec import GroupSpec
from habroker.client import MQAdmin, MQProducer
from habroker.client.errors import MQClientError
from habroker.client.producer import SendStatus

from bench import common

LOG = logging.getLogger("bench.failover")
TOPIC = "BenchFailover"
RESULTS = common.RESULTS_DIR / "failover.json"


class Producers:
    """Producers with unique bodies; the times of accepted writes, for the pauses."""

    def __init__(self, namesrv: str, count: int) -> None:
        self.namesrv = namesrv
        self.count = count
        self.acked: list[bytes] = []
        self.accepted_at: list[float] = []
        self.accepted_on: list[str] = []  # the broker (client address) that accepted each
        self.refused = 0
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._run(k)) for k in range(self.count)]

    async def _run(self, k: int) -> None:
        async with MQProducer(self.namesrv, retry_times=0, send_timeout=3) as producer:
            seq = 0
            while not self.stop.is_set():
                body = f"b{k}-{seq}".encode()
                seq += 1
                try:
                    result = await producer.send(TOPIC, body)
                except MQClientError:
                    self.refused += 1
                    producer.instance.routes.invalidate(TOPIC)
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(body)
                    self.accepted_at.append(time.monotonic())
                    self.accepted_on.append(result.broker_address)
                else:
                    self.refused += 1
                    producer.instance.routes.invalidate(TOPIC)

    def first_on(self, address: str, t0: float) -> float | None:
        """Seconds from ``t0`` to the first write ``address`` accepted after it."""
        for t, where in zip(self.accepted_at, self.accepted_on, strict=True):
            if t > t0 and where == address:
                return t - t0
        return None

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    spec = GroupSpec(
        name=GROUP,
        namespace="bench",
        image="-",
        replication_mode="SYNC",
        slaves=2,
        failover_enabled=True,
        failover_master_lost_seconds=args.master_lost_seconds,
    )
    rounds: list[dict[str, Any]] = []
    with controlled_group(root) as (_group, members):
        async with aiohttp.ClientSession() as session:
            ctl = LocalController(members, BrokerAPI(session, timeout=1.0), spec, LOG)
            await ctl.until(ctl.serving, within=60, what="the initial roles")
            async with MQAdmin(ctl.master.address) as admin:
                await admin.create_topic(TOPIC, queues=4, broker_addr=ctl.master.address)
            load = Producers(";".join(b.address for b in members.pods.values()), args.producers)
            load.start()
            stop = asyncio.Event()

            async def control() -> None:
                while not stop.is_set():
                    await ctl.tick()
                    await asyncio.sleep(1.0)  # the kopf daemon's tick

            controller = asyncio.create_task(control())
            try:
                for n in range(args.rounds * 3):
                    kind = ("kill", "partition", "switchover")[n % 3]
                    await asyncio.sleep(3.0)
                    old = ctl.assignment.master
                    victim = members.pods[old]
                    t0 = time.monotonic()
                    if kind == "kill":
                        victim.kill()
                    elif kind == "partition":
                        victim.pause()
                    else:
                        target = ctl.assignment.slaves[0]
                        stop.set()
                        await controller
                        await ctl.switchover(target)
                        stop.clear()
                        controller = asyncio.create_task(control())
                    while True:
                        new = ctl.assignment.master
                        pause = None if new == old else load.first_on(members.pods[new].address, t0)
                        if pause is not None:
                            break
                        await asyncio.sleep(0.05)
                        if time.monotonic() - t0 > 120:
                            raise TimeoutError(f"round {n} ({kind}): no promotion in 120 s")
                    if kind == "partition":
                        victim.resume()
                    rounds.append({"kind": kind, "from": old, "to": ctl.assignment.master,
                                   "epoch": ctl.assignment.epoch, "pauseSeconds": round(pause, 3)})  # fmt: skip
                    print(f"round {n + 1}: {kind:10s} {old} -> {ctl.assignment.master}: "
                          f"{pause:.2f} s without an accepted write", flush=True)  # fmt: skip
                    deadline = time.monotonic() + 120
                    while not await ctl.serving():
                        await asyncio.sleep(0.2)
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"round {n}: the group not back in sync")
            finally:
                stop.set()
                await load.close()
                await asyncio.gather(controller, return_exceptions=True)
            await ctl.until(ctl.serving, within=60, what="the final group in sync")
            await asyncio.to_thread(ctl.wait_caught_up)
        for broker in members.pods.values():
            broker.stop()
        lost = {}
        for pod, broker in members.pods.items():
            stored = set(log_bodies(Path(broker.config["storePathRootDir"])))
            lost[pod] = sum(1 for b in load.acked if b not in stored)
    by_kind: dict[str, list[float]] = {}
    for r in rounds:
        by_kind.setdefault(r["kind"], []).append(r["pauseSeconds"])
    return {
        "machine": common.machine_info(),
        "settings": {
            "masterLostSeconds": args.master_lost_seconds,
            "producers": args.producers,
            "tickSeconds": 1.0,
            "replicationMode": "SYNC",
            "slaves": 2,
        },
        "rounds": rounds,
        "summary": {
            kind: {"median": statistics.median(v), "max": max(v), "n": len(v)}
            for kind, v in by_kind.items()
        },
        "targets": {"lostMasterSeconds": 15.0, "switchoverSeconds": 2.0},
        "acknowledged": len(load.acked),
        "notAcknowledged": load.refused,
        "acknowledgedMissing": lost,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = {"kill": "tab:red", "partition": "tab:orange", "switchover": "tab:blue"}
    for i, r in enumerate(result["rounds"]):
        ax.bar(i, r["pauseSeconds"], color=colors[r["kind"]])
    for kind, color in colors.items():
        ax.bar([], [], color=color, label=kind)
    ax.axhline(result["targets"]["lostMasterSeconds"], color="tab:red", ls="--", lw=1)
    ax.axhline(result["targets"]["switchoverSeconds"], color="tab:blue", ls="--", lw=1)
    ax.set_xlabel("round")
    ax.set_ylabel("seconds without an accepted write")
    ax.set_title(
        f"failover (masterLostSeconds={result['settings']['masterLostSeconds']:g}), "
        f"{result['acknowledged']} acknowledged, "
        f"{max(result['acknowledgedMissing'].values())} missing"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    p.add_argument("--rounds", type=int, default=3, help="rounds of each kind (default 3)")
    p.add_argument("--master-lost-seconds", type=float, default=10.0)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    common.SCRATCH_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=common.SCRATCH_DIR, prefix="failover-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.results.with_suffix(".png"))
    print(json.dumps(result["summary"], indent=2))
    print(f"acknowledged {result['acknowledged']}, missing per broker "
          f"{result['acknowledgedMissing']}; {args.results}")  # fmt: skip
    return 0 if not any(result["acknowledgedMissing"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
