"""Errors the store raises; the HTTP layer maps them to answers."""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """The store refused an operation or cannot start; the message says why."""


class MessageTooLarge(StoreError):
    """A body is larger than maxMessageSize, or a batch cannot fit in one commit-log file."""


class PropertiesTooLarge(StoreError):
    """Encoded properties exceed 32767 bytes (a signed int16 length)."""


class InvalidTopic(StoreError):
    """A topic name RocketMQ would refuse (empty, longer than 127 bytes, or bad characters)."""


class StoreNotWritable(StoreError):
    """The store is not running, is a slave, or hit a disk error."""


class DamagedFile(StoreError):
    """A store file of the wrong size or out of sequence; ``later`` lists the files after it
    when the damage is a short file in the middle (they hold newer data)."""

    def __init__(self, path: Path, message: str, later: list[Path] | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.later = later or []
