"""A client of a BrokerGroup, run inside the cluster: ``kubectl exec -i POD -- python3 - CMD ...``
with this file on stdin, in a pod of the broker image (it has habroker's client library).

Running inside a pod is what makes it portable: the group's Services and per-pod DNS names
resolve the same on kind and on the local cluster, and routes name pod addresses, which only
pods reach.  ``make demo`` and the end-to-end suite (e2e/tests/test_user_path.py) both use it.
Every command prints one JSON line.  Producing and consuming speak RocketMQ's remoting protocol
through the group's name-server Service (``<group>-namesrv:9876``), as an application does;
``read`` and ``status`` use one broker's HTTP API (``http`` port, 10913).

    produce --namesrv HOST:PORT --topic T --count N [--batch B] [--prefix P] [--start I]
        bodies "P-<i>" for i in [start, start+count), batches of B (SEND_BATCH_MESSAGE);
        reports which were acknowledged (SEND_OK: in SYNC mode, stored on the master and on
        a slave) and every other status
    read --broker HOST:HTTPPORT --topic T
        every message of every queue, pulled from that one broker (no redirection)
    consume --namesrv HOST:PORT --topic T --group G [--count N] [--from earliest|committed]
        a consumer group, following suggestWhichBrokerId; reports which brokerId served each
        message, and commits its offsets
    status --broker HOST:HTTPPORT
        the broker's GET /v1/status
    load --namesrv HOST:PORT --topic T --seconds S [--producers N] [--prefix P]
        N producers sending one message at a time for S seconds, no client retries (a
        failed send is not retried with the same body); reports every acknowledged body, and
        each pause of accepted writes longer than --gap seconds (wall clock, to correlate with
        a failover)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from habroker.client import (
    MQAdmin,
    MQBrokerError,
    MQClientError,
    MQProducer,
    MQPullConsumer,
    OutgoingMessage,
    SendStatus,
)
from habroker.client._protocol import PullResult, error_from, pull_path
from habroker.client.sync import BrokerConnection
from habroker.remoting.codes import ResponseCode

#: how long a topic creation follows a leadership change the name server has not seen yet
ROUTE_SETTLE_S = 60.0


async def create_topic(args: argparse.Namespace) -> None:
    """UPDATE_AND_CREATE_TOPIC on the group's master (leader). The name server learns of a
    leadership change with the new leader's next registration, so right after one it can still
    name a peer that now answers NO_PERMISSION (a slave): ask it again, for up to a minute."""
    deadline = time.monotonic() + ROUTE_SETTLE_S
    while True:
        admin = MQAdmin(args.namesrv)
        try:
            await admin.create_topic(args.topic, queues=args.queues)
            return
        except MQBrokerError as exc:
            if exc.code != ResponseCode.NO_PERMISSION or time.monotonic() > deadline:
                raise
        finally:
            await admin.close()
        await asyncio.sleep(1.0)


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    acked: list[int] = []
    other: dict[str, int] = {}
    errors: list[str] = []
    started = time.monotonic()
    await create_topic(args)
    async with MQProducer(args.namesrv, "e2e-producer", send_timeout=10.0) as producer:
        for first in range(args.start, args.start + args.count, args.batch):
            ids = list(range(first, min(args.start + args.count, first + args.batch)))
            msgs = [OutgoingMessage(f"{args.prefix}-{i}".encode(), keys=str(i)) for i in ids]
            try:
                res = await producer.send_batch(args.topic, msgs)
            except (MQClientError, OSError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if res.status is SendStatus.SEND_OK:
                acked.extend(ids)
            else:
                other[res.status.value] = other.get(res.status.value, 0) + len(ids)
    return {
        "acked": acked,
        "notAcked": other,
        "errors": errors[:5],
        "errorCount": len(errors),
        "seconds": round(time.monotonic() - started, 3),
    }


async def load(args: argparse.Namespace) -> dict[str, Any]:
    await create_topic(args)
    acked: list[str] = []
    accepted_at: list[float] = []
    other: dict[str, int] = {}
    deadline = time.time() + args.seconds

    async def one(k: int) -> None:
        async with MQProducer(
            args.namesrv, f"e2e-load-{k}", send_timeout=3.0, retry_times=0
        ) as producer:
            seq = 0
            while time.time() < deadline:
                body = f"{args.prefix}-{k}-{seq}"
                seq += 1
                try:
                    res = await producer.send(args.topic, body.encode())
                except (MQClientError, OSError) as exc:
                    other[type(exc).__name__] = other.get(type(exc).__name__, 0) + 1
                    producer.instance.routes.invalidate(args.topic)
                    await asyncio.sleep(0.1)
                    continue
                if res.status is SendStatus.SEND_OK:
                    acked.append(body)
                    accepted_at.append(time.time())
                else:
                    other[res.status.value] = other.get(res.status.value, 0) + 1
                    producer.instance.routes.invalidate(args.topic)

    started = time.time()
    await asyncio.gather(*(one(k) for k in range(args.producers)))
    gaps = []
    for before, after in zip([started, *accepted_at], [*accepted_at, time.time()], strict=True):
        if after - before > args.gap:
            gaps.append([round(before, 3), round(after - before, 3)])
    return {"acked": acked, "notAcked": other, "gaps": gaps, "startedAt": started}


def _queues(conn: BrokerConnection, topic: str, timeout: float) -> int:
    """A slave learns topics from its master every few seconds: wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        table = conn.json("GET", "/v1/topics")["topicConfigTable"]
        if topic in table:
            return int(table[topic]["readQueueNums"])
        if time.monotonic() > deadline:
            raise SystemExit(f"topic {topic!r} unknown to {conn.address} after {timeout}s")
        time.sleep(0.5)


def read(args: argparse.Namespace) -> dict[str, Any]:
    conn = BrokerConnection(args.broker, timeout=30)
    bodies: list[str] = []
    for queue_id in range(_queues(conn, args.topic, args.wait)):
        offset = 0
        while True:
            status, headers, data = conn.request(
                "GET", pull_path(args.topic, queue_id, offset, 256, None)
            )
            if status != 200:
                raise error_from(status, data)
            result = PullResult.from_response(headers, data)
            if result.status == "OFFSET_TOO_SMALL":
                offset = result.next_begin_offset
                continue
            if result.status != "FOUND" or not result.messages:
                break
            bodies.extend(m.body.decode() for m in result.messages)
            offset = result.next_begin_offset
    conn.close()
    return {"broker": args.broker, "count": len(bodies), "bodies": bodies}


async def consume(args: argparse.Namespace) -> dict[str, Any]:
    served: dict[int, int] = {}
    bodies: list[str] = []
    idle = 0
    consumer = MQPullConsumer(
        args.namesrv,
        args.group,
        pull_batch_size=args.max,
        # a group's first run reads from the start; "committed" resumes where it stopped
        consume_from="first",
    )
    try:
        queues = await consumer.fetch_message_queues(args.topic)
        await consumer.assign(queues)
        if args.start_from == "earliest":
            for mq in queues:
                await consumer.seek_to_begin(mq)
        while (args.count is None or len(bodies) < args.count) and idle < 20:
            batch = await consumer.poll_batch(timeout=1.0)
            if batch is None or not batch.messages:
                idle += 1
                continue
            idle = 0
            for m in batch.messages:
                if args.count is not None and len(bodies) >= args.count:
                    # the rest stays for next time
                    await consumer.seek(batch.message_queue, m.queue_offset)
                    break
                served[batch.broker_id] = served.get(batch.broker_id, 0) + 1
                bodies.append(m.body.decode())
        await consumer.commit()
    finally:
        await consumer.close()
    return {"consumed": len(bodies), "servedBy": served, "bodies": bodies}


def status(args: argparse.Namespace) -> dict[str, Any]:
    conn = BrokerConnection(args.broker, timeout=10)
    try:
        return dict(conn.json("GET", "/v1/status"))
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="e2e/client.py", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--prefix", default="m")
    p = sub.add_parser("read")
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--wait", type=float, default=60.0)
    p = sub.add_parser("consume")
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--count", type=int, default=None)
    p.add_argument("--max", type=int, default=64)
    p.add_argument(
        "--from", dest="start_from", default="earliest", choices=["earliest", "committed"]
    )
    p = sub.add_parser("status")
    p.add_argument("--broker", required=True)
    p = sub.add_parser("load")
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--prefix", default="l")
    p.add_argument("--gap", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.cmd == "produce":
        out = asyncio.run(produce(args))
    elif args.cmd == "read":
        out = read(args)
    elif args.cmd == "status":
        out = status(args)
    elif args.cmd == "load":
        out = asyncio.run(load(args))
    else:
        out = asyncio.run(consume(args))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
