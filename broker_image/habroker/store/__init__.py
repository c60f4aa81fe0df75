"""habroker's storage engine: RocketMQ-compatible commit log, consume queues, recovery."""

from habroker.store.errors import (
    InvalidTopic,
    MessageTooLarge,
    PropertiesTooLarge,
    StoreError,
    StoreNotWritable,
)
from habroker.store.message_store import MessageStore
from habroker.store.values import (
    BatchEntry,
    CleanResult,
    GetMessageResult,
    GetMessageStatus,
    PutResult,
    PutStatus,
    SelectedRegion,
)

__all__ = [
    "BatchEntry",
    "CleanResult",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidTopic",
    "MessageStore",
    "MessageTooLarge",
    "PropertiesTooLarge",
    "PutResult",
    "PutStatus",
    "SelectedRegion",
    "StoreError",
    "StoreNotWritable",
]
