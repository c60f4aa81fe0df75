"""A RocketMQ user's broker.conf: every RocketMQ key accepted, the whole .properties format."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import get_type_hints

import pytest
from habroker.config import (
    BrokerConfig,
    BrokerRole,
    ConfigError,
    FlushDiskType,
    properties_line,
    read_properties,
)
from habroker.rocketmq_keys import LEGACY_KEYS, ROCKETMQ_KEYS
from hypothesis import given
from hypothesis import strategies as st

DOC = Path(__file__).resolve().parents[2] / "docs" / "broker.md"

# RocketMQ's own sample (distribution/conf/2m-2s-async/broker-a.properties) plus the lines
# users add from the quick-start guides and blog posts.
BROKER_A = """\
#  Licensed to the Apache Software Foundation (ASF) ...
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
deleteWhen=04
fileReservedTime=48
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=rocketmq-nameserver1:9876;rocketmq-nameserver2:9876
defaultTopicQueueNums=4
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
listenPort=10911
brokerIP1=10.0.0.5
mappedFileSizeCommitLog=1073741824
mappedFileSizeConsumeQueue=300000
diskMaxUsedSpaceRatio=88
storePathRootDir={root}
storePathCommitLog={root}/commitlog
storePathConsumeQueue={root}/consumequeue
storePathIndex={root}/index
storeCheckpoint={root}/checkpoint
abortFile={root}/abort
maxMessageSize=65536
sendMessageThreadPoolNums=128
pullMessageThreadPoolNums=128
flushCommitLogLeastPages=4
transientStorePoolEnable=false
messageDelayLevel=1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
"""

INERT = [
    "abortFile",
    "pullMessageThreadPoolNums",
    "sendMessageThreadPoolNums",
    "storeCheckpoint",
    "storePathConsumeQueue",
    "storePathIndex",
    "transientStorePoolEnable",
]


def test_a_typical_rocketmq_broker_properties_loads(tmp_path, caplog):
    conf = tmp_path / "broker-a.properties"
    conf.write_text(BROKER_A.format(root=tmp_path / "store"))
    with caplog.at_level(logging.WARNING, logger="habroker.config"):
        cfg = BrokerConfig.load(conf, environ={})
    # implemented keys take effect
    assert (
        cfg.brokerRole is BrokerRole.ASYNC_MASTER and cfg.flushDiskType is FlushDiskType.ASYNC_FLUSH
    )
    assert (cfg.fileReservedTime, cfg.deleteWhen, cfg.diskMaxUsedSpaceRatio) == (48, "04", 88)
    assert cfg.autoCreateTopicEnable is True and cfg.maxMessageSize == 65536
    assert cfg.commit_log_dir == tmp_path / "store" / "commitlog"
    assert cfg.autoCreateSubscriptionGroup is True
    assert len(cfg.delay_levels_ms) == 18 and cfg.delay_levels_ms[-1] == 7_200_000
    # namesrvAddr takes effect: the broker registers with those name servers
    assert cfg.namesrvAddr == "rocketmq-nameserver1:9876;rocketmq-nameserver2:9876"
    # the rest is kept as written, and named in exactly one warning line
    assert cfg.unimplemented["sendMessageThreadPoolNums"] == "128"
    assert sorted(cfg.unimplemented) == INERT
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1, lines
    assert lines[0].endswith("(no effect): " + ", ".join(INERT))


def test_no_warning_when_every_key_is_implemented(tmp_path, caplog):
    conf = tmp_path / "b.conf"
    conf.write_text("brokerName=b\nfileReservedTime=1\n")
    with caplog.at_level(logging.WARNING, logger="habroker.config"):
        BrokerConfig.load(conf, environ={})
    assert not caplog.records


def test_the_whole_properties_format(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_bytes(
        b"! a bang comment\r\n"
        b"   # an indented comment\r\n"
        b"brokerName   broker-b\r\n"  # key value
        b"brokerClusterName:c1\r\n"  # key:value
        b"  deleteWhen = 01;\\\r\n"  # continuation line, leading blanks dropped
        b"      02;03\r\n"
        b"storePathRootDir=/tmp/caf\\u00e9\\ x\r\n"  # unicode escape, escaped blank
        b"messageDelayLevel=1s\\t5s\r\n"
        b"brokerIP2=a\\=b\\:c\r\n"
        b"fileReservedTime=1\r\n"
        b"fileReservedTime=2\r\n"  # a later duplicate wins, as in Java
    )
    cfg = BrokerConfig.load(conf, environ={})
    assert (cfg.brokerName, cfg.brokerClusterName) == ("broker-b", "c1")
    assert cfg.deleteWhen == "01;02;03"
    assert cfg.storePathRootDir == "/tmp/café x"
    assert cfg.unimplemented == {"brokerIP2": "a=b:c"}
    assert cfg.messageDelayLevel == "1s\t5s" and cfg.delay_levels_ms == (1000, 5000)
    assert cfg.fileReservedTime == 2


def test_latin1_file_is_read_as_java_reads_it(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_bytes("brokerName=caf\xe9\n".encode("iso-8859-1"))
    assert read_properties(conf) == {"brokerName": "café"}


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("sendMessageThreadPoolNum", "sendMessageThreadPoolNums"),
        ("mapedFileSizeCommitLog", "mappedFileSizeCommitLog"),  # RocketMQ 4.2's spelling
        ("NAMESRVADDR", "namesrvAddr"),
        ("brokerid", "brokerId"),
    ],
)
def test_unknown_key_suggests_the_closest_rocketmq_key(key, suggestion):
    with pytest.raises(ConfigError) as exc:
        BrokerConfig.from_mapping({key: "1"})
    assert f"unknown key {key!r} (did you mean {suggestion}?)" in str(exc.value)


def test_unknown_key_without_a_close_one():
    with pytest.raises(ConfigError, match=r"unknown key 'zzzTotallyMadeUp': neither RocketMQ"):
        BrokerConfig.from_mapping({"zzzTotallyMadeUp": "1"})


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("sendMessageThreadPoolNums", "lots", "bad value for sendMessageThreadPoolNums (int)"),
        ("sendMessageThreadPoolNums", str(2**31), "out of range for a Java int"),
        ("transientStorePoolEnable", "yes", "expected true or false"),
        ("logicalDiskSpaceCleanForciblyThreshold", "most", "(double)"),
    ],
)
def test_values_of_unimplemented_keys_are_checked(key, value, fragment):
    with pytest.raises(ConfigError) as exc:
        BrokerConfig.from_mapping({key: value})
    assert fragment in str(exc.value)


def test_env_overrides_reach_unimplemented_keys_too(tmp_path):
    cfg = BrokerConfig.load(
        environ={"HABROKER_sendMessageThreadPoolNums": "8", "HABROKER_namesrvAddr": "ns:9876"}
    )
    assert cfg.unimplemented == {"sendMessageThreadPoolNums": "8"}
    assert cfg.namesrvAddr == "ns:9876"
    with pytest.raises(ConfigError, match="unknown key 'noSuchKey'"):
        BrokerConfig.load(environ={"HABROKER_noSuchKey": "1"})


def test_runtime_updates_keep_the_unimplemented_keys():
    cfg = BrokerConfig.from_mapping({"sendMessageThreadPoolNums": "8"})
    new = cfg.with_updates({"fileReservedTime": "1"})
    assert new.unimplemented == {"sendMessageThreadPoolNums": "8"}


def test_rocketmq_default_max_message_size_with_small_files_starts_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="habroker.config"):
        cfg = BrokerConfig.load(environ={}, mappedFileSizeCommitLog=65536)
    assert cfg.maxMessageSize == 4 * 1024 * 1024
    (line,) = [r.getMessage() for r in caplog.records]
    assert "maxMessageSize=4194304" in line and "mappedFileSizeCommitLog=65536" in line
    with pytest.raises(ConfigError, match="maxMessageSize=0: must be positive"):
        BrokerConfig.from_mapping({"maxMessageSize": "0"})


def test_every_field_is_a_rocketmq_key_of_the_same_type_or_marked_habroker():
    """habroker's own keys are the ones docs/broker.md marks *habroker*; the rest parse the
    values RocketMQ's setters parse."""
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r"^\| ([a-zA-Z0-9.]+) \|.*$", DOC.read_text(), flags=re.M)
    }
    compatible = {int: {"int", "long"}, bool: {"boolean"}, str: {"String"}}
    hints = get_type_hints(BrokerConfig)
    fields = BrokerConfig.keys()
    for key in fields:
        if key.startswith("tls."):
            # RocketMQ's TlsSystemConfig: JVM system properties (or tls.config.file), which the
            # generated table of broker.conf setters does not list
            assert key in rows, f"{key}: not in docs/broker.md"
            continue
        if key not in ROCKETMQ_KEYS:
            assert "*habroker*" in rows[key], f"{key}: not a RocketMQ key, docs must say *habroker*"
            continue
        java_type = ROCKETMQ_KEYS[key][0]
        ours = hints[key] if hints[key] in compatible else str  # enums are Strings in Java
        assert java_type in compatible[ours], (key, java_type, hints[key])


def test_key_table_facts():
    """Spot checks of the generated table against RocketMQ's sources (tools/rocketmq_config_keys.py)."""
    assert ROCKETMQ_KEYS["namesrvAddr"][:2] == ("String", "BrokerConfig")
    assert ROCKETMQ_KEYS["sendMessageThreadPoolNums"][0] == "int"
    assert ROCKETMQ_KEYS["brokerId"][0] == "long"
    assert ROCKETMQ_KEYS["deleteWhen"][:2] == ("String", "MessageStoreConfig")
    assert ROCKETMQ_KEYS["serverWorkerThreads"][1] == "NettyServerConfig"
    assert ROCKETMQ_KEYS["listenPort"][1] == "BrokerConfig+NettyServerConfig"
    assert ROCKETMQ_KEYS["bindAddress"][2] == "5.3.1"  # NettyServerConfig gained it in 5.x
    assert "4.9.7" in ROCKETMQ_KEYS["haTransferBatchSize"][2]
    assert LEGACY_KEYS["storePathIndex"] == "String"
    assert len(ROCKETMQ_KEYS) > 400


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(key=_text.filter(bool), value=_text)
def test_properties_lines_read_back_exactly(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("p") / "x.conf"
    path.write_text(properties_line(key, value) + "\n" + properties_line("z", "end") + "\n")
    assert read_properties(path) == ({key: value, "z": "end"} if key != "z" else {"z": "end"})


def test_serve_starts_on_a_java_store_with_a_rocketmq_config(broker_factory, tmp_path):
    """A real broker process: RocketMQ's keys in its file, a Java broker's config/*.json in its
    store (unquoted integer keys). It starts, serves the Java broker's topics and offsets, and
    logs the unimplemented keys once."""
    import shutil

    data = Path(__file__).resolve().parent / "data" / "rocketmq-config" / "5.3.1"
    broker = broker_factory(
        "java-store",
        start=False,
        namesrvAddr="127.0.0.1:9876",
        sendMessageThreadPoolNums=16,
        deleteWhen="04",
        fileReservedTime=48,
        storePathIndex=str(tmp_path / "ignored"),
        mappedFileSizeCommitLog=1 << 20,  # with RocketMQ's default maxMessageSize (4 MiB)
    )
    shutil.copytree(data, Path(broker.config["storePathRootDir"]) / "config")
    broker.start()
    code, topics = broker.request("GET", "/v1/topics")
    assert code == 200 and "TopicTest" in topics["topicConfigTable"]
    code, offsets = broker.request("GET", "/v1/consumer-offsets")
    assert offsets["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]["3"] == (
        9007199254740993
    )
    log = broker.log_path.read_text()
    warnings = [line for line in log.splitlines() if "accepted but not implemented" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0]
    assert warnings[0].endswith(": sendMessageThreadPoolNums, storePathIndex")
    assert "maxMessageSize=4194304 does not fit" in log
    code, _ = broker.request("PUT", "/v1/consumer-offsets/g9/TopicTest/1", {"offset": 42})
    assert code == 200
    assert broker.stop() == 0
    # what it wrote back is still RocketMQ's dialect, the Java broker's offsets included
    text = (Path(broker.config["storePathRootDir"]) / "config" / "consumerOffset.json").read_text()
    assert '"TopicTest@g9":{1:42\n' in text
    assert "{0:250,1:251,2:0,3:9007199254740993\n" in text
