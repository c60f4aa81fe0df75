import pytest
from brokergroup_spark import plan
from brokergroup_spark.options import OptionError, parse_read_options, parse_write_options

NS = "127.0.0.1:10911; 127.0.0.1:10921"


def read(streaming=False, **opts):
    raw = {"namesrvAddr": NS, "topic": "t", **opts}
    return parse_read_options({k.lower(): str(v) for k, v in raw.items()}, streaming=streaming)


def test_defaults_follow_the_kafka_source():
    batch, stream = read(), read(streaming=True)
    assert batch.namesrv_addr == "127.0.0.1:10911;127.0.0.1:10921"
    assert (batch.starting, batch.ending, stream.starting) == ("earliest", "latest", "latest")
    assert batch.fail_on_data_loss and batch.max_records_per_partition is None
    assert batch.pull_batch_size == 1024 and batch.timeout == 30.0


def test_keys_arrive_lower_cased_and_are_matched_case_insensitively():
    opts = read(streaming=True, maxOffsetsPerTrigger=500, FAILONDATALOSS="False")
    assert opts.max_offsets_per_trigger == 500 and opts.fail_on_data_loss is False


def test_offsets_json():
    opts = read(startingOffsets='{"t": {"0": 23, "1": -2}}', endingOffsets='{"t": {"0": -1}}')
    assert opts.starting == {"t": {0: 23, 1: -2}} and opts.ending == {"t": {0: -1}}


@pytest.mark.parametrize(
    ("opts", "streaming", "message"),
    [
        ({"namesrvAddr": ""}, False, "namesrvAddr is required"),
        ({"namesrvAddr": "nohost"}, False, "expected host:port"),
        ({"namesrvAddr": "h:99999"}, False, "expected host:port"),
        ({"endpoints": "0=h:10913"}, False, "endpoints .* is gone.*Use namesrvAddr"),
        ({"discoverSlaves": "true"}, False, "discoverSlaves is gone"),
        ({"topic": None}, False, "topic .or topics"),
        ({"topics": "a,b"}, False, "not both"),
        ({"topic": "bad topic"}, False, "not a valid name"),
        ({"startingOfsets": "earliest"}, False, "did you mean 'startingOffsets'"),
        ({"startingOffsets": "latest"}, False, "for streaming reads"),
        ({"startingOffsets": "soon"}, False, "expected earliest, latest or JSON"),
        ({"startingOffsets": '{"u": {"0": 1}}'}, False, "not one of the topics"),
        ({"startingOffsets": '{"t": {"x": 1}}'}, False, "is not a number"),
        ({"startingOffsets": '{"t": {"0": -3}}'}, False, "-2 .earliest"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, False, "cannot be an ending offset"),
        ({"endingOffsets": "earliest"}, False, "would read nothing"),
        ({"endingOffsets": "latest"}, True, "applies to batch reads only"),
        ({"maxOffsetsPerTrigger": 10}, False, "applies to streaming reads only"),
        ({"maxOffsetsPerTrigger": 0}, True, "must be >= 1"),
        ({"failOnDataLoss": "yes"}, False, "expected true or false"),
        ({"pullBatchSize": 5000}, False, "between 1 and 1024"),
        ({"maxRecordsPerPartition": "many"}, False, "expected an integer"),
        ({"consumerGroup": "a b"}, False, "consumerGroup"),
    ],
)
def test_bad_options_are_rejected_clearly(opts, streaming, message):
    raw = {"namesrvAddr": NS, "topic": "t", **opts}
    raw = {k.lower(): str(v) for k, v in raw.items() if v is not None}
    with pytest.raises(OptionError, match=message):
        parse_read_options(raw, streaming=streaming)


def test_write_options():
    opts = parse_write_options({"namesrvaddr": NS, "topic": "t", "batchsize": "10"})
    assert (opts.topic, opts.batch_size, opts.namesrv_addr) == (
        "t",
        10,
        "127.0.0.1:10911;127.0.0.1:10921",
    )
    with pytest.raises(OptionError, match=r"unknown write option.*startingoffsets"):
        parse_write_options({"namesrvaddr": NS, "startingoffsets": "earliest"})
    with pytest.raises(OptionError, match="between 1 and 4096"):
        parse_write_options({"namesrvaddr": NS, "batchsize": "5000"})
    with pytest.raises(OptionError, match="between 1024 and 4194304"):
        parse_write_options({"namesrvaddr": NS, "batchbytes": str(8 << 20)})
    with pytest.raises(OptionError, match="Use namesrvAddr"):
        parse_write_options({"endpoints": "0=h:10913", "topic": "t"})


BOUNDS = {("t", 0): (10, 100), ("t", 1): (0, 50), ("u", 0): (0, 0)}


def test_resolve_offsets():
    assert plan.resolve("earliest", BOUNDS, name="s", default="latest") == {
        ("t", 0): 10,
        ("t", 1): 0,
        ("u", 0): 0,
    }
    spec = {"t": {0: 20, 1: -1}}
    assert plan.resolve(spec, BOUNDS, name="s", default="earliest") == {
        ("t", 0): 20,
        ("t", 1): 50,
        ("u", 0): 0,
    }
    with pytest.raises(OptionError, match="no queue 7"):
        plan.resolve({"t": {7: 1}}, BOUNDS, name="s", default="earliest")
    with pytest.raises(OptionError, match="past the queue's end"):
        plan.resolve({"t": {1: 51}}, BOUNDS, name="s", default="earliest")


def test_split_and_json_round_trip():
    parts = plan.ranges({("t", 0): 0, ("t", 1): 5}, {("t", 0): 25, ("t", 1): 5}, 10)
    assert [(p.queue_id, p.start, p.end) for p in parts] == [(0, 0, 10), (0, 10, 20), (0, 20, 25)]
    offsets = {("t", 0): 3, ("t", 1): 4}
    assert plan.to_json(offsets) == {"t": {"0": 3, "1": 4}}
    assert plan.from_json(plan.to_json(offsets)) == offsets
    # a queue the start does not know (added later) starts at its minimum
    parts = plan.ranges({}, {("t", 0): 100}, None, BOUNDS)
    assert [(p.start, p.end) for p in parts] == [(10, 100)]


def test_rate_limit_is_proportional_and_exact():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 900, ("t", 1): 90, ("t", 2): 10}
    end = plan.rate_limit(start, latest, 100)
    assert sum(end.values()) == 100
    assert end[("t", 0)] == 90 and end[("t", 1)] == 9 and end[("t", 2)] == 1
    assert plan.rate_limit(start, latest, 5000) == latest
    tiny = plan.rate_limit(start, latest, 1)
    assert sum(tiny.values()) == 1 and tiny[("t", 0)] == 1
