from habroker.read_policy import MASTER_ID, suggest_pulling_from_slave, suggest_which_broker
from habroker.store.store_util import in_memory_span


def test_backlog_over_ratio_suggests_slave():
    span = in_memory_span(1000, 40)  # 40 % of a "RAM" of 1000 bytes
    assert span == 400
    assert suggest_pulling_from_slave(10_000, 9_000, span) is True  # 1000 behind > 400
    assert suggest_pulling_from_slave(10_000, 9_700, span) is False  # 300 behind
    assert suggest_pulling_from_slave(10_000, 0, span) is False  # nothing examined: no backlog


def test_suggestion_rules():
    kw = dict(group_broker_id=0, which_broker_when_slow=2)
    assert (
        suggest_which_broker(is_slave=False, slave_read_enable=False, from_slave=True, **kw)
        == MASTER_ID
    )
    assert suggest_which_broker(is_slave=False, slave_read_enable=True, from_slave=True, **kw) == 2
    assert suggest_which_broker(is_slave=False, slave_read_enable=True, from_slave=False, **kw) == 0
    # a slave keeps a slow consumer, sends a caught-up one back to the master
    assert suggest_which_broker(is_slave=True, slave_read_enable=True, from_slave=True, **kw) == 2
    assert (
        suggest_which_broker(is_slave=True, slave_read_enable=True, from_slave=False, **kw)
        == MASTER_ID
    )
