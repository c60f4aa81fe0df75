"""Real Apache RocketMQ (Java) beside habroker, inside a private network namespace.

RocketMQ's Java name server and brokers bind 0.0.0.0 with no setting to change that, so every
test that runs them does so in a network namespace of its own holding only a loopback interface
(:class:`NetNS`); the habroker processes and the clients of that test join the same namespace.
The jars come from Maven Central through ``interop/install.sh`` (a cache outside the repository);
``interop/driver/RocketMQDriver.java`` is our own program that drives the real Java client and
mqadmin and prints JSON lines.  See docs/interop.md.

This module is shared by the interop tests (tests/interop/rocketmq_java.py adds the pytest
layer: a missing prerequisite becomes a skip, or a failure under CI) and the benchmarks
(bench/rocketmq.py); it imports neither, nor pytest.
"""

from __future__ import annotations

import abc
import contextlib
import ctypes
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from habroker.local import LocalBroker, LocalDLedgerGroup, LocalGroup

REPO = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO / "interop" / "install.sh"
ROCKETMQ_HOME = REPO / "interop" / "rocketmq_home"
VERSIONS = ("4.9.7", "5.3.1")
#: RocketMQ 5.x ships no name server jar: its brokers register with a 4.9.7 name server.
NAMESRV_VERSION = "4.9.7"
#: Heap for each JVM: the machine has 2 cores and is shared, RocketMQ needs little for tests.
JVM_HEAP = os.environ.get("ROCKETMQ_INTEROP_HEAP", "320m")
JVM_FLAGS = (
    f"-Xms{JVM_HEAP}",
    f"-Xmx{JVM_HEAP}",
    "-XX:+UseSerialGC",  # one GC thread: the machine has two cores
    "-XX:TieredStopAtLevel=1",  # C1 only: boots faster, plenty for test loads
    "-XX:-UsePerfData",  # no /tmp/hsperfdata files
    "-Djava.net.preferIPv4Stack=true",
    # RocketMQ unmaps its files through JDK internals: without these a 4.9.7 broker on Java 17
    # answers deleteTopic (and file cleanup) with InaccessibleObjectException
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
)

T = TypeVar("T")


def cache_root() -> Path:
    """Where install.sh puts each set's ``lib/`` and compiled ``driver/`` (outside the repo)."""
    explicit = os.environ.get("ROCKETMQ_INTEROP_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "brokergroup" / "rocketmq"


class InteropUnavailable(RuntimeError):
    """A prerequisite of running RocketMQ (Java) here is missing; the message says which."""


_installed: set[str] = set()


def ensure_installed(versions: Iterable[str] = VERSIONS) -> Path:
    """Run interop/install.sh for ``versions`` once per process (a no-op in seconds when cached).

    Raises :class:`InteropUnavailable` when java/javac/mvn, ``ip`` or root is missing.
    """
    wanted = [v for v in versions if v not in _installed]
    if wanted:
        missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
        if missing:
            raise InteropUnavailable(f"{', '.join(missing)} not on PATH (run `make java-setup`)")
        if shutil.which("ip") is None:
            raise InteropUnavailable("`ip` (iproute2) not on PATH: network namespaces need it")
        if os.geteuid() != 0:
            raise InteropUnavailable("network namespaces need root (`ip netns add`)")
        env = {**os.environ, "ROCKETMQ_INTEROP_SETS": " ".join(wanted), "ROCKETMQ_INTEROP_APT": "0"}
        done = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], env=env, capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            raise RuntimeError(f"interop/install.sh failed ({done.returncode}):\n{done.stderr}")
        _installed.update(wanted)
    return cache_root()


def classpath(version: str, *, driver: bool = False) -> str:
    base = cache_root() / version
    parts = [str(base / "driver")] if driver else []
    return ":".join([*parts, str(base / "lib" / "*")])


def expected_body(message_id: str, size: int, kind: str = "hash") -> bytes:
    """The body the driver sends for ``message_id`` (``--size``, ``--body``): same rule as Java."""
    if kind == "text":
        unit = f"{message_id};".encode()
        return (unit * (size // len(unit) + 1))[:size]
    blocks = (
        hashlib.sha256(f"{message_id}:{i}".encode()).digest() for i in range((size + 31) // 32)
    )
    return b"".join(blocks)[:size]


# -- network namespaces ---------------------------------------------------------------------

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_names = itertools.count()


class NetNS:
    """A private network namespace with only ``lo`` (up): nothing in it reaches the host's network.

    Processes run in it through ``ip netns exec`` (:meth:`popen`); Python code runs in it through
    :meth:`call`, on a fresh thread that first joins the namespace with ``setns(2)`` (namespaces
    are per thread in Linux, so only that thread's sockets live there).  :meth:`close` kills every
    process it started (by PID), deletes the namespace and checks that nothing is left.
    """

    def __init__(self, root: Path, name: str | None = None, grace: float = 5.0) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.name = name or f"bgi-{os.getpid()}-{next(_names)}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.habrokers: list[LocalBroker] = []  # started by habroker.local, stopped at close()
        self.grace = grace  # seconds from SIGTERM to SIGKILL at close()
        self._open = False

    @property
    def path(self) -> Path:
        return Path("/var/run/netns") / self.name

    @property
    def prefix(self) -> tuple[str, ...]:
        """Prepend to a command to run it inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def open(self) -> NetNS:
        _remove_stale_namespaces()
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self._open = True
        subprocess.run(
            ["ip", "-n", self.name, "link", "set", "lo", "up"], check=True, capture_output=True
        )
        links = subprocess.run(
            ["ip", "-n", self.name, "-o", "link", "show"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        if len(links) != 1 or ": lo:" not in links[0]:
            raise AssertionError(f"namespace {self.name} has more than lo: {links}")
        return self

    def popen(
        self,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the namespace (its own session) with stdout+stderr to ``log``."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*self.prefix, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the namespace to completion, capturing its output."""
        return subprocess.run(
            [*self.prefix, *argv],
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def enter(self) -> None:
        """Move the calling thread (only it) into the namespace: for a fresh thread of ours."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({self.path}): {os.strerror(err)}")
        finally:
            os.close(fd)

    def call(self, fn: Callable[[], T], timeout: float = 60.0) -> T:
        """Run ``fn()`` on a thread inside the namespace; its result or exception comes back."""
        result: list[T] = []
        error: list[BaseException] = []

        def body() -> None:
            try:
                self.enter()
                result.append(fn())
            except BaseException as exc:  # handed to the caller's thread
                error.append(exc)

        thread = threading.Thread(target=body, name=f"netns-{self.name}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"call in {self.name} still running after {timeout}s")
        if error:
            raise error[0]
        return result[0]

    def connectable(self, port: int, host: str = "127.0.0.1") -> bool:
        def probe() -> bool:
            try:
                with socket.create_connection((host, port), timeout=1):
                    return True
            except OSError:
                return False

        return self.call(probe)

    def pids(self) -> list[int]:
        out = subprocess.run(
            ["ip", "netns", "pids", self.name], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split()]

    def local_broker(self, root: Path, **config: Any) -> LocalBroker:
        """A habroker process (habroker.local) that runs and is probed inside this namespace."""
        broker = LocalBroker(root, command_prefix=self.prefix, call_in=self.call, **config)
        self.habrokers.append(broker)
        return broker

    def local_group(
        self, root: Path, slaves: int = 1, mode: str = "SYNC", **config: Any
    ) -> LocalGroup:
        """A habroker master with ``slaves`` slaves, all inside this namespace."""
        group = LocalGroup(
            root, slaves=slaves, mode=mode, command_prefix=self.prefix, call_in=self.call, **config
        )
        self.habrokers.extend(group.brokers)
        return group

    def local_dledger_group(self, root: Path, peers: int = 3, **config: Any) -> LocalDLedgerGroup:
        """``peers`` habroker DLedger peers (n0, n1, ...) of one group, all inside this
        namespace."""
        group = LocalDLedgerGroup(
            root, peers=peers, command_prefix=self.prefix, call_in=self.call, **config
        )
        self.habrokers.extend(group.peers)
        return group

    def close(self) -> None:
        """Stop what we started (SIGTERM, then SIGKILL), delete the namespace, check it is gone."""
        for broker in self.habrokers:
            broker.stop(timeout=self.grace)
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if not self._open:
            return
        left = self.pids()
        subprocess.run(["ip", "netns", "del", self.name], check=True, capture_output=True)
        self._open = False
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        gone = all(line.split()[0] != self.name for line in names.splitlines() if line.strip())
        if left or not gone:
            raise AssertionError(
                f"namespace {self.name}: processes left {left}, still listed: {not gone}"
            )

    def __enter__(self) -> NetNS:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_stale_namespaces() -> None:
    """Delete empty ``bgi-<pid>-<n>`` namespaces left by test processes that died (never one
    with a process in it, nor one of a live process)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(r"bgi-(\d+)-\d+", name)
        if not match or Path(f"/proc/{match.group(1)}").exists():
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        if not pids.stdout.strip():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


# -- Java processes ---------------------------------------------------------------------------


def _tmpdir(home: Path) -> str:
    """``-Djava.io.tmpdir`` in the JVM's own folder: what Java writes to its temporary
    directory (Netty's self-signed certificates, ``keyutil_*``) stays with the test."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return f"-Djava.io.tmpdir={tmp}"


#: mqadmin (queryMsgById, queryMsgByKey...) saves each message body it prints here, a fixed path
MQADMIN_BODY_DIR = Path("/tmp/rocketmq/msgbodys")


def _remove_body_files(stdout: str) -> None:
    """Delete the body files an mqadmin run reported saving, and their folders once empty."""
    for name in re.findall(r"Message Body Path:\s*(\S+)", stdout):
        path = Path(name)
        if path.parent == MQADMIN_BODY_DIR:
            path.unlink(missing_ok=True)
    for folder in (MQADMIN_BODY_DIR, MQADMIN_BODY_DIR.parent):
        with contextlib.suppress(OSError):  # not empty (another user's files) or absent
            folder.rmdir()


def _java_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAVA_TOOL", "_JAVA"))}
    env["ROCKETMQ_HOME"] = str(ROCKETMQ_HOME)
    env["HOME"] = str(home)
    return env


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path.name})"


class JavaProcess(abc.ABC):
    """One RocketMQ server JVM in a namespace, with its own folder as ``user.home``."""

    main_class = ""
    log_config = ""
    booted_marker = "boot success"
    #: the JVM's options; bench/rocketmq.py gives its brokers a benchmark's (C2, G1, bigger heap)
    jvm_flags: Sequence[str] = JVM_FLAGS

    def __init__(self, ns: NetNS, version: str, root: Path, port: int) -> None:
        self.ns = ns
        self.version = version
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def stdout_path(self) -> Path:
        return self.root / "stdout.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @abc.abstractmethod
    def args(self) -> list[str]:
        """The JVM's main-class arguments (a name server's or a broker's)."""

    def jvm_props(self) -> list[str]:
        """More ``-D`` flags for this server's JVM."""
        return []

    def start(self, wait: bool = True, timeout: float = 90.0) -> Self:
        ensure_installed([self.version])
        argv = [
            "java",
            *self.jvm_flags,
            _tmpdir(self.root),
            f"-Duser.home={self.root}",
            f"-Drocketmq.home.dir={ROCKETMQ_HOME}",
            # 5.x reads its (shaded) logback config from this property; 4.x from ROCKETMQ_HOME/conf
            f"-Drmq.logback.configurationFile={ROCKETMQ_HOME / 'conf' / self.log_config}",
            *self.jvm_props(),
            "-cp",
            classpath(self.version),
            self.main_class,
            *self.args(),
        ]
        self.proc = self.ns.popen(argv, log=self.stdout_path, env=_java_env(self.root))
        if wait:
            self.wait_booted(timeout)
        return self

    def wait_booted(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self} exited with {self.proc.returncode}:\n{self.tail_log()}")
            booted = self.booted_marker in self.stdout_path.read_text(errors="replace")
            if booted and self.ns.connectable(self.port):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{self} not booted after {timeout}s:\n{self.tail_log()}")

    def tail_log(self, lines: int = 40) -> str:
        """stdout and the RocketMQ log (our logback configs write ``~/logs/<name>.log``)."""
        logs = sorted((self.root / "logs").glob("*.log")) if (self.root / "logs").exists() else []
        parts = [f"--- {self.stdout_path}\n{_tail(self.stdout_path, lines)}"]
        parts += [f"--- {p}\n{_tail(p, lines)}" for p in logs]
        return "\n".join(parts)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (RocketMQ's shutdown hook flushes and unregisters), SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class JavaNameServer(JavaProcess):
    """``NamesrvStartup`` (always 4.9.7: there is no 5.x name server jar on Maven Central)."""

    main_class = "org.apache.rocketmq.namesrv.NamesrvStartup"
    log_config = "logback_namesrv.xml"

    def __init__(
        self, ns: NetNS, root: Path, port: int = 9876, version: str = NAMESRV_VERSION
    ) -> None:
        super().__init__(ns, version, root, port)

    def args(self) -> list[str]:
        conf = self.root / "namesrv.conf"
        conf.write_text(f"listenPort={self.port}\n")
        return ["-c", str(conf)]

    def __repr__(self) -> str:
        return f"JavaNameServer({self.version} {self.ns.name} {self.address})"


@dataclass
class BrokerSpec:
    """broker.conf of a Java broker; ``extra`` adds or overrides any RocketMQ key."""

    broker_name: str = "broker-a"
    broker_id: int = 0
    role: str = "ASYNC_MASTER"  # SYNC_MASTER | ASYNC_MASTER | SLAVE
    namesrv_addr: str = "127.0.0.1:9876"
    listen_port: int = 10911
    cluster: str = "DefaultCluster"
    ha_master_address: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: more ``-Dkey=value`` JVM properties (e.g. ``rocketmq.acl.plain.file``)
    jvm_props: list[str] = field(default_factory=list)


class JavaBroker(JavaProcess):
    """``BrokerStartup -c broker.conf``.  Ports: listenPort, HA = listenPort+1, VIP = listenPort-2."""

    main_class = "org.apache.rocketmq.broker.BrokerStartup"
    log_config = "logback_broker.xml"

    def __init__(self, ns: NetNS, version: str, root: Path, spec: BrokerSpec) -> None:
        super().__init__(ns, version, root, spec.listen_port)
        self.spec = spec

    def jvm_props(self) -> list[str]:
        return [f"-D{p}" for p in self.spec.jvm_props]

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.spec.listen_port + 1}"

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    def config(self) -> dict[str, Any]:
        s = self.spec
        conf: dict[str, Any] = {
            "brokerClusterName": s.cluster,
            "brokerName": s.broker_name,
            "brokerId": s.broker_id,
            "brokerRole": s.role,
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": s.namesrv_addr,
            "listenPort": s.listen_port,
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "storePathRootDir": self.store_dir,
            "storePathCommitLog": self.store_dir / "commitlog",
            "mappedFileSizeCommitLog": 64 * 1024 * 1024,
            "autoCreateTopicEnable": True,
            "autoCreateSubscriptionGroup": True,
            "diskMaxUsedSpaceRatio": 95,
        }
        if s.ha_master_address:
            conf["haMasterAddress"] = s.ha_master_address
        conf.update(s.extra)
        return conf

    def args(self) -> list[str]:
        path = self.root / "broker.conf"
        lines = []
        for key, value in self.config().items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            lines.append(f"{key}={text}")
        path.write_text("\n".join(lines) + "\n")
        return ["-c", str(path)]

    def __repr__(self) -> str:
        s = self.spec
        return f"JavaBroker({self.version} {s.broker_name}/{s.broker_id} {s.role} {self.address})"


# -- the driver and mqadmin -------------------------------------------------------------------

_runs = itertools.count()


class DriverFailed(AssertionError):
    """The driver exited non-zero; ``events`` holds what it printed before."""

    def __init__(self, message: str, events: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.events = events


def _driver(
    ns: NetNS,
    version: str,
    args: Sequence[str],
    timeout: float,
    serialize: str | None = None,
    jvm: Sequence[str] = (),
) -> tuple[subprocess.CompletedProcess[str], Path]:
    ensure_installed([version])
    home = ns.root / f"driver-{next(_runs)}"
    home.mkdir(parents=True, exist_ok=True)
    argv = [
        "java",
        *JVM_FLAGS[2:],  # no fixed heap: clients are small
        "-Xmx256m",
        _tmpdir(home),
        f"-Duser.home={home}",
        f"-Drocketmq.home.dir={ROCKETMQ_HOME}",
        f"-Dlogback.configurationFile={ROCKETMQ_HOME / 'conf' / 'logback_driver.xml'}",
        f"-Drmq.logback.configurationFile={ROCKETMQ_HOME / 'conf' / 'logback_driver.xml'}",
        "-Drocketmq.client.rebalance.waitInterval=1000",
        *([f"-Drocketmq.serialize.type={serialize}"] if serialize else []),
        *jvm,
        "-cp",
        classpath(version, driver=True),
        "RocketMQDriver",
        *args,
    ]
    done = ns.run(argv, env=_java_env(home), timeout=timeout)
    (home / "stdout").write_text(done.stdout)
    (home / "stderr").write_text(done.stderr)
    return done, home


def parse_events(stdout: str) -> list[dict[str, Any]]:
    """The driver's JSON lines (anything else a library printed on stdout is skipped)."""
    events: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        if line.startswith('{"event":'):
            events.append(json.loads(line))
    return events


def run_driver(
    ns: NetNS,
    version: str,
    *args: str,
    check: bool = True,
    timeout: float = 180.0,
    serialize: str | None = None,
    jvm: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Run ``RocketMQDriver <args>`` (the ``version`` client) in ``ns``; its events, summary last.

    ``serialize="ROCKETMQ"`` makes the client encode request headers in RocketMQ's binary
    serialization instead of JSON (``-Drocketmq.serialize.type``); ``jvm``: more JVM options
    (system properties such as ``-Dtls.enable=true``).
    """
    done, home = _driver(ns, version, args, timeout, serialize, jvm)
    events = parse_events(done.stdout)
    if check and (done.returncode != 0 or not events or events[-1].get("event") != "summary"):
        last = events[-1] if events else None
        error = next((e for e in events if e.get("exception")), None)
        raise DriverFailed(
            f"driver {' '.join(args[:1])} ({version}) exited {done.returncode}, last event "
            f"{last}, first error {error}; stderr ({home}):\n{_tail(home / 'stderr', 30)}",
            events,
        )
    return events


def run_mqadmin(
    ns: NetNS,
    version: str,
    *args: str,
    timeout: float = 120.0,
    serialize: str | None = None,
    jvm: Sequence[str] = (),
) -> str:
    """The real mqadmin (rocketmq-tools ``version``) in ``ns``; its stdout.  Raises if it threw."""
    done, home = _driver(ns, version, ["admin", *args], timeout, serialize, jvm)
    _remove_body_files(done.stdout)
    if done.returncode != 0:
        raise AssertionError(
            f"mqadmin {' '.join(args)} ({version}) exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{_tail(home / 'stderr', 30)}"
        )
    return done.stdout


def events_of(events: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == kind]


def summary(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    assert events and events[-1].get("event") == "summary", events[-3:]
    return events[-1]


# -- reading mqadmin output -------------------------------------------------------------------

_BARE_INT_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


def loads_fastjson(text: str) -> Any:
    """JSON as RocketMQ's fastjson writes it: maps with integer keys leave them unquoted."""

    def quote(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) is None else f'{m.group(1)}"{m.group(2)}"{m.group(3)}'

    return json.loads(_BARE_INT_KEY.sub(quote, text))


def table_rows(text: str) -> list[list[str]]:
    """The whitespace-split rows under mqadmin's ``#Column`` header line."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("#")), None)
    if start is None:
        raise AssertionError(f"no table header in mqadmin output:\n{text}")
    return [line.split() for line in lines[start + 1 :] if line.strip()]


@dataclass(frozen=True)
class ClusterRow:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    version: str


def cluster_list(text: str) -> list[ClusterRow]:
    """``mqadmin clusterList``: one row per broker."""
    return [ClusterRow(r[0], r[1], int(r[2]), r[3], r[4]) for r in table_rows(text)]


@dataclass(frozen=True)
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


def topic_status(text: str) -> list[QueueStatus]:
    """``mqadmin topicStatus``: one row per queue."""
    return [QueueStatus(r[0], int(r[1]), int(r[2]), int(r[3])) for r in table_rows(text)]


def start_sync_group(ns: NetNS, version: str = "4.9.7") -> tuple[JavaBroker, JavaBroker]:
    """A Java name server, SYNC_MASTER (10911) and SLAVE (10921) in ``ns``, booted, with the
    slave's first HA offset report in (SYNC sends answer SEND_OK only then)."""
    JavaNameServer(ns, ns.root / "namesrv").start()
    master = JavaBroker(
        ns, version, ns.root / "master", BrokerSpec(role="SYNC_MASTER", listen_port=10911)
    )
    slave = JavaBroker(
        ns,
        version,
        ns.root / "slave",
        BrokerSpec(
            broker_id=1, role="SLAVE", listen_port=10921, ha_master_address=master.ha_address
        ),
    )
    master.start(wait=False)
    slave.start(wait=False)
    master.wait_booted()
    slave.wait_booted()
    wait_ha_connected(ns, master)
    return master, slave


#: what a Java master logs when a slave's first offset report arrives (4.9 HAConnection, 5.x
#: DefaultHAConnection): only from then on does it replicate to that slave.
HA_FIRST_REPORT = "] request offset "


def wait_ha_connected(ns: NetNS, master: JavaBroker, timeout: float = 60.0) -> None:
    """Until a slave holds an HA connection to ``master`` and has reported its offset on it.

    A Java slave sends its first report one heartbeat interval (5 s) after it connects; a
    SYNC_MASTER replicates nothing before, so a send in that window can answer
    FLUSH_SLAVE_TIMEOUT.
    """
    port = master.spec.listen_port + 1
    log = master.root / "logs" / "broker.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = ns.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"]).stdout
        if out.strip() and log.exists() and HA_FIRST_REPORT in log.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise TimeoutError(
        f"no slave has reported its offset to {master} after {timeout}s:\n{master.tail_log()}"
    )
