"""SendHeader: the V2 header's direct read gives what the checked, renamed path gives.

The direct read (``SendHeader._decode_v2``) takes only headers it can read whole; for anything
else it gives way to the checked path, so a bad header is refused exactly as before.
"""

from __future__ import annotations

import pytest
from habroker.processor.headers import INT32
from habroker.processor.send_message import _V2_NAMES, SendHeader
from habroker.remoting import RemotingCommand, RequestCode
from habroker.remoting.server import RequestRefused
from hypothesis import given, settings
from hypothesis import strategies as st


def _checked(code: int, fields: dict[str, str]) -> SendHeader | str:
    """The checked path alone: the long names, Header's reads."""
    long = {_V2_NAMES.get(k, k): v for k, v in fields.items()}
    try:
        return SendHeader.decode(RemotingCommand(code, ext_fields=long))
    except RequestRefused as exc:
        return f"refused {exc.code}: {exc}"


def _decoded(code: int, fields: dict[str, str]) -> SendHeader | str:
    try:
        return SendHeader.decode(RemotingCommand(code, ext_fields=dict(fields)))
    except RequestRefused as exc:
        return f"refused {exc.code}: {exc}"


_number = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.integers(INT32[0] - 2, INT32[1] + 2).map(str),
    st.sampled_from(
        ["", " 7 ", "x", "1_0", "0x10", "-0", "+5", "٣", str(2**63), str(-(2**63) - 1)]
    ),
)
_v2 = st.fixed_dictionaries(
    {"b": st.sampled_from(["orders", "%RETRY%g", "TBW102"])},
    optional={
        "a": st.sampled_from(["pg", ""]),
        "c": st.sampled_from(["TBW102", ""]),
        "d": _number,
        "e": _number,
        "f": _number,
        "g": _number,
        "h": _number,
        "i": st.sampled_from(["", "TAGS\x01a\x02WAIT\x01true"]),
        "j": _number,
        "k": st.sampled_from(["false", "true"]),
        "l": _number,
        "m": st.sampled_from(["true", "false", " TRUE ", "", "yes"]),
        "n": st.just("broker-a"),
    },
)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]), _v2)
def test_the_direct_v2_read_equals_the_checked_path(code: int, fields: dict[str, str]) -> None:
    assert _decoded(code, fields) == _checked(code, fields)


def test_a_java_producers_v2_header_takes_the_direct_read() -> None:
    fields = {
        "a": "pg",
        "b": "orders",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "WAIT\x01true\x02TAGS\x01a",
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    fast = SendHeader._decode_v2(RequestCode.SEND_BATCH_MESSAGE, fields)
    assert fast is not None
    assert fast == _checked(RequestCode.SEND_BATCH_MESSAGE, fields)
    assert (fast.queue_id, fast.born_timestamp, fast.max_reconsume_times, fast.batch) == (
        3,
        1700000000000,
        16,
        True,
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"b": "t", "e": "0", "f": "0", "g": "0", "h": "0"}, "<producerGroup> is null"),
        ({"a": "g", "b": "t", "f": "0", "g": "0", "h": "0"}, "<queueId> is null"),
        ({"a": "g", "b": "t", "e": "2147483648", "f": "0", "g": "0", "h": "0"}, "int32 range"),
        ({"a": "g", "b": "t", "e": "1", "f": "0", "g": "x", "h": "0"}, "is not a number"),
        ({"a": "g", "b": "t", "e": "1", "f": "0", "g": str(2**63), "h": "0"}, "int64 range"),
        ({"a": "g", "b": "t", "e": "1", "f": "0", "g": "0", "h": "0", "l": "-2147483649"}, "int32"),
        ({"a": "g", "b": "t", "e": "1", "f": "0", "g": "0", "h": "0", "d": "2147483648"}, "int32"),
    ],
)
def test_a_bad_v2_header_is_refused_as_before(fields: dict[str, str], why: str) -> None:
    assert SendHeader._decode_v2(RequestCode.SEND_MESSAGE_V2, fields) is None
    refused = _decoded(RequestCode.SEND_MESSAGE_V2, fields)
    assert isinstance(refused, str) and why in refused
