"""``habroker``: run a broker, produce, consume, administer, inspect.

Everything but ``serve`` and ``status`` speaks RocketMQ's remoting protocol and finds brokers
through ``--namesrv`` (a broker of the group, or a RocketMQ name server), so it works against
Java RocketMQ as well; ``status`` reads habroker's HTTP API (``--http``).

habroker serve --config broker.conf
habroker topic create orders --queues 4 --namesrv 127.0.0.1:10911
habroker produce --topic orders --count 100000 --size 1024 --batch 32
seq 10 | habroker produce --topic orders
habroker consume --topic orders --group g1 --from earliest --count 10
habroker consumer progress --group g1
habroker offset reset --group g1 --topic orders --to 2024-05-01T12:00:00
habroker message view --id 7F00000100002A9F0000000000000000
habroker status --http 127.0.0.1:10913
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from habroker import __version__
from habroker.config import BrokerConfig, ConfigError
from habroker.remoting.acl import AclError, SessionCredentials
from habroker.store import native
from habroker.store.errors import StoreError

if TYPE_CHECKING:
    from habroker.message import MessageExt

DEFAULT_NAMESRV = os.environ.get("HABROKER_NAMESRV", "127.0.0.1:10911")
DEFAULT_HTTP = os.environ.get(
    "HABROKER_HTTP", os.environ.get("HABROKER_ADDRESS", "127.0.0.1:10913")
)  # httpListenPort


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
    loop_factory = event_loop_factory(args.event_loop)
    logging.getLogger("habroker").info(
        "event loop: %s; record codec: %s",
        "asyncio" if loop_factory is None else "uvloop",
        native.describe(),
    )
    parent = os.getppid() if args.exit_with_parent else None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(config, parent))


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for the standard library's loop.  ``auto`` falls back
    to asyncio quietly when uvloop is not installed; ``uvloop`` insists on it."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("habroker: --event-loop uvloop, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


async def _serve(config: BrokerConfig, parent: int | None = None) -> int:
    from habroker.startup import BrokerStartup

    log = logging.getLogger("habroker")
    try:
        startup = BrokerStartup(config)
    except (ConfigError, AclError) as exc:  # a TLS certificate, an admin token or ACL file
        log.error("configuration error: %s", exc)
        return 2
    try:
        await startup.start()
    except (OSError, StoreError) as exc:
        # a port in use, a store another broker holds, a damaged store file: the message
        # names what and how to fix it; a traceback would add nothing
        log.error("cannot start: %s", exc)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = None if parent is None else asyncio.create_task(_watch_parent(parent, stop))
    await stop.wait()
    if watch is not None:
        watch.cancel()
    log.info("shutting down")
    await startup.stop()
    return 0


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """--exit-with-parent: once the process that started the broker is gone (this one is
    handed to another parent), shut down as on SIGTERM. A harness killed before its cleanup ran
    (a crashed or SIGKILLed pytest) leaves no broker holding its ports and store."""
    gone = asyncio.Event()
    try:
        fd = os.pidfd_open(parent)  # readable once the parent exits
    except OSError:  # gone already, or no pidfd here: ask every half second
        fd = -1
    loop = asyncio.get_running_loop()
    if fd >= 0:
        loop.add_reader(fd, gone.set)
    try:
        while os.getppid() == parent and not gone.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), None if fd >= 0 else 0.5)
    finally:
        if fd >= 0:
            loop.remove_reader(fd)
            os.close(fd)
    logging.getLogger("habroker").warning(
        "the process that started this broker (pid %d) exited; shutting down", parent
    )
    stop.set()


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


def _remoting(command: str, coro: Coroutine[Any, Any, int]) -> int:
    """Run a remoting command: a refusal, a missing topic or an unreachable broker is one line
    on stderr and exit status 1, never a traceback."""
    from habroker.client import MQClientError

    try:
        return asyncio.run(coro)
    except (MQClientError, ValueError) as exc:
        print(f"habroker {command}: {exc}", file=sys.stderr)
        return 1


def cmd_produce(args: argparse.Namespace) -> int:
    return _remoting("produce", _produce(args))


async def _produce(args: argparse.Namespace) -> int:
    from habroker.client import MQClientError, MQProducer, OutgoingMessage

    progress = Progress(args.count)
    statuses: dict[str, int] = {}
    queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(maxsize=args.producers * 2)
    failures: list[str] = []

    async def worker(producer: MQProducer) -> None:
        while (batch := await queue.get()) is not None:
            if failures:
                continue
            msgs = [OutgoingMessage(b, tags=args.tags, keys=args.keys) for b in batch]
            try:
                if len(msgs) == 1:
                    res = await producer.send(args.topic, msgs[0], queue=args.queue_id)
                else:
                    res = await producer.send_batch(args.topic, msgs, queue=args.queue_id)
            except MQClientError as exc:
                failures.append(str(exc))
                continue
            statuses[res.status.value] = statuses.get(res.status.value, 0) + res.count
            progress.update(res.count, sum(len(b) for b in batch))

    async with MQProducer(
        args.namesrv, args.group, credentials=_credentials(args), tls=_tls(args)
    ) as producer:
        await producer.instance.routes.get(args.topic)  # a missing topic fails here, once
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
    return _remoting("consume", _consume(args))


def _message_json(m: MessageExt, broker_id: int) -> dict[str, Any]:
    return {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "msgId": m.uniq_key or m.msg_id,
        "offsetMsgId": m.msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "properties": m.properties,
        "brokerId": broker_id,
        # as stored: COMPRESSED (0x1) says the body was decompressed
        "sysFlag": m.sys_flag,
        "body": m.body.decode("utf-8", errors="replace"),
    }


async def _consume(args: argparse.Namespace) -> int:
    from habroker.client import MQPullConsumer

    seen = 0
    out = sys.stdout
    async with MQPullConsumer(
        args.namesrv,
        args.group,
        pull_batch_size=args.max,
        long_polling_timeout=args.long_poll,
        credentials=_credentials(args),
        tls=_tls(args),
    ) as consumer:
        queues = await consumer.fetch_message_queues(args.topic)
        if args.queue_id is not None:
            queues = [mq for mq in queues if mq.queue_id == args.queue_id]
            if not queues:
                raise ValueError(f"topic {args.topic!r} has no queue {args.queue_id}")
        await consumer.assign(queues, args.tags or "*")
        start = args.start_from
        for mq in queues:
            if start == "earliest":
                await consumer.seek_to_begin(mq)
            elif start == "latest":
                await consumer.seek_to_end(mq)
            elif start != "committed":
                await consumer.seek_to_timestamp(mq, parse_time(start))
        while args.count is None or seen < args.count:
            batch = await consumer.poll_batch(timeout=3600.0 if args.follow else args.idle_timeout)
            if batch is None:
                if args.follow:
                    continue
                break
            for m in batch.messages:
                if args.count is not None and seen >= args.count:
                    # stop mid-batch: the group's position is just after what was printed
                    await consumer.seek(batch.message_queue, m.queue_offset)
                    break
                seen += 1
                if args.format == "json":
                    out.write(json.dumps(_message_json(m, batch.broker_id)) + "\n")
                else:
                    out.write(m.body.decode("utf-8", errors="replace") + "\n")
            if not args.no_commit:
                await consumer.commit()
        if not args.no_commit:
            await consumer.commit()
        error = consumer.last_error
    out.flush()
    print(f"consumed {seen} message(s)", file=sys.stderr)
    if seen == 0 and error is not None:
        print(f"habroker consume: {error}", file=sys.stderr)
        return 1
    return 0


def parse_time(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (local time when it names no zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use epoch milliseconds or ISO 8601 "
            "(2024-05-01T12:00:00, 2024-05-01T12:00:00+00:00)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


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

    conn = BrokerConnection(args.http, timeout=5)
    try:
        st = conn.json("GET", "/v1/status")
    except OSError as exc:
        print(f"habroker status: cannot reach {args.http}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(
            f"habroker status: {args.http} did not answer as habroker's HTTP API ({exc}); "
            "is it the httpListenPort?",
            file=sys.stderr,
        )
        return 1
    finally:
        conn.close()
    if args.json:
        print(json.dumps(st, indent=2, sort_keys=True))
    else:
        _print_status(st)
    return 0


# -- admin (remoting) ------------------------------------------------------------------------
def _ms(stamp: int) -> str:
    if stamp <= 0:
        return "-"
    return dt.datetime.fromtimestamp(stamp / 1000).astimezone().isoformat(timespec="milliseconds")


def cmd_topic(args: argparse.Namespace) -> int:
    return _remoting("topic", _topic(args))


async def _topic(args: argparse.Namespace) -> int:
    from habroker.client import MQAdmin

    async with MQAdmin(args.namesrv, credentials=_credentials(args), tls=_tls(args)) as admin:
        if args.action == "create":
            where = await admin.create_topic(
                args.name, args.queues, cluster=args.cluster, broker_addr=args.broker_addr
            )
            print(f"created topic {args.name} ({args.queues} queues) on {', '.join(where)}")
        elif args.action == "delete":
            where = await admin.delete_topic(args.name, cluster=args.cluster)
            print(f"deleted topic {args.name} on {', '.join(where)}")
        elif args.action == "list":
            for name in await admin.topic_list():
                print(name)
        elif args.action == "route":
            route = await admin.topic_route(args.name)
            for q in route.queues:
                b = route.broker(q.broker_name)
                addrs = ", ".join(f"{i}={a}" for i, a in sorted((b.addrs if b else {}).items()))
                print(
                    f"{q.broker_name}\tread={q.read_queue_nums}\twrite={q.write_queue_nums}\t"
                    f"perm={q.perm}\tbrokers: {addrs}"
                )
        else:  # stats
            print("broker\tqueue\tminOffset\tmaxOffset\tlastUpdate")
            for st in await admin.topic_stats(args.name):
                mq = st.message_queue
                print(
                    f"{mq.broker_name}\t{mq.queue_id}\t{st.min_offset}\t{st.max_offset}\t"
                    f"{_ms(st.last_update_timestamp)}"
                )
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    return _remoting("cluster", _cluster(args))


async def _cluster(args: argparse.Namespace) -> int:
    from habroker.client import MQAdmin

    async with MQAdmin(args.namesrv, credentials=_credentials(args), tls=_tls(args)) as admin:
        info = await admin.cluster_info()
        for cluster, names in sorted(info.clusters.items()):
            for name in names:
                b = info.brokers.get(name)
                for broker_id, addr in sorted((b.addrs if b else {}).items()):
                    print(f"{cluster}\t{name}\t{broker_id}\t{addr}")
    return 0


def cmd_consumer(args: argparse.Namespace) -> int:
    return _remoting("consumer", _consumer_progress(args))


async def _consumer_progress(args: argparse.Namespace) -> int:
    from habroker.client import MQAdmin

    async with MQAdmin(args.namesrv, credentials=_credentials(args), tls=_tls(args)) as admin:
        rows = await admin.consumer_progress(args.group, args.topic)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "topic": p.message_queue.topic,
                        "brokerName": p.message_queue.broker_name,
                        "queueId": p.message_queue.queue_id,
                        "brokerOffset": p.broker_offset,
                        "consumerOffset": p.consumer_offset,
                        "lag": p.lag,
                        "lastTimestamp": p.last_timestamp,
                    }
                    for p in rows
                ]
            )
        )
        return 0
    print("topic\tbroker\tqueue\tbrokerOffset\tconsumerOffset\tlag\tlastConsumed")
    for p in rows:
        mq = p.message_queue
        print(
            f"{mq.topic}\t{mq.broker_name}\t{mq.queue_id}\t{p.broker_offset}\t"
            f"{p.consumer_offset}\t{p.lag}\t{_ms(p.last_timestamp)}"
        )
    print(f"total lag: {sum(p.lag for p in rows)}")
    return 0


def cmd_offset(args: argparse.Namespace) -> int:
    return _remoting("offset", _offset_reset(args))


async def _offset_reset(args: argparse.Namespace) -> int:
    from habroker.client import MQAdmin

    to: str | int = args.to if args.to in ("earliest", "latest") else parse_time(args.to)
    async with MQAdmin(args.namesrv, credentials=_credentials(args), tls=_tls(args)) as admin:
        rows = await admin.reset_offsets(args.group, args.topic, to)
    for r in rows:
        mq = r.message_queue
        old = "-" if r.old_offset is None else str(r.old_offset)
        print(f"{mq.topic}\t{mq.broker_name}\t{mq.queue_id}\t{old} -> {r.new_offset}")
    print(
        f"reset {len(rows)} queue(s) of group {args.group}; consumers of the group that are "
        "running keep their own positions: restart them",
        file=sys.stderr,
    )
    return 0


def _host(host: tuple[str, int]) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


def cmd_message(args: argparse.Namespace) -> int:
    return _remoting("message", _message_view(args))


async def _message_view(args: argparse.Namespace) -> int:
    from habroker.client import MQAdmin

    async with MQAdmin(args.namesrv, credentials=_credentials(args), tls=_tls(args)) as admin:
        m = await admin.view_message(args.id)
    if args.json:
        print(json.dumps({k: v for k, v in _message_json(m, 0).items() if k != "brokerId"}))
        return 0
    for label, value in (
        ("Topic", m.topic),
        ("Tags", m.tags or "-"),
        ("Keys", m.keys or "-"),
        ("Queue ID", m.queue_id),
        ("Queue Offset", m.queue_offset),
        ("CommitLog Offset", m.commit_log_offset),
        ("Reconsume Times", m.reconsume_times),
        ("Born Timestamp", _ms(m.born_timestamp)),
        ("Store Timestamp", _ms(m.store_timestamp)),
        ("Born Host", _host(m.born_host)),
        ("Store Host", _host(m.store_host)),
        ("Msg ID", m.uniq_key or "-"),
        ("Offset Msg ID", m.msg_id),
        ("Properties", json.dumps(m.properties, ensure_ascii=False)),
        ("Body", m.body.decode("utf-8", errors="replace")),
    ):
        print(f"{label + ':':<18}{value}")
    return 0


# -- parser ----------------------------------------------------------------------------------
def _namesrv(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--namesrv",
        default=DEFAULT_NAMESRV,
        metavar="HOST:PORT[;HOST:PORT]",
        help="name server(s): any broker of the group (its listenPort) or a RocketMQ name "
        "server (env HABROKER_NAMESRV; default %(default)s)",
    )
    acl = p.add_argument_group("ACL (brokers with aclEnable: RocketMQ ACL 1.0)")
    acl.add_argument(
        "--access-key",
        default=os.environ.get("HABROKER_ACCESS_KEY", ""),
        metavar="AK",
        help="sign requests for a broker with aclEnable (RocketMQ ACL 1.0, docs/security.md) "
        "with this accessKey (env HABROKER_ACCESS_KEY); the secret comes from env "
        "HABROKER_SECRET_KEY or --secret-key",
    )
    acl.add_argument(
        "--secret-key",
        default=os.environ.get("HABROKER_SECRET_KEY", ""),
        metavar="SK",
        help="the accessKey's secretKey (prefer env HABROKER_SECRET_KEY: a command line is "
        "visible to other users)",
    )
    tls = p.add_argument_group("TLS (brokers with tls.server.mode permissive or enforcing)")
    tls.add_argument(
        "--tls",
        action="store_true",
        default=os.environ.get("HABROKER_TLS", "").lower() == "true",
        help="speak TLS to name servers and brokers, like a Java client with -Dtls.enable=true "
        "(env HABROKER_TLS=true)",
    )
    tls.add_argument(
        "--tls-ca",
        metavar="PEM",
        default=os.environ.get("HABROKER_TLS_CA") or None,
        help="CA certificates the brokers' certificates must lead to; implies --tls (env "
        "HABROKER_TLS_CA; default the system's CAs)",
    )
    tls.add_argument(
        "--tls-no-verify",
        action="store_true",
        help="encrypt but believe any certificate (RocketMQ's tls.test.mode.enable); for tests",
    )
    tls.add_argument(
        "--tls-check-hostname",
        action="store_true",
        help="also require the certificate to name the address connected to (off by default, "
        "as in RocketMQ's Java client: routes name brokers by IP address)",
    )


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context the command-line options ask for (None: plain)."""
    if not (args.tls or args.tls_ca or args.tls_no_verify):
        return None
    from habroker.remoting.tls import TlsSetupError, client_context

    try:
        return client_context(
            ca_path=args.tls_ca,
            verify=not args.tls_no_verify,
            check_hostname=args.tls_check_hostname,
        )
    except TlsSetupError as exc:
        raise ValueError(str(exc)) from None


def _credentials(args: argparse.Namespace) -> SessionCredentials | None:
    """The ACL credentials the client commands sign with, or None for an unsigned client."""
    if not args.access_key:
        return None
    if not args.secret_key:
        raise SystemExit("--access-key needs a secret: env HABROKER_SECRET_KEY or --secret-key")
    return SessionCredentials(args.access_key, args.secret_key)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="habroker",
        description="RocketMQ-compatible replication broker. Client commands speak RocketMQ's "
        "remoting protocol (--namesrv); 'status' reads the HTTP API (--http).",
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
    p.add_argument(
        "--event-loop",
        default="auto",
        choices=["asyncio", "uvloop", "auto"],
        help="asyncio's event loop: uvloop (libuv, a dependency of habroker) or the standard "
        "library's; auto (default) takes uvloop when it is installed, else asyncio. "
        "bench/event_loop.py compares them",
    )
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="shut down (as on SIGTERM) when the process that started the broker exits; "
        "habroker.local, the tests and the benchmarks start every broker with it",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "produce", help="send messages from stdin (one per line) or generated payloads"
    )
    _namesrv(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="habroker-cli", help="producer group (default %(default)s)")
    p.add_argument(
        "--queue-id", type=int, default=None, help="queue to write (default: round robin)"
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
    p.add_argument("--keys", default=None, help="message keys, space-separated")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="pull messages as a consumer group")
    _namesrv(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument(
        "--from",
        dest="start_from",
        default="committed",
        metavar="committed|earliest|latest|TIME",
        help="where to start: the group's committed offsets (default), the first or last "
        "offset, or a time (epoch ms or ISO 8601)",
    )
    p.add_argument("--queue-id", type=int, default=None, help="read only this queue")
    p.add_argument("--tags", default=None, help="tag expression: 'a' or 'a || b' (default all)")
    p.add_argument("--count", type=int, default=None, help="stop after this many messages")
    p.add_argument("--max", type=int, default=32, help="messages per pull")
    p.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=2.0,
        help="without --follow, stop after this idle time in seconds",
    )
    p.add_argument(
        "--long-poll",
        type=float,
        default=20.0,
        help="seconds the broker may hold a pull that finds nothing",
    )
    p.add_argument("--format", default="text", choices=["text", "json"])
    p.add_argument("--no-commit", action="store_true", help="do not store the group's offsets")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("status", help="show a broker's offsets and replication state (HTTP API)")
    p.add_argument(
        "--http",
        "--broker",
        dest="http",
        default=DEFAULT_HTTP,
        help="the broker's HTTP API, host:httpListenPort (env HABROKER_HTTP or "
        "HABROKER_ADDRESS; default %(default)s)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("topic", help="create, delete, list topics; show a route or queue stats")
    p.add_argument("action", choices=["create", "delete", "list", "route", "stats"])
    p.add_argument("name", nargs="?")
    p.add_argument("--queues", type=int, default=4, help="read and write queues (create)")
    p.add_argument(
        "--cluster", default=None, help="only this cluster's masters (default: every master)"
    )
    p.add_argument(
        "--broker-addr", default=None, help="create on this broker only (host:port, create)"
    )
    _namesrv(p)
    p.set_defaults(func=cmd_topic)

    p = sub.add_parser("cluster", help="list broker groups and their members")
    p.add_argument("action", choices=["list"])
    _namesrv(p)
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("consumer", help="a consumer group's progress and lag per queue")
    p.add_argument("action", choices=["progress"])
    p.add_argument("--group", required=True)
    p.add_argument("--topic", default=None, help="only this topic")
    p.add_argument("--json", action="store_true")
    _namesrv(p)
    p.set_defaults(func=cmd_consumer)

    p = sub.add_parser(
        "offset",
        help="set a group's offsets on every queue of a topic (offline: stop its consumers)",
    )
    p.add_argument("action", choices=["reset"])
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument(
        "--to",
        required=True,
        metavar="earliest|latest|TIME",
        help="earliest, latest, or the first message at or after a time (epoch ms or ISO 8601)",
    )
    _namesrv(p)
    p.set_defaults(func=cmd_offset)

    p = sub.add_parser("message", help="show one message by its offsetMsgId")
    p.add_argument("action", choices=["view"])
    p.add_argument("--id", required=True, help="offsetMsgId (store address + commit-log offset)")
    p.add_argument("--json", action="store_true")
    _namesrv(p)
    p.set_defaults(func=cmd_message)
    # no prefix matching: `--broker` must never quietly mean `--broker-addr`
    for p in (parser, *sub.choices.values()):
        p.allow_abbrev = False
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "topic" and args.action != "list" and not args.name:
        parser.error(f"topic {args.action} needs a NAME")
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        result: int = args.func(args)
        return result
    return 130


if __name__ == "__main__":
    sys.exit(main())
