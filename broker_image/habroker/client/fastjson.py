"""Read the JSON that RocketMQ's brokers and name servers write (fastjson), in the client.

fastjson writes integer map keys bare (``{"brokerAddrs":{0:"host:port"}}``) and keys a map by
an object where Java does (topic stats and consume stats are keyed by a MessageQueue:
``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``).  Python's ``json`` refuses both, so
this module runs the standard library's pure-Python scanner with an object parser that accepts
any JSON value as a key: a bare integer stays an ``int``, an object becomes a hashable
:class:`ObjectKey`.  Standard JSON (what a 5.x name server writes when asked for it) reads the
same as with ``json.loads``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from json import decoder, scanner
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, pos: int) -> int:
    return pos + len(_WHITESPACE.match(text, pos).group())  # type: ignore[union-attr]


# the standard library's string scanner and pure-Python value scanner (not in its stubs)
_scanstring: Callable[[str, int, bool], tuple[str, int]] = decoder.scanstring  # type: ignore[attr-defined]
_py_make_scanner: Callable[[json.JSONDecoder], Any] = scanner.py_make_scanner  # type: ignore[attr-defined]


class ObjectKey(Mapping[str, Any]):
    """A JSON object used as a map key: read-only and hashable."""

    __slots__ = ("_fields", "_hash")

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = dict(fields)
        self._hash = hash(tuple(sorted((k, _hashable(v)) for k, v in self._fields.items())))

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ObjectKey):
            return self._fields == other._fields
        return isinstance(other, Mapping) and self._fields == dict(other)

    def __repr__(self) -> str:
        return f"ObjectKey({self._fields!r})"


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return ObjectKey(value)
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _error(message: str, text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, text, pos)


def _parse_object(
    s_and_end: tuple[str, int],
    strict: bool,
    scan_once: Callable[[str, int], tuple[Any, int]],
    object_hook: Any,
    object_pairs_hook: Any,
    memo: Any = None,
) -> tuple[dict[Any, Any], int]:
    text, end = s_and_end
    out: dict[Any, Any] = {}
    end = _skip(text, end)
    if text[end : end + 1] == "}":
        return out, end + 1
    while True:
        end = _skip(text, end)
        if text[end : end + 1] == '"':
            key, end = _scanstring(text, end + 1, strict)
        else:
            try:
                raw_key, end = scan_once(text, end)
            except StopIteration as exc:
                raise _error("Expecting a map key", text, exc.value) from None
            key = _hashable(raw_key)
        end = _skip(text, end)
        if text[end : end + 1] != ":":
            raise _error("Expecting ':' delimiter", text, end)
        end = _skip(text, end + 1)
        try:
            value, end = scan_once(text, end)
        except StopIteration as exc:
            raise _error("Expecting value", text, exc.value) from None
        out[key] = value
        end = _skip(text, end)
        ch = text[end : end + 1]
        end += 1
        if ch == "}":
            return out, end
        if ch != ",":
            raise _error("Expecting ',' delimiter", text, end - 1)


class _FastjsonDecoder(json.JSONDecoder):
    def __init__(self) -> None:
        super().__init__()
        self.parse_object = _parse_object
        # the C scanner has its own object parser; the Python one calls ours
        self.scan_once = _py_make_scanner(self)


_DECODER = _FastjsonDecoder()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a RocketMQ JSON body; :class:`json.JSONDecodeError` (a ValueError) if it is not."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON body nests too deeply") from None
