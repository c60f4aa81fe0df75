"""JSON bodies as RocketMQ's fastjson writes them: integer and object map keys.

Route data writes ``brokerAddrs`` as ``{0:"host:port"}`` and topic stats key their map by a
MessageQueue object (``{{"brokerName":..,"queueId":0,"topic":..}:{...}}``).  Java reads those
back; a plain JSON writer cannot produce them, so this one does, for the values the processors
build (dicts, lists, str, int, float, bool, None, and :class:`ObjectKey`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_str = json.encoder.encode_basestring_ascii


class ObjectKey:
    """A map key that fastjson writes as a JSON object (e.g. a MessageQueue)."""

    __slots__ = ("fields",)

    def __init__(self, **fields: Any) -> None:
        self.fields = dict(sorted(fields.items()))

    def __hash__(self) -> int:
        return hash(tuple(self.fields.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectKey) and other.fields == self.fields


def message_queue(topic: str, broker_name: str, queue_id: int) -> ObjectKey:
    return ObjectKey(topic=topic, brokerName=broker_name, queueId=queue_id)


def dumps(value: Any) -> str:
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def dump_bytes(value: Any) -> bytes:
    return dumps(value).encode()


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_str(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(repr(value) if value == value and abs(value) != float("inf") else "0")
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(key, ObjectKey):
                _write(key.fields, out)
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(str(key))
            else:
                out.append(_str(str(key)))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple | set | frozenset):
        out.append("[")
        for i, item in enumerate(sorted(value) if isinstance(value, set | frozenset) else value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as a RocketMQ JSON body")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a fastjson body: standard JSON, plus bare integer object keys."""
    text = data if isinstance(data, str) else bytes(data).decode()
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_quote_bare_keys(text))


def _quote_bare_keys(text: str) -> str:
    """``{0:"a",-1:2}`` → ``{"0":"a","-1":2}``; strings are copied untouched."""
    out: list[str] = []
    i = 0
    n = len(text)
    expect_key = False
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if ch in "{,":
            expect_key = True
            out.append(ch)
            i += 1
            continue
        if expect_key and (ch == "-" or ch.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
        if not ch.isspace():
            expect_key = False
        out.append(ch)
        i += 1
    return "".join(out)
