"""The compiled record codec (``_record_codec``, Cython), when it was built and not switched off:
a produce batch split into entries, entries laid out as records, records parsed for dispatch.

Built by ``pip install`` where a C compiler is present; without one the install goes on and the
same loops run in Python. ``BROKERGROUP_PURE_PYTHON=1`` in the environment chooses the Python
loops even where the codec was built (to compare them, or to rule the codec out); not
``HABROKER_*``, which names configuration keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from habroker import message
from habroker.store.consume_queue import Run, WalkState, walk_units_py

if TYPE_CHECKING:
    from habroker.store.values import BatchEntry

PURE_PYTHON_ENV = "BROKERGROUP_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from habroker.store import _record_codec
    except ImportError:
        return None
    return _record_codec


codec: ModuleType | None = _load()
"""The compiled module, or None where the Python loops run."""

parse_record: Callable[
    [bytes | bytearray | memoryview, int, bool, Sequence[int]], message.DispatchTuple | int
] = codec.parse_record if codec is not None else message.parse_record
"""The dispatcher's record parse (:func:`habroker.message.parse_record`), compiled where built."""


unit_tags_code: Callable[[str, bytes, int, Sequence[int]], int] = (
    codec.unit_tags_code if codec is not None else message.unit_tags_code
)
"""A consume-queue unit's tagsCode (:func:`habroker.message.unit_tags_code`), compiled where
built: the put path's and the dispatcher's."""


WalkedUnits = tuple[int, int, int | None, list[tuple[str, int, int, bytes, int]]]

walk_entries: Callable[[memoryview, int, int, int, int, int, Sequence[int]], WalkedUnits] | None = (
    codec.walk_entries if codec is not None else None
)
"""Committed DLedger entries walked into runs of consume-queue units, where compiled; None
where not (``DLedgerReput`` then parses and dispatches entry by entry)."""

walk_records: Callable[[memoryview, int, int, Sequence[int]], WalkedUnits] | None = (
    codec.walk_records if codec is not None else None
)
"""Commit-log records walked into runs of consume-queue units, where compiled; None where not
(``ReputMessageService`` then parses and dispatches record by record)."""


units_match_entries: Callable[[bytes | memoryview, bytes | memoryview, int], bool] | None = (
    codec.units_match_entries if codec is not None else None
)
"""A DLedger raw push's index units checked against every entry they index, where compiled;
None where not (:func:`habroker.dledger.entry.units_match_entries_py` then)."""


put_cq_units: (
    Callable[[str, Sequence[BatchEntry], Sequence[int], int, int, Sequence[int]], bytes] | None
) = codec.put_cq_units if codec is not None else None
"""The consume-queue units of a batch the master just wrote, in one buffer, where compiled;
None where not (``MessageStore._dispatch_put`` then puts them one by one)."""

record_sizes: (
    Callable[[Sequence[BatchEntry], int, int, int, int], tuple[int, list[int]] | None] | None
) = codec.record_sizes if codec is not None else None
"""(total, sizes) of a batch's records where compiled and every entry is within the limits;
None where not compiled (``MessageStore.plan_put`` then loops in Python, as it does to say
which entry breaks a limit)."""

pack_index_units: Callable[[Sequence[int], Sequence[int], int, int, int], bytes] | None = (
    codec.pack_index_units if codec is not None else None
)
"""A DLedger leader's index units for a batch of entries, where compiled; None where not
(:func:`habroker.dledger.entry.pack_index_units_py` then)."""


walk_units: Callable[
    [memoryview, WalkState, int, int, int, int, int, Collection[int] | None, list[Run]],
    tuple[bool, WalkState],
] = codec.walk_units if codec is not None else walk_units_py
"""A pull's walk over consume-queue units into commit-log runs
(:func:`habroker.store.consume_queue.walk_units_py`), compiled where built."""


def describe() -> str:
    """What a broker logs at start."""
    if codec is not None:
        return "compiled (Cython)"
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return f"pure Python ({PURE_PYTHON_ENV} is set)"
    return "pure Python (the compiled codec was not built here)"
