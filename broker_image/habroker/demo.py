"""A broker group on this machine, end to end: ``python -m habroker.demo``.

Starts a SYNC master and a slave as separate processes on 127.0.0.1, produces a few thousand
messages, shows replication, then consumes with a read policy that sends the backlog to the
slave — the same path a group in Kubernetes takes, without the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from habroker.client import AsyncProducer, OutgoingMessage, PullConsumer
from habroker.local import LocalGroup


async def _run(group: LocalGroup, messages: int, batch: int) -> dict[str, object]:
    master = group.master.http_address
    async with AsyncProducer(master) as producer:
        await producer.create_topic("demo", queues=4)
        started = time.monotonic()
        statuses: dict[str, int] = {}
        for start in range(0, messages, batch):
            msgs = [
                OutgoingMessage(f"order-{i}".encode(), tags="demo", keys=str(i))
                for i in range(start, min(messages, start + batch))
            ]
            res = await producer.send_batch("demo", msgs, queue_id=(start // batch) % 4)
            statuses[res.status] = statuses.get(res.status, 0) + res.count
        produce_s = time.monotonic() - started
    print(
        f"produced {messages} messages in {produce_s:.2f}s (SYNC: every batch acknowledged by the slave): "
        f"{json.dumps(statuses)}"
    )
    group.wait_replicated()
    print(
        f"replicated: master maxOffset={group.master.status()['maxOffset']}, "
        f"slave maxOffset={group.slaves[0].status()['maxOffset']}"
    )

    # read policy: anything more than ~1% of a 1 MiB "RAM" behind counts as a cold backlog
    group.master.request(
        "PATCH",
        "/v1/admin/config",
        {
            "slaveReadEnable": True,
            "totalPhysicalMemorySize": 1 << 20,
            "accessMessageInMemoryMaxRatio": 1,
        },
    )
    for slave in group.slaves:
        slave.request(
            "PATCH",
            "/v1/admin/config",
            {
                "slaveReadEnable": True,
                "totalPhysicalMemorySize": 1 << 20,
                "accessMessageInMemoryMaxRatio": 1,
            },
        )
    served: dict[int, int] = {}
    consumed = 0
    async with PullConsumer(
        group.http_broker_map(), "demo-group", "demo", start="earliest", max_msgs=256
    ) as consumer:
        idle = 0
        while consumed < messages and idle < 50:
            batch_msgs = await consumer.poll()
            if not batch_msgs:
                idle += 1
                await asyncio.sleep(0.02)
                continue
            for m in batch_msgs:
                by = consumer.served_by[m.queue_id]
                served[by] = served.get(by, 0) + 1
            consumed += len(batch_msgs)
        await consumer.commit()
    print(
        f"consumed {consumed} messages; served by brokerId: {json.dumps(served)} "
        "(1 = the slave took the cold backlog, 0 = the master)"
    )
    return {"produced": messages, "consumed": consumed, "servedBy": served}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m habroker.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--dir", type=Path, default=None, help="keep the stores here (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="habroker-demo-") as tmp:
        root = args.dir or Path(tmp)
        group = LocalGroup(
            root, slaves=1, mode="SYNC", mappedFileSizeCommitLog=1 << 20, maxMessageSize=1 << 16
        )
        with group:
            print(
                f"master HTTP {group.master.http_address} (HA {group.master.ha_address}), "
                f"slave HTTP {group.slaves[0].http_address}"
            )
            result = asyncio.run(_run(group, args.messages, args.batch))
            print("\nmaster status:")
            print(json.dumps(group.master.status(), indent=2))
        ok = result["consumed"] == result["produced"]
        print("demo " + ("passed" if ok else "FAILED: not every message was consumed"))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
