"""Read redirection: which broker a consumer should pull from next (spec §5.1-5.2).

A consumer whose unread backlog is larger than the share of RAM the page cache can be expected
to hold (``accessMessageInMemoryMaxRatio``) is reading cold data from disk; RocketMQ sends it to
a slave (``whichBrokerWhenConsumeSlowly``) so the master's page cache keeps serving producers
and caught-up consumers. A slave sends a consumer that has caught up back to the master.
"""

from __future__ import annotations

MASTER_ID = 0


def suggest_pulling_from_slave(
    max_phy_offset: int, max_phy_offset_pulling: int, in_memory_span: int
) -> bool:
    """True when the bytes behind what this pull read exceed ``in_memory_span`` (the store's
    ``accessMessageInMemoryMaxRatio`` % of RAM, :func:`habroker.store.store_util.in_memory_span`).

    RocketMQ measures from 0 when the pull examined no unit, which redirects consumers that
    are fully caught up on a large log; habroker counts no backlog then instead.
    """
    if max_phy_offset_pulling <= 0:
        return False
    return max_phy_offset - max_phy_offset_pulling > in_memory_span


def suggest_which_broker(
    *,
    is_slave: bool,
    slave_read_enable: bool,
    from_slave: bool,
    group_broker_id: int,
    which_broker_when_slow: int,
) -> int:
    """``suggestWhichBrokerId`` for a pull response (RocketMQ 5.x classic-mode rules)."""
    if not slave_read_enable:
        return MASTER_ID
    suggestion = which_broker_when_slow if from_slave else group_broker_id
    if is_slave and not from_slave:
        # a caught-up consumer on a slave goes back to the master (the master is online in
        # classic mode as far as the broker can tell)
        return MASTER_ID
    return suggestion
