import pytest
from habroker.config import BrokerConfig, BrokerRole, ConfigError, FlushDiskType, read_properties


def test_defaults_are_rocketmq_defaults():
    cfg = BrokerConfig.load(environ={})
    assert cfg.listenPort == 10911 and cfg.haListenPort == 10912
    assert cfg.httpListenPort == 10913  # habroker's HTTP API, beside RocketMQ's two ports
    assert cfg.mappedFileSizeCommitLog == 1073741824
    assert cfg.mappedFileSizeConsumeQueue == 6_000_000
    assert cfg.haTransferBatchSize == 32768 and cfg.haMaxGapNotInSync == 256 * 1024 * 1024
    assert cfg.accessMessageInMemoryMaxRatio == 40 and cfg.slaveReadEnable is False
    assert (
        cfg.brokerRole is BrokerRole.ASYNC_MASTER and cfg.flushDiskType is FlushDiskType.ASYNC_FLUSH
    )


def test_file_then_env_then_overrides(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nbrokerName = b1\nbrokerRole=SLAVE\nbrokerId=1\nlistenPort: 20000\n")
    cfg = BrokerConfig.load(
        conf, environ={"HABROKER_brokerId": "2", "OTHER": "x"}, listenPort=20001
    )
    assert (cfg.brokerName, cfg.brokerRole, cfg.brokerId, cfg.listenPort) == (
        "b1",
        BrokerRole.SLAVE,
        2,
        20001,
    )


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"brokerid": "1"}, "unknown key 'brokerid' (did you mean brokerId?)"),
        ({"listenPort": "abc"}, "bad value for listenPort"),
        ({"slaveReadEnable": "yes"}, "expected true or false"),
        ({"flushDiskType": "SOMETIMES"}, "one of ASYNC_FLUSH, SYNC_FLUSH"),
        ({"brokerRole": "SLAVE"}, "a SLAVE needs a brokerId >= 1"),
        ({"brokerId": "3"}, "a master (ASYNC_MASTER) has brokerId 0"),
        ({"haTransferBatchSize": str(8 * 1024 * 1024)}, "haTransferBatchSize"),
        ({"haAsyncTransferLingerMs": "-1"}, "haAsyncTransferLingerMs=-1: 0..1000"),
        ({"haAsyncTransferLingerMs": "1001"}, "haAsyncTransferLingerMs=1001: 0..1000"),
        ({"haShutdownDrainTimeoutMs": "-1"}, "haShutdownDrainTimeoutMs=-1: 0..60000"),
        ({"haShutdownDrainTimeoutMs": "60001"}, "haShutdownDrainTimeoutMs=60001: 0..60000"),
        ({"mappedFileSizeConsumeQueue": "30"}, "multiple of 20"),
        ({"deleteWhen": "25"}, "deleteWhen"),
        ({"haMasterAddress": "nohost"}, "expected host:port"),
        ({"httpListenPort": "0"}, "httpListenPort=0: must be 1..65535"),
        ({"httpListenPort": "65536"}, "httpListenPort=65536: must be 1..65535"),
        ({"httpListenPort": "10911"}, "listenPort=10911: the same port as httpListenPort"),
        ({"httpListenPort": "10912"}, "haListenPort=10912: the same port as httpListenPort"),
        ({"listenPort": "10912"}, "listenPort=10912: the same port as haListenPort"),
        (
            {"listenPort": "7", "haListenPort": "8", "httpListenPort": "8"},
            "haListenPort=8: the same port as httpListenPort",
        ),
    ],
)
def test_bad_config_names_the_key(values, fragment):
    with pytest.raises(ConfigError) as exc:
        BrokerConfig.from_mapping(values)
    assert fragment in str(exc.value)


def test_bad_properties_line_names_file_and_line(tmp_path):
    conf = tmp_path / "b.conf"
    conf.write_text("brokerName=a\nbad\\uZZZZ=1\n")
    with pytest.raises(ConfigError, match=r"b.conf:2: "):
        read_properties(conf)
    # a bare word is a key with an empty value in Java, so it is judged as a key
    conf.write_text("brokerName=a\njust-a-word\n")
    with pytest.raises(ConfigError, match="unknown key 'just-a-word'"):
        BrokerConfig.load(conf, environ={})


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "nope.conf", environ={})


def test_runtime_updates_only_for_runtime_keys():
    cfg = BrokerConfig.load(environ={})
    new = cfg.with_updates({"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": "30"})
    assert new.slaveReadEnable is True and new.accessMessageInMemoryMaxRatio == 30
    assert cfg.slaveReadEnable is False
    with pytest.raises(ConfigError, match="cannot be changed at runtime"):
        cfg.with_updates({"listenPort": 1})
    with pytest.raises(ConfigError, match="accessMessageInMemoryMaxRatio"):
        cfg.with_updates({"accessMessageInMemoryMaxRatio": 101})


def test_properties_round_trip():
    cfg = BrokerConfig.load(environ={}, brokerRole="SYNC_MASTER", slaveReadEnable=True)
    again = BrokerConfig.from_mapping(cfg.to_properties())
    assert again == cfg


def test_transfer_caps_are_bounded_and_changeable_at_runtime():
    cfg = BrokerConfig.load(environ={})
    assert (cfg.maxTransferCountOnMessageInMemory, cfg.maxTransferBytesOnMessageInDisk) == (
        1024,
        4 * 1024 * 1024,
    )
    new = cfg.with_updates({"maxTransferCountOnMessageInMemory": "32"})
    assert new.maxTransferCountOnMessageInMemory == 32
    with pytest.raises(
        ConfigError, match=r"maxTransferBytesOnMessageInMemory=16777216: 1\.\.8388608"
    ):
        cfg.with_updates({"maxTransferBytesOnMessageInMemory": 16 * 1024 * 1024})
    with pytest.raises(ConfigError, match="maxTransferCountOnMessageInDisk=0: must be positive"):
        BrokerConfig.load(environ={}, maxTransferCountOnMessageInDisk=0)
