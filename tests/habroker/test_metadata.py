import json

import pytest
from habroker.metadata import (
    ConsumerOffsetManager,
    MetadataError,
    SubscriptionGroupManager,
    TopicConfigManager,
)


def test_topics_persist_in_rocketmq_shape(tmp_path):
    mgr = TopicConfigManager(tmp_path)
    cfg, changed = mgr.create("orders", 4, 4, 6)
    assert changed and cfg.writable and cfg.readable
    _, changed_again = mgr.create("orders", 4, 4, 6)
    assert not changed_again
    data = json.loads((tmp_path / "topics.json").read_text())
    assert data["topicConfigTable"]["orders"]["writeQueueNums"] == 4
    assert data["dataVersion"]["counter"] == 1
    assert TopicConfigManager(tmp_path).get("orders") == cfg


@pytest.mark.parametrize(
    ("name", "rq", "perm"), [("bad topic", 4, 6), ("x" * 128, 4, 6), ("t", 0, 6), ("t", 4, 8)]
)
def test_bad_topics(tmp_path, name, rq, perm):
    with pytest.raises(MetadataError):
        TopicConfigManager(tmp_path).create(name, rq, 4, perm)


def test_replace_all_only_on_new_version(tmp_path):
    master = TopicConfigManager(tmp_path / "m")
    master.create("a", 2, 2, 6)
    slave = TopicConfigManager(tmp_path / "s")
    assert slave.replace_all(master.to_json()) is True
    assert slave.get("a") is not None
    assert slave.replace_all(master.to_json()) is False


def test_subscription_groups(tmp_path):
    mgr = SubscriptionGroupManager(tmp_path)
    assert mgr.find("never").whichBrokerWhenConsumeSlowly == 1
    cfg = mgr.update("g1", {"whichBrokerWhenConsumeSlowly": 2, "brokerId": 0})
    assert cfg.whichBrokerWhenConsumeSlowly == 2
    assert SubscriptionGroupManager(tmp_path).find("g1").whichBrokerWhenConsumeSlowly == 2
    with pytest.raises(MetadataError, match="unknown subscription-group field"):
        mgr.update("g1", {"nope": 1})
    with pytest.raises(MetadataError, match="expected an integer"):
        mgr.update("g1", {"brokerId": "1"})


def test_consumer_offsets_merge_never_deletes(tmp_path):
    mgr = ConsumerOffsetManager(tmp_path)
    mgr.commit("g", "t", 0, 10)
    mgr.commit("g", "t", 1, 5)
    mgr.persist()
    again = ConsumerOffsetManager(tmp_path)
    assert again.query("g", "t", 1) == 5
    again.merge({"offsetTable": {"t@g": {"0": 12}}})
    assert again.query("g", "t", 0) == 12 and again.query("g", "t", 1) == 5
    with pytest.raises(MetadataError):
        mgr.commit("g", "t", 0, -1)
