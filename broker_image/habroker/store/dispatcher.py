"""ReputMessageService: turns commit-log records into consume-queue units.

Master and slave run the same parse over the same bytes: the master right after each put, the
slave after each replicated chunk.  Replicated chunks end anywhere, so on a slave a partial
record at the tail stops dispatch without advancing (spec §3.7); the next chunk completes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from habroker.message import DELAY_LEVELS_MS, DispatchTuple
from habroker.store import native
from habroker.store.commit_log import CommitLog
from habroker.store.native import parse_record

log = logging.getLogger(__name__)

UnitsDispatch = Callable[[str, int, int, bytes, int], None]
"""(topic, queue id, first queue offset, 20-byte units, commit-log offset past the last record):
a run of units for one consume queue, made by the compiled walk (``MessageStore._dispatch_units``)."""


class ReputMessageService:
    def __init__(
        self,
        commit_log: CommitLog,
        dispatch: Callable[[DispatchTuple], None],
        is_slave: Callable[[], bool],
        delay_levels: Sequence[int] = DELAY_LEVELS_MS,
        dispatch_units: UnitsDispatch | None = None,
    ) -> None:
        self.commit_log = commit_log
        self.dispatch = dispatch
        #: where runs of units made by the compiled walk go; without it, or without the
        #: codec, every record is parsed and dispatched one by one
        self.dispatch_units = dispatch_units if native.codec is not None else None
        self.is_slave = is_slave
        self.delay_levels = delay_levels  # messageDelayLevel (ms): schedule units' tagsCode
        self.reput_from_offset = 0
        # store time of the last record dispatched; 0 until this run dispatches one
        self.last_store_timestamp = 0

    def behind(self) -> int:
        return max(0, self.commit_log.max_offset - self.reput_from_offset)

    def do_reput(self) -> int:
        """Dispatch every whole record from ``reput_from_offset`` to the readable end."""
        return self._reput(None)

    def do_reput_slice(self, budget: int) -> int:
        """Like do_reput, but stop at the first record boundary ``budget`` bytes or more past
        where it started (a slave's background dispatch works in slices, see MessageStore)."""
        return self._reput(self.reput_from_offset + budget)

    def _reput(self, stop: int | None) -> int:
        cl = self.commit_log
        queue = cl.queue
        dispatch = self.dispatch
        dispatch_units = self.dispatch_units
        walk = native.walk_records if dispatch_units is not None else None
        delay_levels = self.delay_levels
        count = 0
        while True:
            offset = self.reput_from_offset
            if offset < cl.min_offset:
                log.warning(
                    "dispatch offset %d is below the commit log's minimum %d (files "
                    "deleted); continuing from there",
                    offset,
                    cl.min_offset,
                )
                offset = self.reput_from_offset = cl.min_offset
            mf = queue.find(offset)
            if mf is None:
                return count
            wrote = mf.wrote_position
            pos = offset - mf.file_from_offset
            if pos >= wrote:
                return count
            lim = wrote
            if stop is not None:
                if stop <= offset:
                    return count
                lim = min(wrote, stop - mf.file_from_offset)
            view = mf.view[:wrote]
            try:
                while pos < lim:
                    if walk is not None and dispatch_units is not None:
                        walked, size, last_ts, runs = walk(view, pos, lim, delay_levels)
                        if last_ts is not None:
                            for topic, queue_id, first_offset, units, end in runs:
                                dispatch_units(topic, queue_id, first_offset, units, end)
                            self.last_store_timestamp = last_ts
                            count += walked
                            pos += size
                            continue
                    parsed = parse_record(view, pos, False, delay_levels)
                    if isinstance(parsed, tuple):
                        dispatch(parsed)
                        self.last_store_timestamp = parsed[5]
                        count += 1
                        pos += parsed[3]
                        continue
                    size = parsed
                    if size == 0:  # BLANK: on to the next file
                        if wrote < mf.file_size:
                            # a slave has the marker but not yet all of its filler
                            self.reput_from_offset = mf.file_from_offset + pos
                            return count
                        pos = mf.file_size
                    elif size > 0:
                        log.error(
                            "[BUG] %s: record at %d declares %d bytes but its fields "
                            "disagree; skipped",
                            mf.path,
                            pos,
                            size,
                        )
                        pos += size
                    elif self.is_slave():
                        # a replicated chunk ended mid-record: wait for the rest
                        self.reput_from_offset = mf.file_from_offset + pos
                        return count
                    else:
                        log.error(
                            "%s: unreadable record at %d; skipping to the readable end %d",
                            mf.path,
                            pos,
                            wrote,
                        )
                        pos = wrote
            finally:
                view.release()
            self.reput_from_offset = mf.file_from_offset + pos
