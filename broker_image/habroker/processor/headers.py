"""Typed reads of a request's custom header (its ``extFields``), refused the way RocketMQ does.

A Java broker that cannot decode a custom header answers SYSTEM_ERROR naming the field; so do we.
"""

from __future__ import annotations

from habroker.remoting import RemotingCommand, ResponseCode
from habroker.remoting.server import RequestRefused

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class Header:
    __slots__ = ("fields",)

    def __init__(self, request: RemotingCommand) -> None:
        self.fields = request.ext_fields

    def text(self, name: str, default: str | None = None) -> str:
        value = self.fields.get(name)
        if value is None:
            if default is None:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null"
                )
            return default
        return value

    def opt_text(self, name: str) -> str | None:
        return self.fields.get(name)

    def int32(self, name: str, default: int | None = None, *, bits: int = 32) -> int:
        raw = self.fields.get(name)
        if raw is None or raw == "":
            if default is None:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null"
                )
            return default
        lo, hi = INT64 if bits == 64 else INT32
        try:
            value = int(raw.strip())
        except ValueError:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"the custom field <{name}>={raw!r} is not a number"
            ) from None
        if not lo <= value <= hi:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the custom field <{name}>={value} is out of the int{bits} range",
            )
        return value

    def int64(self, name: str, default: int | None = None) -> int:
        return self.int32(name, default, bits=64)

    def opt_int32(self, name: str) -> int | None:
        return self.int32(name) if self.fields.get(name) not in (None, "") else None

    def flag(self, name: str, default: bool = False) -> bool:
        raw = self.fields.get(name)
        if raw is None:
            return default
        return raw.strip().lower() == "true"
