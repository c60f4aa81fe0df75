"""The DLedger oracle on its own: three real RocketMQ 4.9.7 DLedger peers elect a leader, and
after the leader is killed (SIGKILL) the two left elect a new one at a higher term."""

from __future__ import annotations

import time

from interop.dledger_java import start_dledger_group, wait_leader
from tests.interop.rocketmq_java import NetNS


def test_three_java_peers_elect_and_reelect_after_leader_killed(netns: NetNS) -> None:
    brokers = start_dledger_group(netns, netns.root)
    leader, term = wait_leader(brokers.values(), followers=2)
    assert term >= 1
    for broker in brokers.values():
        if broker is not leader:
            last = broker.role()
            assert last is not None and last.role == "FOLLOWER" and last.term == term

    killed = time.monotonic()
    leader.kill()
    survivors = [b for b in brokers.values() if b is not leader]
    new_leader, new_term = wait_leader(survivors, min_term=term + 1, followers=1, timeout=90)
    took = time.monotonic() - killed
    print(
        f"\nfirst leader {leader.self_id} term {term}; killed; "
        f"{new_leader.self_id} leads term {new_term} after {took:.1f} s"
    )
    assert new_leader is not leader and new_term > term
    for broker in survivors:  # no graceful shutdown needed: saves the teardown grace
        broker.kill()
