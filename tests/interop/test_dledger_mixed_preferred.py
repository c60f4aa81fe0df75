"""A habroker leader hands leadership to a preferred real RocketMQ 4.9.7 peer.

preferredLeaderId is per broker: Java peer n1 prefers the habroker peer n2, n2 prefers Java
peer n0, and n0 prefers itself. n1 and n2 start without n0, so n2 comes to lead either way
(winning the election, or by n1's hand-over); n0 then joins empty, and once it has caught up
the habroker leader sends it DLedger's LEADERSHIP_TRANSFER: n0 runs for the next term and wins.
Entries written under both leaders are byte-identical on every peer.
"""

from __future__ import annotations

from typing import Any

from interop.dledger_java import start_dledger_group
from tests.interop.rocketmq_java import JavaNameServer, NetNS
from tests.interop.test_dledger_mixed_group import (
    HABROKER_ID,
    PEERS,
    Peer,
    create_topic,
    habroker_peer,
    produce,
    same_entries,
    wait_leader,
    wait_until,
)


def java_peer(netns: NetNS, self_id: str, extra: dict[str, Any]) -> Peer:
    started = start_dledger_group(netns, netns.root, PEERS, [self_id], extra=extra, wait=True)
    return Peer(self_id, java=started[self_id])


def test_a_habroker_leader_hands_leadership_to_a_caught_up_preferred_java_peer(
    netns: NetNS,
) -> None:
    JavaNameServer(netns, netns.root / "namesrv").start()
    habroker = habroker_peer(netns, {"preferredLeaderId": "n0"})
    habroker.start(wait=False)
    n1 = java_peer(netns, "n1", {"preferredLeaderId": HABROKER_ID})
    habroker.wait_healthy(60)
    n2 = Peer(HABROKER_ID, habroker=habroker)
    leader, term = wait_leader([n1, n2], only=HABROKER_ID)
    create_topic(netns, leader)
    acked = produce(netns, "habroker-leads", 300)
    print(f"\n{leader} leads term {term}; {len(acked)} acked")

    n0 = java_peer(netns, "n0", {"preferredLeaderId": "n0"})
    peers = [n0, n1, n2]
    new_leader, new_term = wait_leader(peers, min_term=term + 1, only="n0", timeout=120)
    print(f"{n2} handed leadership to {new_leader}: term {new_term}")
    log = habroker.log_path.read_text()
    assert "handing leadership of term" in log and "to n0: SUCCESS" in log

    acked += produce(netns, "java-leads", 30)
    entries = wait_until(same_entries(peers, len(acked)), "the same entries on every peer")
    print(f"{len(acked)} acked; entries on every peer: {entries}")
    assert n2.status() == ("FOLLOWER", new_term)
    for peer in peers:
        peer.kill()
