"""Real broker processes on 127.0.0.1: one broker, or a master with slaves.

Tests, benchmarks and the local demo all run brokers this way — separate processes with their
own store directories and ports — so what they exercise is what a pod runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from habroker.config import properties_line

T = TypeVar("T")


def free_port() -> int:
    return free_ports(1)[0]


_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LISTEN_FLOOR = 20000  # above the crowded 10000s (kubelet's 10250, RocketMQ's 10911, ...)
_LISTEN_CEILING = 30000  # below Kubernetes' NodePort range (30000-32767)
_handed_out: set[int] = set()


def _listen_range() -> range:
    """Ports for listeners to pick from: below the kernel's ephemeral range.

    A port bound to 0 and released comes from the ephemeral range, and any outgoing connection
    on the machine (a slave dialling its master, a test's client) may take it as its local port
    before the broker binds it: "address already in use", seen in CI. Below the range only
    another listener can take it.
    """
    try:
        low = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(_LISTEN_FLOOR, max(min(low, _LISTEN_CEILING), _LISTEN_FLOOR + 1000))


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports for listeners, none handed out before in this process (a
    port picked for a broker that has not bound it yet looks free)."""
    candidates = _listen_range()
    ports: list[int] = []
    for _ in range(64 * count):
        port = random.choice(candidates)
        if port not in _handed_out and port not in ports and _is_free(port):
            ports.append(port)
            if len(ports) == count:
                _handed_out.update(ports)
                return ports
    raise OSError(f"no {count} free ports in {candidates.start}-{candidates.stop - 1}")


def port_pairs(count: int, tries: int = 200) -> tuple[list[int], list[int]]:
    """``count`` client ports and as many DLedger ports, every pair the same distance apart:
    a follower finds its leader's client port that way (as pods sharing 10911/40911 do)."""
    candidates = _listen_range()
    for _ in range(tries):
        clients = free_ports(count)
        distance = random.randint(1, 2000)
        dledger = [port + distance for port in clients]
        if all(
            port in candidates and port not in _handed_out and _is_free(port) for port in dledger
        ):
            _handed_out.update(dledger)
            return clients, dledger
    raise OSError(f"no {count} free port pairs one distance apart in {tries} tries")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _call_here(fn: Callable[[], T]) -> T:
    return fn()


class LocalBroker:
    """One ``habroker serve`` process; its log goes to ``<root>/broker.log``.

    ``command_prefix`` and ``call_in`` run it elsewhere than this host's 127.0.0.1, e.g. in a
    network namespace (tests/interop): the command is prefixed (``ip netns exec NAME``) and the
    port picks and health probes run through ``call_in``.
    """

    def __init__(
        self,
        root: Path,
        *,
        command_prefix: Sequence[str] = (),
        serve_args: Sequence[str] = (),
        call_in: Callable[[Callable[[], Any]], Any] = _call_here,
        **config: Any,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.command_prefix = tuple(command_prefix)
        self.serve_args = tuple(serve_args)  # more ``habroker serve`` options (--event-loop)
        self.call_in = call_in
        client, ha, http = call_in(lambda: free_ports(3))
        self.config: dict[str, Any] = {
            "brokerName": "broker-a",
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "listenPort": client,
            "haListenPort": ha,
            "httpListenPort": http,
            # no VIP channel (listenPort - 2) on random ports: it could collide; tests of it set it
            "fastListenPort": 0,
            "storePathRootDir": str(self.root / "store"),
        }
        self.config.update(config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``listenPort``: RocketMQ's client port (the remoting protocol)."""
        return f"127.0.0.1:{self.config['listenPort']}"

    @property
    def http_address(self) -> str:
        """``httpListenPort``: the HTTP API (habroker.client, the CLI, admin, /metrics)."""
        return f"127.0.0.1:{self.config['httpListenPort']}"

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.config['haListenPort']}"

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    def write_config(self) -> Path:
        path = self.root / "broker.conf"
        lines = []
        for key, value in self.config.items():
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            lines.append(properties_line(key, text))
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, wait: bool = True, timeout: float = 30.0) -> LocalBroker:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(
                f"broker {self.http_address} is already running (pid {self.proc.pid})"
            )
        conf = self.write_config()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HABROKER_")}
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        try:
            self.proc = subprocess.Popen(
                [
                    *self.command_prefix,
                    sys.executable,
                    "-m",
                    "habroker",
                    "serve",
                    "--config",
                    str(conf),
                    "--exit-with-parent",  # a harness killed before its cleanup leaves none
                    *self.serve_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; log:\n{self.tail_log()}"
                )
            if self.call_in(self._healthy):
                return
            time.sleep(0.05)
        raise TimeoutError(
            f"broker {self.http_address} not healthy after {timeout}s; log:\n{self.tail_log()}"
        )

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_address}/healthz", timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def signal(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"broker {self.http_address} is not running")
        os.kill(self.proc.pid, sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the store can tell."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait: a clean shutdown (SIGKILL if it does not come)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- small HTTP helpers for scripts and tests ------------------------------------------
    def request(
        self, method: str, path: str, payload: Any | None = None, timeout: float = 10.0
    ) -> tuple[int, Any]:
        result: tuple[int, Any] = self.call_in(
            lambda: self._request(method, path, payload, timeout)
        )
        return result

    def _request(
        self, method: str, path: str, payload: Any | None, timeout: float
    ) -> tuple[int, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            f"http://{self.http_address}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data else {},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                body = resp.read()
                return resp.status, json.loads(body) if body else None
        except urllib.error.HTTPError as err:
            body = err.read()
            try:
                return err.code, json.loads(body)
            except ValueError:
                return err.code, body.decode(errors="replace")

    def status(self) -> dict[str, Any]:
        code, body = self.request("GET", "/v1/status")
        if code != 200:
            raise RuntimeError(f"status {code}: {body}")
        result: dict[str, Any] = body
        return result


class LocalGroup:
    """A master and ``slaves`` slaves replicating from it, each its own process."""

    def __init__(self, root: Path, slaves: int = 1, mode: str = "ASYNC", **config: Any) -> None:
        role = {"SYNC": "SYNC_MASTER", "ASYNC": "ASYNC_MASTER"}[mode.upper()]
        self.master = LocalBroker(Path(root) / "master", brokerId=0, brokerRole=role, **config)
        self.slaves = [
            LocalBroker(
                Path(root) / f"slave-{i}",
                brokerId=i,
                brokerRole="SLAVE",
                haMasterAddress=self.master.ha_address,
                masterAddress=self.master.address,
                masterHttpAddress=self.master.http_address,
                **config,
            )
            for i in range(1, slaves + 1)
        ]

    @property
    def brokers(self) -> list[LocalBroker]:
        return [self.master, *self.slaves]

    @property
    def http_endpoints(self) -> str:
        """``0=host:port,1=host:port`` of the HTTP API — what habroker.client and the Spark
        connector take."""
        return ",".join(f"{b.config['brokerId']}={b.http_address}" for b in self.brokers)

    @property
    def namesrv_addr(self) -> str:
        """Every broker's client address, ``;``-separated: what RocketMQ clients take as
        ``namesrvAddr`` (each broker answers route requests for its group)."""
        return ";".join(b.address for b in self.brokers)

    def http_broker_map(self) -> Mapping[int, str]:
        """HTTP API addresses by brokerId."""
        return {int(b.config["brokerId"]): b.http_address for b in self.brokers}

    def start(self) -> LocalGroup:
        self.master.start()
        for slave in self.slaves:
            slave.start()
        return self

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()

    def wait_connected(self, timeout: float = 30.0) -> LocalGroup:
        """Until every slave reports its HA connection up: a healthy slave process may still
        be dialling its master, and a test that reads ``connected`` right after start races it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((s.status().get("slave") or {}).get("connected") for s in self.slaves):
                return self
            time.sleep(0.05)
        raise TimeoutError(f"slaves not connected to {self.master.ha_address} after {timeout}s")

    def wait_replicated(self, timeout: float = 60.0) -> None:
        """Until every slave has the master's max offset."""
        deadline = time.monotonic() + timeout
        target = -1
        while time.monotonic() < deadline:
            target = self.master.status()["maxOffset"]
            if all(s.status()["maxOffset"] >= target for s in self.slaves):
                return
            time.sleep(0.05)
        offsets = [s.status()["maxOffset"] for s in self.slaves]
        raise TimeoutError(f"slaves at {offsets}, master at {target} after {timeout}s")

    def __enter__(self) -> LocalGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalDLedgerGroup:
    """``peers`` DLedger peers (n0, n1, ...) of one group, each its own process; the DLedger
    ports are picked before any peer starts, since every peer names all of them.  ``slots``
    reserves ports for peers a membership change may add later (:meth:`add_peer`)."""

    def __init__(self, root: Path, peers: int = 3, slots: int | None = None, **config: Any) -> None:
        self.root = Path(root)
        self.config = config
        clients, ports = port_pairs(max(slots or peers, peers))
        self.clients = clients
        self.addresses = [f"n{i}-127.0.0.1:{port}" for i, port in enumerate(ports)]
        self.peers_text = self.members_text(peers)
        self.peers = [self._peer(i, self.peers_text) for i in range(peers)]

    def members_text(self, count: int) -> str:
        """``dLegerPeers`` of the first ``count`` peers."""
        return ";".join(self.addresses[:count])

    def _peer(self, i: int, peers_text: str) -> LocalBroker:
        return LocalBroker(
            self.root / f"n{i}",
            listenPort=self.clients[i],
            enableDLegerCommitLog=True,
            dLegerSelfId=f"n{i}",
            dLegerPeers=peers_text,
            **self.config,
        )

    # -- membership change, one peer at a time (the operator's order: docs/dledger.md) ------
    def set_members(self, count: int, peers: Sequence[LocalBroker] | None = None) -> None:
        """Tell every running peer (or ``peers``) the membership of the first ``count``."""
        text = self.members_text(count)
        for peer in self.peers if peers is None else peers:
            if not peer.running:
                continue
            code, body = peer.request("PUT", "/v1/admin/dledger/peers", {"peers": text})
            if code != 200:
                raise RuntimeError(f"{peer.root.name}: membership {text}: {code} {body}")

    def add_peer(self) -> LocalBroker:
        """The next peer joins: every member learns the new list first, then the new peer
        starts with it (it cannot disturb elections: its empty log loses every vote)."""
        count = len(self.peers) + 1
        if count > len(self.addresses):
            raise ValueError(f"no port reserved for peer n{count - 1} (slots)")
        self.set_members(count)
        peer = self._peer(count - 1, self.members_text(count))
        self.peers.append(peer)
        peer.start()
        return peer

    def remove_peer(self, timeout: float = 30.0) -> LocalBroker:
        """The last peer leaves: leadership moves away from it first, every peer (itself
        included) learns the list without it, then it stops."""
        leaving = self.peers[-1]
        count = len(self.peers) - 1
        leader = self.leader(timeout)
        if leader is leaving:
            self.transfer_leadership(leader, [f"n{i}" for i in range(count)], timeout)
            self.leader(timeout, exclude=[leaving])
        self.set_members(count)
        self.peers.pop()
        leaving.stop()
        return leaving

    def transfer_leadership(
        self, leader: LocalBroker, transferees: Sequence[str], timeout: float
    ) -> str:
        """``leader`` hands leadership to one of ``transferees`` (tried in turn), asking again
        while each is too far behind (FALL_BEHIND_TOO_MUCH: a peer restarted under load is still
        catching up; the operator likewise asks again on its next sweep).  Answers who took it."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            transferee = transferees[attempt % len(transferees)]
            attempt += 1
            code, body = leader.request(
                "POST",
                "/v1/admin/dledger/leadership-transfer",
                {"transfereeId": transferee},
                timeout=timeout,
            )
            if code == 200:
                return transferee
            if "FALL_BEHIND_TOO_MUCH" not in str(body) or time.monotonic() > deadline:
                raise RuntimeError(
                    f"leadership transfer {leader.root.name} -> {transferee}: {code} {body}"
                )
            time.sleep(0.2)

    def start(self, wait: bool = True) -> LocalDLedgerGroup:
        for peer in self.peers:
            peer.start(wait=False)
        if wait:
            for peer in self.peers:
                peer.wait_healthy()
        return self

    def stop(self) -> None:
        for peer in self.peers:
            peer.stop()

    def dledger_status(self, peer: LocalBroker) -> dict[str, Any] | None:
        """The peer's ``dledger`` status, or None when it does not answer."""
        if not peer.running:
            return None
        try:
            code, body = peer.request("GET", "/v1/status", timeout=2)
        except OSError:
            return None
        return cast(dict[str, Any], body["dledger"]) if code == 200 else None

    def leader(self, timeout: float = 30.0, *, exclude: Sequence[LocalBroker] = ()) -> LocalBroker:
        """The peer that leads and has become master (takes writes), once one does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for peer in self.peers:
                if peer in exclude or not peer.running:
                    continue
                try:
                    code, body = peer.request("GET", "/v1/status", timeout=2)
                except OSError:
                    continue
                if code == 200 and body["dledger"]["role"] == "LEADER" and body["brokerId"] == 0:
                    return peer
            time.sleep(0.05)
        raise TimeoutError(f"no leader took writes within {timeout}s")

    def wait_converged(self, timeout: float = 60.0) -> int:
        """Until every running peer has committed the same ledger end; returns that index."""
        deadline = time.monotonic() + timeout
        seen: list[Any] = []
        while time.monotonic() < deadline:
            seen = [self.dledger_status(p) for p in self.peers if p.running]
            ends = {(s["ledgerEndIndex"], s["committedIndex"]) for s in seen if s}
            if len(ends) == 1 and all(seen):
                end, committed = ends.pop()
                if end == committed:
                    return int(end)
            time.sleep(0.1)
        raise TimeoutError(f"peers did not converge in {timeout}s: {seen}")

    def __enter__(self) -> LocalDLedgerGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def local_broker(root: Path, **config: Any) -> Iterator[LocalBroker]:
    broker = LocalBroker(root, **config).start()
    try:
        yield broker
    finally:
        broker.stop()
