"""config/*.json written by a Java RocketMQ broker: read, kept and written back its way."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from habroker import fastjson
from habroker.metadata import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    MetadataError,
    SubscriptionGroupManager,
    TopicConfigManager,
)

DATA = Path(__file__).resolve().parent / "data" / "rocketmq-config"
VERSIONS = ["4.9.7", "5.3.1"]
GROUP_KEY = "TopicTest@please_rename_unique_group_name_4"


@pytest.fixture(params=VERSIONS)
def java_config(request, tmp_path) -> tuple[str, Path]:
    config = tmp_path / "config"
    shutil.copytree(DATA / request.param, config)
    return request.param, config


def test_java_files_are_not_strict_json():
    """The premise: a strict parser refuses what RocketMQ writes."""
    import json

    for version in VERSIONS:
        with pytest.raises(ValueError):
            json.loads((DATA / version / "consumerOffset.json").read_text())


def test_reads_every_table_a_java_broker_wrote(java_config):
    version, config = java_config
    offsets = ConsumerOffsetManager(config)
    assert offsets.table[GROUP_KEY] == {0: 250, 1: 251, 2: 0, 3: 9007199254740993}
    assert offsets.query("g1", "%RETRY%g1", 0) == 0
    topics = TopicConfigManager(config)
    test_topic = topics.get("TopicTest")
    assert test_topic is not None
    assert (test_topic.readQueueNums, test_topic.perm) == (4, 6)
    assert topics.data_version.counter == 1
    groups = SubscriptionGroupManager(config)
    assert groups.find("TOOLS_CONSUMER").retryMaxTimes == 16
    delay = DelayOffsetManager(config)
    assert delay.table == {1: 3, 3: 17, 18: 0}
    assert (delay.data_version is not None) == (version == "5.3.1")


def test_writes_back_in_rocketmq_dialect_keeping_unknown_fields(java_config):
    version, config = java_config
    topics = TopicConfigManager(config)
    topics.create("orders", 8, 8, 6)
    groups = SubscriptionGroupManager(config)
    groups.update("g1", {"brokerId": 1})
    offsets = ConsumerOffsetManager(config)
    offsets.commit("g1", "orders", 2, 77)
    offsets.persist()
    DelayOffsetManager(config).persist()

    text = (config / "consumerOffset.json").read_text()
    # fastjson's form: tabs, integer keys unquoted, closing brace on its own line
    assert '\t\t"orders@g1":{2:77\n\t\t}' in text
    assert "{0:250,1:251,2:0,3:9007199254740993\n" in text
    assert not re.search(r'"\d+":', text)
    assert ConsumerOffsetManager(config).table[GROUP_KEY][3] == 9007199254740993

    delay_text = (config / "delayOffset.json").read_text()
    assert '"offsetTable":{1:3,3:17,18:0\n\t}' in delay_text
    assert ("dataVersion" in delay_text) == (version == "5.3.1")

    topic_json = fastjson.loads((config / "topics.json").read_text())
    assert topic_json["topicConfigTable"]["orders"]["writeQueueNums"] == 8
    group_json = fastjson.loads((config / "subscriptionGroup.json").read_text())
    assert group_json["subscriptionGroupTable"]["g1"]["brokerId"] == 1
    if version == "5.3.1":
        # fields habroker does not model survive its writes
        assert topic_json["topicConfigTable"]["TopicTest"]["attributes"] == {}
        assert group_json["forbiddenTable"] == {}
        policy = group_json["subscriptionGroupTable"]["TOOLS_CONSUMER"]["groupRetryPolicy"]
        assert policy == {"type": "CUSTOMIZED"}
        assert "consumeTimeoutMinute" in group_json["subscriptionGroupTable"]["TOOLS_CONSUMER"]


@pytest.mark.parametrize("version", VERSIONS)
def test_unchanged_tables_are_written_back_with_the_same_content(tmp_path, version):
    """Nothing lost or invented; the one addition is 5.x's stateVersion (0), which 4.9 ignores."""
    config = tmp_path / "config"
    shutil.copytree(DATA / version, config)
    for manager in (TopicConfigManager(config), SubscriptionGroupManager(config)):
        original = manager.path.read_text()
        manager.persist()
        written = fastjson.loads(manager.path.read_text())
        if version == "4.9.7":
            assert written["dataVersion"].pop("stateVersion") == 0
        assert written == fastjson.loads(original)
    delay = DelayOffsetManager(config)
    original = fastjson.loads(delay.path.read_text())
    delay.persist()
    assert fastjson.loads(delay.path.read_text()) == original
    if version == "4.9.7":
        offsets = ConsumerOffsetManager(config)
        want = {"offsetTable": fastjson.loads(offsets.path.read_text())["offsetTable"]}
        got = fastjson.loads(fastjson.dumps(offsets.to_json(), pretty=True))
        assert {"offsetTable": got["offsetTable"]} == want


def test_topics_json_layout_is_fastjsons(tmp_path):
    mgr = TopicConfigManager(tmp_path)
    mgr.create("orders", 4, 4, 6)
    lines = (tmp_path / "topics.json").read_text().split("\n")
    assert lines[:3] == ["{", '\t"dataVersion":{', '\t\t"counter":1,']
    assert '\t\t"orders":{' in lines and '\t\t\t"perm":6,' in lines
    assert lines[-1] == "}"  # no newline at the end, like MixAll.string2File


def test_missing_or_unreadable_file_falls_back_to_bak(tmp_path):
    shutil.copy(DATA / "4.9.7" / "consumerOffset.json", tmp_path / "consumerOffset.json.bak")
    # Java's writer leaves only the .bak between deleting the file and renaming the new one
    assert ConsumerOffsetManager(tmp_path).table[GROUP_KEY][0] == 250
    (tmp_path / "consumerOffset.json").write_text("")
    assert ConsumerOffsetManager(tmp_path).table[GROUP_KEY][0] == 250
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"t@g":{0:')
    assert ConsumerOffsetManager(tmp_path).table[GROUP_KEY][0] == 250
    (tmp_path / "consumerOffset.json.bak").unlink()
    with pytest.raises(MetadataError, match="cannot read"):
        ConsumerOffsetManager(tmp_path)
    (tmp_path / "consumerOffset.json").write_text("[1, 2]")
    with pytest.raises(MetadataError, match="expected a JSON object"):
        ConsumerOffsetManager(tmp_path)


def test_slave_sync_through_plain_json_still_works(tmp_path):
    """The HTTP copy (json, so queue ids arrive as strings) merges into int-keyed tables."""
    import json

    master = ConsumerOffsetManager(tmp_path / "m")
    master.commit("g", "t", 0, 10)
    wire = json.loads(json.dumps(master.to_json()))
    slave = ConsumerOffsetManager(tmp_path / "s")
    slave.merge(wire)
    assert slave.table == {"t@g": {0: 10}}
    assert slave.data_version == master.data_version
    slave.persist()
    assert "{0:10\n" in (tmp_path / "s" / "consumerOffset.json").read_text()


def test_delay_offsets_replace_all_takes_the_masters_text(tmp_path):
    mgr = DelayOffsetManager(tmp_path)
    assert mgr.table == {} and not mgr.path.exists()
    mgr.replace_all((DATA / "5.3.1" / "delayOffset.json").read_text())
    assert DelayOffsetManager(tmp_path).table == {1: 3, 3: 17, 18: 0}
