"""MemberState: who this peer is, who its peers are, its role, term and vote.

The term and the vote are persisted (``<store>/dledger-<selfId>/currterm``, DLedger's
``currTerm``/``voteLeader`` properties, written through a temporary file and a rename) before
any answer depends on them: a peer that restarts never votes twice in one term.

Membership: ``peers`` starts as ``dLegerPeers``; a membership change (habroker's, one peer
at a time, driven by the operator: docs/dledger.md) replaces it and persists the new list in
``<store>/dledger-<selfId>/membership`` before answering, and a restarted peer takes that file
over its configuration (which may still name the list before the change).  A peer left out of
the list is *removed*: it never runs for leader.  ``addresses`` keeps every peer ever named, so
a removed peer still knows its own RPC address.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from habroker.config import broker_id_of, parse_peers

__all__ = ["MemberState", "Role", "broker_id_of", "parse_peers"]

log = logging.getLogger(__name__)

TERM_PERSIST_FILE = "currterm"
MEMBERSHIP_FILE = "membership"


class Role(StrEnum):
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"
    CANDIDATE = "CANDIDATE"


@dataclass
class MemberState:
    group: str
    self_id: str
    peers: dict[str, str]
    directory: Path
    role: Role = Role.CANDIDATE
    term: int = 0
    vote_for: str | None = None
    leader_id: str | None = None
    known_max_term: int = -1
    transferee: str | None = None
    term_to_take_leadership: int = -1
    peers_live: dict[str, bool] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.addresses = {**self.addresses, **self.peers}
        self._load()
        self._load_membership()

    # -- persistence -----------------------------------------------------------------------
    @property
    def term_file(self) -> Path:
        return self.directory / TERM_PERSIST_FILE

    def _load(self) -> None:
        path = self.term_file
        if not path.exists():
            return
        values = _read_properties(path)
        if values.get("currTerm"):
            self.term = int(values["currTerm"])
        self.vote_for = values.get("voteLeader") or None
        log.info(
            "dledger %s: term %d, voted for %s (from %s)",
            self.self_id,
            self.term,
            self.vote_for,
            path,
        )

    @property
    def membership_file(self) -> Path:
        return self.directory / MEMBERSHIP_FILE

    def _load_membership(self) -> None:
        path = self.membership_file
        if not path.exists():
            return
        text = _read_properties(path).get("peers")
        if not text:
            return
        peers = parse_peers(text, None)
        if peers != self.peers:
            log.info(
                "dledger %s: membership %s (from %s, over dLegerPeers %s)",
                self.self_id,
                ";".join(peers),
                path,
                ";".join(self.peers),
            )
        self.addresses.update(peers)
        self.peers = peers

    def set_peers(self, peers: dict[str, str]) -> None:
        """A new membership, persisted before it is used (see the module docstring)."""
        _write_atomically(
            self.membership_file, "peers=" + ";".join(f"{k}-{v}" for k, v in peers.items()) + "\n"
        )
        self.addresses.update(peers)
        self.peers = dict(peers)
        for gone in [p for p in self.peers_live if p not in peers]:
            del self.peers_live[gone]

    def _persist(self) -> None:
        _write_atomically(
            self.term_file, f"currTerm={self.term}\nvoteLeader={self.vote_for or ''}\n"
        )

    # -- transitions -----------------------------------------------------------------------
    def set_vote_for(self, peer_id: str | None) -> None:
        self.vote_for = peer_id
        self._persist()

    def next_term(self) -> int:
        """A candidate's new term: past any term it has heard of; the vote is cleared."""
        assert self.role == Role.CANDIDATE, self.role
        self.term = self.known_max_term if self.known_max_term > self.term else self.term + 1
        self.vote_for = None
        self._persist()
        return self.term

    def change_to_leader(self, term: int) -> None:
        assert term == self.term, (term, self.term)
        self.role = Role.LEADER
        self.leader_id = self.self_id
        self.peers_live.clear()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        assert term == self.term, (term, self.term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None

    def change_to_candidate(self, term: int) -> None:
        self.known_max_term = max(self.known_max_term, term)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.transferee = None

    # -- facts -------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self.role == Role.FOLLOWER

    @property
    def is_candidate(self) -> bool:
        return self.role == Role.CANDIDATE

    def is_peer(self, peer_id: str | None) -> bool:
        return peer_id is not None and peer_id in self.peers

    @property
    def is_member(self) -> bool:
        """False on a peer the membership has left out (it never runs for leader)."""
        return self.self_id in self.peers

    def is_quorum(self, count: int) -> bool:
        return count >= len(self.peers) // 2 + 1

    @property
    def others(self) -> list[str]:
        return [p for p in self.peers if p != self.self_id]

    @property
    def self_address(self) -> str:
        return self.addresses[self.self_id]

    @property
    def leader_address(self) -> str | None:
        return None if self.leader_id is None else self.addresses.get(self.leader_id)


def _read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def _write_atomically(path: Path, text: str) -> None:
    """Through a temporary file, fsynced, and a rename: a crash leaves the old or the new."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
