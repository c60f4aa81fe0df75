"""``habroker``: run a broker, produce, consume, inspect.

habroker serve --config broker.conf
habroker topic create orders --queues 4 --broker 127.0.0.1:10913
habroker produce --topic orders --count 100000 --size 1024 --batch 32
seq 10 | habroker produce --topic orders
habroker consume --topic orders --group g1 --from earliest --count 10
habroker status --broker 127.0.0.1:10913

--broker names a broker's HTTP API (httpListenPort, default 10913), or $HABROKER_ADDRESS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from habroker import __version__
from habroker.config import BrokerConfig, ConfigError

DEFAULT_BROKER = os.environ.get("HABROKER_ADDRESS", "127.0.0.1:10913")  # httpListenPort


def _overrides(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        out[key] = value
    return out


# -- serve -----------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = BrokerConfig.load(args.config, overrides=_overrides(args.set))
    except ConfigError as exc:
        print(f"habroker: configuration error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from habroker.startup import BrokerStartup

    log = logging.getLogger("habroker")
    startup = BrokerStartup(config)
    try:
        await startup.start()
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await startup.stop()
    return 0


# -- produce ---------------------------------------------------------------------------------
class Progress:
    """A one-line progress bar with rate, only when stderr is a terminal."""

    def __init__(self, total: int | None, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.stream = stream
        self.enabled = stream.isatty()
        self.start = time.monotonic()
        self.count = 0
        self.nbytes = 0
        self._last = 0.0

    def update(self, count: int, nbytes: int) -> None:
        self.count += count
        self.nbytes += nbytes
        now = time.monotonic()
        if self.enabled and now - self._last >= 0.2:
            self._last = now
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = max(1e-9, (now or time.monotonic()) - self.start)
        rate = self.count / elapsed
        mbs = self.nbytes / elapsed / 1e6
        if self.total:
            frac = min(1.0, self.count / self.total)
            bar = "#" * int(frac * 30)
            return f"[{bar:<30}] {self.count}/{self.total} msgs  {rate:,.0f} msg/s  {mbs:,.1f} MB/s"
        return f"{self.count} msgs  {rate:,.0f} msg/s  {mbs:,.1f} MB/s"

    def finish(self) -> str:
        if self.enabled:
            self.stream.write("\r\x1b[K")
        return self.line()


def _payloads(args: argparse.Namespace) -> Iterator[bytes]:
    if args.count is not None:
        body = (b"habroker" * (args.size // 8 + 1))[: args.size]
        for _ in range(args.count):
            yield body
    else:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\n")


def cmd_produce(args: argparse.Namespace) -> int:
    return asyncio.run(_produce(args))


async def _produce(args: argparse.Namespace) -> int:
    from habroker.client import AsyncProducer, BrokerAPIError, OutgoingMessage

    progress = Progress(args.count)
    statuses: dict[str, int] = {}
    queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(maxsize=args.producers * 2)
    failures: list[str] = []

    async def worker(producer: AsyncProducer) -> None:
        while (batch := await queue.get()) is not None:
            msgs = [OutgoingMessage(b, tags=args.tags) for b in batch]
            try:
                res = await producer.send_batch(args.topic, msgs, queue_id=args.queue_id)
            except (BrokerAPIError, OSError) as exc:
                failures.append(str(exc))
                continue
            statuses[res.status] = statuses.get(res.status, 0) + res.count
            progress.update(res.count, sum(len(b) for b in batch))

    async with AsyncProducer(args.broker) as producer:
        workers = [asyncio.create_task(worker(producer)) for _ in range(args.producers)]
        batch: list[bytes] = []
        for body in _payloads(args):
            batch.append(body)
            if len(batch) >= args.batch:
                await queue.put(batch)
                batch = []
            if failures:
                break
        if batch and not failures:
            await queue.put(batch)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    summary = progress.finish()
    print(f"{summary}  status: {json.dumps(statuses)}", file=sys.stderr)
    if failures:
        print(
            f"habroker produce: {len(failures)} request(s) failed; first: {failures[0]}",
            file=sys.stderr,
        )
        return 1
    return 0


# -- consume ---------------------------------------------------------------------------------
def cmd_consume(args: argparse.Namespace) -> int:
    return asyncio.run(_consume(args))


async def _consume(args: argparse.Namespace) -> int:
    from habroker.client import PullConsumer

    consumer = PullConsumer(
        args.broker, args.group, args.topic, start=args.start_from, max_msgs=args.max
    )
    seen = 0
    idle_since = time.monotonic()
    out = sys.stdout
    async with consumer:
        while args.count is None or seen < args.count:
            messages = await consumer.poll()
            if not messages:
                if not args.follow and time.monotonic() - idle_since > args.idle_timeout:
                    break
                await asyncio.sleep(0.1)
                continue
            idle_since = time.monotonic()
            for m in messages:
                if args.count is not None and seen >= args.count:
                    # stop mid-batch: the group's position is just after what was printed
                    consumer.seek(m.queue_id, m.queue_offset)
                    break
                seen += 1
                if args.format == "json":
                    out.write(
                        json.dumps(
                            {
                                "topic": m.topic,
                                "queueId": m.queue_id,
                                "queueOffset": m.queue_offset,
                                "commitLogOffset": m.commit_log_offset,
                                "storeTimestamp": m.store_timestamp,
                                "msgId": m.msg_id,
                                "properties": m.properties,
                                "brokerId": consumer.served_by.get(m.queue_id, 0),
                                # as stored: COMPRESSED (0x1) says the body was decompressed
                                "sysFlag": m.sys_flag,
                                "body": m.body.decode("utf-8", errors="replace"),
                            }
                        )
                        + "\n"
                    )
                else:
                    out.write(m.body.decode("utf-8", errors="replace") + "\n")
            if not args.no_commit:
                await consumer.commit()
    out.flush()
    print(f"consumed {seen} message(s)", file=sys.stderr)
    return 0


# -- status / topics -------------------------------------------------------------------------
def _print_status(st: dict[str, Any]) -> None:
    print(
        f"{st['brokerName']} brokerId={st['brokerId']} role={st['role']} flush={st['flushDiskType']} "
        f"ready={st.get('ready')}"
    )
    print(
        f"  ports       client={st.get('listenAddress')} http={st.get('httpAddress')} "
        f"ha={st.get('haListenAddress')}"
    )
    print(
        f"  commit log  min={st['minOffset']} max={st['maxOffset']} flushed={st['flushedOffset']} "
        f"dispatched={st['dispatchedOffset']}"
    )
    rp = st["readPolicy"]
    print(
        f"  read policy slaveReadEnable={rp['slaveReadEnable']} "
        f"accessMessageInMemoryMaxRatio={rp['accessMessageInMemoryMaxRatio']}"
    )
    if "master" in st:
        m = st["master"]
        print(
            f"  master      push2SlaveMaxOffset={m['push2SlaveMaxOffset']} slaves={m['connectionCount']} "
            f"inSync={m['inSyncSlaves']}"
        )
        for s in m["slaves"]:
            print(
                f"    slave {s['address']}: ack={s['ackOffset']} lag={s['lagBytes']}B "
                f"lastReport={s['lastReportAgeMs']}ms inSync={s['inSync']}"
            )
    if "slave" in st:
        s = st["slave"]
        print(
            f"  slave       master={s.get('masterAddress')} connected={s.get('connected')} "
            f"lastReport={s.get('lastReportAgeMs')}ms reconnects={s.get('reconnects')}"
        )


def cmd_status(args: argparse.Namespace) -> int:
    from habroker.client import BrokerConnection

    conn = BrokerConnection(args.broker, timeout=5)
    try:
        st = conn.json("GET", "/v1/status")
    except OSError as exc:
        print(f"habroker status: cannot reach {args.broker}: {exc}", file=sys.stderr)
        return 1
    finally:
        conn.close()
    if args.json:
        print(json.dumps(st, indent=2, sort_keys=True))
    else:
        _print_status(st)
    return 0


def cmd_topic(args: argparse.Namespace) -> int:
    from habroker.client import BrokerAPIError, BrokerConnection

    conn = BrokerConnection(args.broker, timeout=5)
    try:
        if args.action == "create":
            res = conn.json(
                "POST",
                "/v1/topics",
                {"topic": args.name, "readQueueNums": args.queues, "writeQueueNums": args.queues},
            )
            print(json.dumps(res))
        else:
            for name, cfg in conn.json("GET", "/v1/topics")["topicConfigTable"].items():
                print(f"{name}\tqueues={cfg['writeQueueNums']}\tperm={cfg['perm']}")
    except BrokerAPIError as exc:
        print(f"habroker topic: {exc}", file=sys.stderr)
        return 1
    finally:
        conn.close()
    return 0


# -- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="habroker", description="RocketMQ-compatible replication broker."
    )
    parser.add_argument("--version", action="version", version=f"habroker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a broker")
    p.add_argument(
        "--config", help="properties file with RocketMQ keys (HABROKER_<key> env overrides it)"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override one key"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "produce", help="send messages from stdin (one per line) or generated payloads"
    )
    p.add_argument(
        "--broker",
        default=DEFAULT_BROKER,
        help="the master's HTTP API, host:httpListenPort (default %(default)s)",
    )
    p.add_argument("--topic", required=True)
    p.add_argument(
        "--queue-id", type=int, default=None, help="queue to write (default: broker's round robin)"
    )
    p.add_argument(
        "--count",
        type=int,
        default=None,
        help="generate this many payloads instead of reading stdin",
    )
    p.add_argument("--size", type=int, default=1024, help="generated payload size in bytes")
    p.add_argument("--batch", type=int, default=32, help="messages per request")
    p.add_argument("--producers", type=int, default=1, help="concurrent requests")
    p.add_argument("--tags", default=None)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="pull messages as a consumer group")
    p.add_argument(
        "--broker",
        default=DEFAULT_BROKER,
        help="HTTP API addresses (httpListenPort): host:port (the master) or "
        "0=host:port,1=host:port (default %(default)s)",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument(
        "--from",
        dest="start_from",
        default="committed",
        choices=["committed", "earliest", "latest"],
    )
    p.add_argument("--count", type=int, default=None, help="stop after this many messages")
    p.add_argument("--max", type=int, default=32, help="messages per pull")
    p.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=2.0,
        help="without --follow, stop after this idle time",
    )
    p.add_argument("--format", default="text", choices=["text", "json"])
    p.add_argument("--no-commit", action="store_true", help="do not store the group's offsets")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("status", help="show a broker's offsets and replication state")
    p.add_argument(
        "--broker", default=DEFAULT_BROKER, help="HTTP API host:port (default %(default)s)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("topic", help="create or list topics")
    p.add_argument("action", choices=["create", "list"])
    p.add_argument("name", nargs="?")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument(
        "--broker",
        default=DEFAULT_BROKER,
        help="the master's HTTP API, host:port (default %(default)s)",
    )
    p.set_defaults(func=cmd_topic)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "topic" and args.action == "create" and not args.name:
        parser.error("topic create needs a NAME")
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        result: int = args.func(args)
        return result
    return 130


if __name__ == "__main__":
    sys.exit(main())
