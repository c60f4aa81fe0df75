"""JSON as RocketMQ's Java side (fastjson) writes it: map keys that are not strings.

RocketMQ serializes ``Map<Integer, Long>`` and ``Map<Long, String>`` with the integer keys
unquoted (``{"offsetTable":{"T@g":{0:250}}}`` in ``consumerOffset.json``, ``{0:"host:port"}``
in a route's ``brokerAddrs``) and ``Map<MessageQueue, ...>`` with an object as the key
(``{{"brokerName":"a","queueId":0,"topic":"T"}:{...}}`` in consume stats). A strict JSON
parser refuses all of these, so habroker reads and writes such text here:

* :func:`loads` accepts standard JSON plus integer and object keys. An unquoted integer key
  becomes an ``int``, an object key an :class:`ObjectKey`; quoted keys stay ``str``.
* :func:`dumps` writes standard JSON except that ``int`` keys go out unquoted and
  :class:`ObjectKey` keys as objects, compact like fastjson's ``toJSONString``; with
  ``pretty=True`` in the tab-indented layout RocketMQ's ``config/*.json`` files have.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["JSONDecodeError", "ObjectKey", "dumps", "loads"]

JSONDecodeError = json.JSONDecodeError

#: how deeply containers may nest in text from the network before it is refused
MAX_DEPTH = 256

_WS = re.compile(r"[ \t\n\r]*")
# a string literal: no raw quote, backslash or control character except in an escape pair
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*"', re.S)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A map key that is itself an object (fastjson writes a ``MessageQueue`` key this way).

    Hashable, so it can key a dict; the field order is kept as written.
    """

    __slots__ = ()

    def __new__(cls, fields: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> ObjectKey:
        items = fields.items() if isinstance(fields, Mapping) else fields
        return super().__new__(cls, tuple((str(k), v) for k, v in items))

    def as_dict(self) -> dict[str, Any]:
        return dict(self)

    def __repr__(self) -> str:
        return f"ObjectKey({self.as_dict()!r})"


# -- reading -----------------------------------------------------------------------------------
def loads(text: str | bytes | bytearray | memoryview) -> Any:
    """Parse JSON that may have unquoted integer keys or object keys (see the module doc)."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    try:
        value, end = _value(text, _skip(text, 0), 0)
    except RecursionError:
        raise JSONDecodeError("nested too deeply", text, 0) from None
    end = _skip(text, end)
    if end != len(text):
        raise JSONDecodeError("Extra data", text, end)
    return value


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    if pos >= len(text):
        raise JSONDecodeError("Expecting value", text, pos)
    char = text[pos]
    if char == '"':
        return _string_at(text, pos)
    if char == "{":
        return _object(text, pos + 1, depth + 1)
    if char == "[":
        return _array(text, pos + 1, depth + 1)
    number = _NUMBER.match(text, pos)
    if number:
        frac, exp = number.groups()
        token = number.group()
        if not (frac or exp):
            return int(token), number.end()
        value = float(token)
        if math.isinf(value):  # 8E999: no double holds it, and no JSON text could say it back
            raise JSONDecodeError("Number out of range", text, pos)
        return value, number.end()
    for word, literal in _LITERALS.items():
        if text.startswith(word, pos):
            return literal, pos + len(word)
    raise JSONDecodeError("Expecting value", text, pos)


def _string_at(text: str, pos: int) -> tuple[str, int]:
    """The string literal at ``pos``; json decodes its escapes (and refuses bad ones)."""
    match = _STRING.match(text, pos)
    if match is None:
        raise JSONDecodeError("Unterminated string or invalid control character", text, pos)
    literal = match.group()
    try:
        value: str = json.loads(literal) if "\\" in literal else literal[1:-1]
    except JSONDecodeError as exc:
        raise JSONDecodeError(exc.msg, text, pos + exc.pos) from None
    return value, match.end()


def _key(text: str, pos: int, depth: int) -> tuple[Any, int]:
    char = text[pos] if pos < len(text) else ""
    if char == '"':
        return _string_at(text, pos)
    if char == "{":
        fields, end = _object(text, pos + 1, depth + 1)
        key = ObjectKey(fields)
        try:
            hash(key)
        except TypeError:  # a field that is an array or an object
            raise JSONDecodeError("An object key holds an array or object", text, pos) from None
        return key, end
    number = _NUMBER.match(text, pos)
    if number and not any(number.groups()):
        return int(number.group()), number.end()
    raise JSONDecodeError("Expecting a string, integer or object key", text, pos)


def _object(text: str, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth > MAX_DEPTH:
        raise JSONDecodeError("nested too deeply", text, pos)
    out: dict[Any, Any] = {}
    pos = _skip(text, pos)
    if text.startswith("}", pos):
        return out, pos + 1
    while True:
        key, pos = _key(text, pos, depth)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise JSONDecodeError("Expecting ':' delimiter", text, pos)
        value, pos = _value(text, _skip(text, pos + 1), depth)
        out[key] = value
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            return out, pos + 1
        if not text.startswith(",", pos):
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip(text, pos + 1)


def _array(text: str, pos: int, depth: int) -> tuple[list[Any], int]:
    if depth > MAX_DEPTH:
        raise JSONDecodeError("nested too deeply", text, pos)
    out: list[Any] = []
    pos = _skip(text, pos)
    if text.startswith("]", pos):
        return out, pos + 1
    while True:
        value, pos = _value(text, pos, depth)
        out.append(value)
        pos = _skip(text, pos)
        if text.startswith("]", pos):
            return out, pos + 1
        if not text.startswith(",", pos):
            raise JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip(text, pos + 1)


# -- writing -----------------------------------------------------------------------------------
def dumps(obj: Any, *, pretty: bool = False) -> str:
    """Serialize like fastjson: ``int`` keys unquoted, :class:`ObjectKey` keys as objects.

    Values: dict, list/tuple, str, int, float (finite), bool, None. ``pretty`` gives the
    layout of RocketMQ's ``config/*.json`` (tabs; string-keyed entries one per line).
    """
    parts: list[str] = []
    _write(obj, parts, 0 if pretty else -1)
    return "".join(parts)


def _string(text: str) -> str:
    """Non-ASCII as is, like fastjson; the two JavaScript line separators escaped, as it does."""
    out = json.dumps(text, ensure_ascii=False)
    if "\u2028" in out or "\u2029" in out:
        out = out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return out


def _newline(parts: list[str], depth: int) -> None:
    if depth >= 0:
        parts.append("\n" + "\t" * depth)


def _write(obj: Any, parts: list[str], depth: int) -> None:
    """``depth`` is the indentation of the line ``obj`` starts on, or -1 for compact output."""
    inner = depth + 1 if depth >= 0 else -1
    if isinstance(obj, str):
        parts.append(_string(obj))
    elif obj is None or isinstance(obj, bool):
        parts.append("null" if obj is None else "true" if obj else "false")
    elif isinstance(obj, int):
        parts.append(str(int(obj)))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{obj!r} has no JSON form")
        parts.append(repr(obj))
    elif isinstance(obj, Mapping):
        _write_map(obj.items(), parts, depth, inner)
    elif isinstance(obj, ObjectKey):
        _write_map(obj, parts, depth, inner)
    elif isinstance(obj, list | tuple):
        parts.append("[")
        for i, item in enumerate(obj):
            if i:
                parts.append(",")
            _newline(parts, inner)
            _write(item, parts, inner)
        if obj:
            _newline(parts, depth)
        parts.append("]")
    else:
        raise TypeError(f"cannot serialize {type(obj).__name__} to JSON")


def _write_map(items: Iterable[tuple[Any, Any]], parts: list[str], depth: int, inner: int) -> None:
    parts.append("{")
    empty = True
    for key, value in items:
        if not empty:
            parts.append(",")
        empty = False
        if isinstance(key, str):
            _newline(parts, inner)
            parts.append(_string(key))
        elif isinstance(key, ObjectKey):
            _write_map(key, parts, inner, inner + 1 if inner >= 0 else -1)
        elif isinstance(key, int) and not isinstance(key, bool):
            parts.append(str(int(key)))
        else:
            raise TypeError(f"map key {key!r}: str, int or ObjectKey")
        parts.append(":")
        _write(value, parts, inner)
    if not empty:
        _newline(parts, depth)
    parts.append("}")
