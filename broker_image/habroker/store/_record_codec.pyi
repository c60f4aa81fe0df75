from collections.abc import Callable, Collection, Sequence
from typing import overload

from habroker.message import DispatchTuple
from habroker.store.consume_queue import Run, WalkState
from habroker.store.values import BatchEntry

C_CRC: bool

class PackedBatch(Sequence[BatchEntry]):
    data: bytes | memoryview
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, i: int) -> BatchEntry: ...
    @overload
    def __getitem__(self, i: slice) -> list[BatchEntry]: ...

def split_batch(
    data: bytes | memoryview,
    max_entries: int,
    entry_type: Callable[[int, memoryview, bytes], BatchEntry],
) -> tuple[PackedBatch | None, tuple[str, int | None] | None]: ...
def encode_records(
    topic_tail: bytes,
    queue_id: int,
    entries: Sequence[BatchEntry],
    first_queue_offset: int,
    shared: bytes,
    record_base: int,
    phys: int,
) -> tuple[list[bytes | memoryview], int]: ...
def encode_entries(
    topic_tail: bytes,
    queue_id: int,
    entries: Sequence[BatchEntry],
    record_sizes: Sequence[int],
    first_queue_offset: int,
    shared: bytes,
    term: int,
    first_index: int,
    positions: Sequence[int],
) -> list[bytes | memoryview]: ...
def unit_tags_code(
    topic: str,
    props: bytes | memoryview,
    store_timestamp: int,
    delay_levels: Sequence[int] = ...,
) -> int: ...
def parse_record(
    buf: bytes | bytearray | memoryview,
    pos: int,
    check_crc: bool,
    delay_levels: Sequence[int] = ...,
) -> DispatchTuple | int: ...
def walk_entries(
    buf: bytes | bytearray | memoryview,
    rel: int,
    wrote: int,
    pos: int,
    index: int,
    target: int,
    delay_levels: Sequence[int] = ...,
) -> tuple[int, int, int | None, list[tuple[str, int, int, bytes, int]]]: ...
def walk_records(
    buf: bytes | bytearray | memoryview,
    rel: int,
    stop: int,
    delay_levels: Sequence[int] = ...,
) -> tuple[int, int, int | None, list[tuple[str, int, int, bytes, int]]]: ...
def units_match_entries(
    units: bytes | bytearray | memoryview, entries: bytes | bytearray | memoryview, magic: int
) -> bool: ...
def walk_units(
    units: bytes | bytearray | memoryview,
    state: WalkState,
    examine_limit: int,
    max_msgs: int,
    max_bytes: int,
    min_phy: int,
    file_size: int,
    tags_codes: Collection[int] | None,
    runs: list[Run],
) -> tuple[bool, WalkState]: ...
