"""Real RocketMQ 4.9.7 brokers in DLedger mode (``enableDLegerCommitLog``): the oracle for
habroker's DLedger peers.

A 4.9.7 broker with ``enableDLegerCommitLog=true`` keeps its commit log in DLedger 0.3.1.2 (the
jar ships in the 4.9.7 set) and takes its role from DLedger's election: leader = master,
follower = slave.  Each peer serves DLedger's RPCs on the port of its own ``dLegerPeers`` entry
and reaches the others at theirs, so a peer can be a habroker process, or the others can be told
to reach it through a recording proxy (:mod:`tests.interop.dledger_recorder`).  Roles are read
from the broker's log: after every role change the broker logs
``Finish handling broker role change succ=true term=T role=R ...``.  See docs/interop.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interop.rocketmq_java import BrokerSpec, JavaBroker, NetNS

GROUP = "RaftNode00"
#: The DLedger addresses of a three-peer group: id -> host:port.
PEERS: dict[str, str] = {
    "n0": "127.0.0.1:40911",
    "n1": "127.0.0.1:40912",
    "n2": "127.0.0.1:40913",
}
#: Remoting (client) port of the n-th peer; brokers in one namespace sit 10 ports apart.
BASE_LISTEN_PORT = 10911

_ROLE_CHANGE = re.compile(
    r"^(?P<time>\S+) .*Finish handling broker role change succ=(?P<succ>\w+) "
    r"term=(?P<term>-?\d+) role=(?P<role>\w+)"
)


def peers_text(peers: Mapping[str, str]) -> str:
    """``dLegerPeers``: ``id-host:port`` joined by ``;``."""
    return ";".join(f"{peer_id}-{address}" for peer_id, address in peers.items())


def parse_peers(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(";"):
        peer_id, _, address = item.strip().partition("-")
        out[peer_id] = address
    return out


@dataclass(frozen=True)
class RoleChange:
    """One ``Finish handling broker role change`` line of a broker log."""

    clock: str  # HH:MM:SS.mmm as logged
    succeeded: bool
    term: int
    role: str  # LEADER | FOLLOWER | CANDIDATE


def role_changes(log_text: str) -> list[RoleChange]:
    out = []
    for line in log_text.splitlines():
        match = _ROLE_CHANGE.match(line)
        if match:
            out.append(
                RoleChange(
                    match["time"], match["succ"] == "true", int(match["term"]), match["role"]
                )
            )
    return out


class JavaDLedgerBroker(JavaBroker):
    """A 4.9.7 broker whose commit log is the DLedger peer ``self_id`` of ``dledger_group``.

    ``peers`` is this broker's own ``dLegerPeers`` (id -> address): its own entry is where it
    listens, the others where it sends.  DLedger keeps its files in
    ``<store>/dledger-<self_id>/data`` (entries) and ``.../index``.
    """

    def __init__(
        self,
        ns: NetNS,
        root: Path,
        self_id: str,
        peers: Mapping[str, str],
        *,
        dledger_group: str = GROUP,
        listen_port: int = BASE_LISTEN_PORT,
        broker_name: str = "broker-a",
        version: str = "4.9.7",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if self_id not in peers:
            raise ValueError(f"{self_id} is not one of the peers {list(peers)}")
        self.self_id = self_id
        self.peers = dict(peers)
        self.dledger_group = dledger_group
        spec = BrokerSpec(
            broker_name=broker_name,
            listen_port=listen_port,
            extra={
                "enableDLegerCommitLog": True,
                "dLegerGroup": dledger_group,
                "dLegerPeers": peers_text(self.peers),
                "dLegerSelfId": self_id,
                **(extra or {}),
            },
        )
        super().__init__(ns, version, root, spec)

    @property
    def dledger_address(self) -> str:
        return self.peers[self.self_id]

    @property
    def dledger_port(self) -> int:
        return int(self.dledger_address.rpartition(":")[2])

    @property
    def dledger_dir(self) -> Path:
        return self.store_dir / f"dledger-{self.self_id}"

    @property
    def data_dir(self) -> Path:
        return self.dledger_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "logs" / "broker.log"

    def role_changes(self) -> list[RoleChange]:
        try:
            return role_changes(self.log_path.read_text(errors="replace"))
        except OSError:
            return []

    def role(self) -> RoleChange | None:
        """The last successful role change, or None before the first."""
        done = [c for c in self.role_changes() if c.succeeded]
        return done[-1] if done else None

    def __repr__(self) -> str:
        return (
            f"JavaDLedgerBroker({self.version} {self.self_id}@{self.dledger_address} "
            f"{self.address})"
        )


def start_dledger_group(
    ns: NetNS,
    root: Path,
    peers: Mapping[str, str] = PEERS,
    ids: Iterable[str] | None = None,
    *,
    via: Mapping[str, str] | None = None,
    dledger_group: str = GROUP,
    version: str = "4.9.7",
    extra: Mapping[str, Any] | None = None,
    wait: bool = True,
    listen_base: int = BASE_LISTEN_PORT,
    jvm_flags: Sequence[str] | None = None,
) -> dict[str, JavaDLedgerBroker]:
    """Java peers for ``ids`` (default: all of ``peers``), each under ``root/<id>``.

    Peers not in ``ids`` are left to the caller (a habroker process, or started later).  ``via``
    maps a peer id to the address the *other* peers use to reach it (a proxy in front of it);
    the peer itself still listens at its ``peers`` address.  The n-th peer of ``peers`` gets
    remoting port ``listen_base + 10 n`` (10911, 10921, ...).  With ``wait`` every started
    broker has booted on return.  ``jvm_flags`` replaces the interop JVM flags (a benchmark's).
    """
    order = list(peers)
    chosen = order if ids is None else list(ids)
    brokers: dict[str, JavaDLedgerBroker] = {}
    for self_id in chosen:
        view = {
            peer_id: address if peer_id == self_id else (via or {}).get(peer_id, address)
            for peer_id, address in peers.items()
        }
        brokers[self_id] = JavaDLedgerBroker(
            ns,
            root / self_id,
            self_id,
            view,
            dledger_group=dledger_group,
            listen_port=listen_base + 10 * order.index(self_id),
            version=version,
            extra=extra,
        )
    for broker in brokers.values():
        if jvm_flags is not None:
            broker.jvm_flags = tuple(jvm_flags)
        broker.start(wait=False)
    if wait:
        for broker in brokers.values():
            broker.wait_booted()
    return brokers


def wait_role(
    broker: JavaDLedgerBroker,
    role: str,
    *,
    min_term: int = 0,
    timeout: float = 60.0,
) -> RoleChange:
    """Until ``broker``'s last successful role change is ``role`` at a term >= ``min_term``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not broker.running:
            raise RuntimeError(f"{broker} is not running:\n{broker.tail_log()}")
        last = broker.role()
        if last is not None and last.role == role and last.term >= min_term:
            return last
        time.sleep(0.1)
    raise TimeoutError(
        f"{broker} not {role} (term >= {min_term}) after {timeout}s; changes "
        f"{broker.role_changes()}:\n{broker.tail_log()}"
    )


def wait_leader(
    brokers: Iterable[JavaDLedgerBroker],
    *,
    min_term: int = 0,
    followers: int = 0,
    timeout: float = 60.0,
) -> tuple[JavaDLedgerBroker, int]:
    """Until one running broker leads at a term >= ``min_term`` with at least ``followers`` of
    the others following at that term; that leader and its term."""
    candidates: Sequence[JavaDLedgerBroker] = list(brokers)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [b for b in candidates if b.running]
        roles = {b.self_id: b.role() for b in running}
        for broker in running:
            mine = roles[broker.self_id]
            if mine is None or mine.role != "LEADER" or mine.term < min_term:
                continue
            following = sum(
                1
                for other in running
                if other is not broker
                and (r := roles[other.self_id]) is not None
                and r.role == "FOLLOWER"
                and r.term == mine.term
            )
            if following >= followers:
                return broker, mine.term
        time.sleep(0.1)
    logs = "\n".join(f"{b}: {b.role_changes()}\n{b.tail_log(15)}" for b in candidates)
    raise TimeoutError(f"no leader (term >= {min_term}) after {timeout}s:\n{logs}")
