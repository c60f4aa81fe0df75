"""habroker.fastjson: RocketMQ's JSON dialect (unquoted integer keys, object keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from habroker import fastjson
from habroker.fastjson import ObjectKey
from hypothesis import given, settings
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parent / "data" / "rocketmq-config"

# strings built to confuse a scanner that is not tracking string state
_tricky = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "{0:1}",
            '{"a":{1:2}}',
            'x":1,2:"y',
            '\\"',
            "\\",
            '"',
            "}",
            "{",
            ",0:",
            "-1:",
            "\u2028\u2029",
            "\x00\x1f",
            "caf\u00e9 \U0001f600",
            "0",
            "-7",
        ]
    ),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _tricky,
)
_keys = st.one_of(_tricky, st.integers(min_value=-(2**63), max_value=2**63))
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_keys, children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=300)
@given(_values)
def test_round_trip_compact_and_pretty(value):
    assert fastjson.loads(fastjson.dumps(value)) == value
    assert fastjson.loads(fastjson.dumps(value, pretty=True)) == value


@settings(max_examples=300)
@given(
    st.recursive(
        _scalars,
        lambda c: st.lists(c, max_size=4) | st.dictionaries(_tricky, c, max_size=4),
        max_leaves=25,
    )
)
def test_without_int_keys_it_is_standard_json(value):
    """Only int keys differ from JSON: anything else is what json.loads reads."""
    text = fastjson.dumps(value)
    assert json.loads(text) == value
    assert fastjson.loads(json.dumps(value)) == value


@given(st.dictionaries(st.integers(-(2**40), 2**40), _tricky, min_size=1, max_size=5))
def test_int_keys_are_written_unquoted(table):
    text = fastjson.dumps({"brokerAddrs": table})
    first = next(iter(table))
    assert text.startswith(f'{{"brokerAddrs":{{{first}:')
    with pytest.raises(ValueError):
        json.loads(text)  # not JSON any more: that is the point
    assert fastjson.loads(text) == {"brokerAddrs": table}


def test_quoted_and_unquoted_keys_stay_distinct():
    assert fastjson.loads('{"0":"str",0:"int",-1:2}') == {"0": "str", 0: "int", -1: 2}
    assert fastjson.dumps({"0": "str", 0: "int"}) == '{"0":"str",0:"int"}'


def test_keys_inside_strings_are_left_alone():
    text = '{"remark":"{0:1} and \\"x\\":{2:3}","t":{5:"{7:8}"}}'
    assert fastjson.loads(text) == {"remark": '{0:1} and "x":{2:3}', "t": {5: "{7:8}"}}


def test_whitespace_anywhere_json_allows_it():
    assert fastjson.loads(' {\n\t 0 : [ 1 , { -3 :null } ] ,\r\n"a" : true } ') == {
        0: [1, {-3: None}],
        "a": True,
    }
    assert fastjson.loads(b'{"a":1}') == {"a": 1}
    assert fastjson.loads(bytearray(b"[]")) == []


@pytest.mark.parametrize(
    "text",
    [
        "{0.5:1}",  # only integers are bare keys
        "{1e3:1}",
        "{true:1}",
        "{abc:1}",
        "{0 1}",
        "{0:1,}",
        "[1,]",
        "{0:1} x",
        '{"a":01}',
        '{"a":"\x01"}',  # a raw control character in a string
        '{"a":"\\x"}',
        "{",
        "",
        "-",
        "[" * 300 + "]" * 300,  # nested past MAX_DEPTH
        "{[1]:2}",
    ],
)
def test_bad_text_is_a_decode_error(text):
    with pytest.raises(fastjson.JSONDecodeError):
        fastjson.loads(text)


def test_what_cannot_be_written():
    with pytest.raises(TypeError):
        fastjson.dumps({True: 1})
    with pytest.raises(TypeError):
        fastjson.dumps({1.5: 1})
    with pytest.raises(TypeError):
        fastjson.dumps({"a": object()})
    with pytest.raises(ValueError):
        fastjson.dumps(float("nan"))


def test_object_keys_as_consume_stats_has_them():
    mq = ObjectKey({"brokerName": "broker-a", "queueId": 0, "topic": 'T"x'})
    stats = {"consumeTps": 1.5, "offsetTable": {mq: {"brokerOffset": 10}}}
    text = fastjson.dumps(stats)
    assert text == (
        '{"consumeTps":1.5,"offsetTable":{{"brokerName":"broker-a","queueId":0,'
        '"topic":"T\\"x"}:{"brokerOffset":10}}}'
    )
    back = fastjson.loads(text)
    assert back == stats
    (key,) = back["offsetTable"]
    assert isinstance(key, ObjectKey) and key.as_dict()["topic"] == 'T"x'


def test_remoting_bodies_java_wrote():
    """Bodies from RocketMQ 4.9.7's own serializer: read, and written back byte for byte."""
    bodies = dict(
        line.rstrip("\n").split(" ", 1)
        for line in (DATA / "4.9.7" / "wire-bodies.txt").read_text(encoding="utf-8").splitlines()
    )
    route = fastjson.loads(bodies["route"])
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "127.0.0.2:10911"}
    stats = fastjson.loads(bodies["consumestats"])
    ((mq, offsets),) = stats["offsetTable"].items()
    assert mq.as_dict() == {"brokerName": "broker-a", "queueId": 0, "topic": 'T"x'}
    assert offsets["consumerOffset"] == 7
    misc = fastjson.loads(bodies["misc"])
    assert misc["neg"] == {-5: -7} and misc["big"] == 12345678901234567
    assert misc["s"] == 'a"b\\c\n\x01\u00e9/\u2028'
    for name in ("route", "consumestats", "misc"):
        assert fastjson.dumps(fastjson.loads(bodies[name])) == bodies[name], name


@pytest.mark.parametrize(
    "name",
    [
        "4.9.7/consumerOffset.json",
        "4.9.7/delayOffset.json",
        "4.9.7/topics.json",
        "4.9.7/subscriptionGroup.json",
        "5.3.1/delayOffset.json",
        "5.3.1/topics.json",
        "5.3.1/subscriptionGroup.json",
    ],
)
def test_pretty_layout_is_byte_for_byte_fastjsons(name):
    text = (DATA / name).read_text(encoding="utf-8")
    assert fastjson.dumps(fastjson.loads(text), pretty=True) == text


def test_pretty_layout_of_5x_consumer_offsets():
    """5.x adds a derived groupTopicMap of Java Sets, which fastjson writes inline; the rest
    of the file is laid out exactly as dumps lays it out."""
    text = (DATA / "5.3.1" / "consumerOffset.json").read_text(encoding="utf-8")
    data = fastjson.loads(text)
    assert data["offsetTable"]["%RETRY%g1@g1"] == {0: 0}
    data.pop("groupTopicMap")
    start = text.index('\t"offsetTable"')
    assert fastjson.dumps(data, pretty=True).endswith(text[start:])


@pytest.mark.parametrize(
    "text",
    [
        '{{"a":{}}:1}',  # the fuzzer's find (fuzz/ fastjson): TypeError, unhashable dict
        '{{"a":[1]}:1}',
        '{"m":{{"q":{"x":1}}:2}}',
    ],
)
def test_an_object_key_holding_an_object_or_array_is_a_decode_error(text):
    with pytest.raises(json.JSONDecodeError, match="object key holds"):
        fastjson.loads(text)


def test_object_keys_of_scalars_still_parse():
    value = fastjson.loads('{{"topic":"T","queueId":0,"ok":true,"x":null}:5}')
    assert value == {ObjectKey({"topic": "T", "queueId": 0, "ok": True, "x": None}): 5}


@pytest.mark.parametrize("text", ["8E9999", "-1e400", '{"a": [1.5e99999]}'])
def test_numbers_beyond_a_double_are_refused_not_turned_into_infinity(text: str) -> None:
    """Found by the fuzz harness (8E999…7): such a number became inf, which no JSON can say
    back; it is a decode error naming the position, like any other malformed body."""
    with pytest.raises(ValueError, match="Number out of range"):
        fastjson.loads(text)
    assert fastjson.loads("1.5e300") == 1.5e300
