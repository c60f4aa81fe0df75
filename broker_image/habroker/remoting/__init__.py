"""RocketMQ's remoting protocol: frames, commands, an asyncio server and client.

This package knows the wire and nothing of the broker: :mod:`habroker.processor` maps request
codes onto the broker's operations.  Layouts are in ``docs/wire-layouts.md``.
"""

from habroker.remoting.codes import LanguageCode, RequestCode, ResponseCode
from habroker.remoting.command import (
    FRAME_MAX_LENGTH,
    BadFrame,
    FrameDecoder,
    RemotingCommand,
    SerializeType,
)

__all__ = [
    "FRAME_MAX_LENGTH",
    "BadFrame",
    "FrameDecoder",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]
