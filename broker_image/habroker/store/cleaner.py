"""Retention: delete whole commit-log files older than fileReservedTime hours.

Deletion runs when the local hour is listed in ``deleteWhen``, when the disk holding the log is
fuller than diskMaxUsedSpaceRatio percent, or on an explicit admin request.  Past
diskSpaceCleanForciblyRatio (with cleanFileForciblyEnable) files go whatever their age, and
past diskSpaceWarningLevelRatio the store refuses writes until the disk has room again, as
RocketMQ's CleanCommitLogService does.  Files go oldest first and never the last one; consume-queue files that only point at deleted bytes follow, and
every queue's min offset advances to its first surviving message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from habroker.config import BrokerConfig, parse_delete_when
from habroker.store.commit_log import disk_used_ratio
from habroker.store.flush import _Service
from habroker.store.values import CleanResult

log = logging.getLogger(__name__)


def should_clean(config: BrokerConfig, used_ratio: float, now: float | None = None) -> bool:
    """deleteWhen hour reached, or the disk fuller than diskMaxUsedSpaceRatio."""
    hour = time.localtime(now).tm_hour
    return hour in parse_delete_when(config.deleteWhen) or used_ratio > config.diskMaxUsedSpaceRatio


FORCED_FILES_PER_PASS = 10
"""Files a forced pass deletes at most (RocketMQ's DELETE_FILES_BATCH_MAX): the next pass,
a cleanResourceInterval later, looks at the disk again before deleting more."""


def clean_at_once(config: BrokerConfig, used_ratio: float) -> bool:
    """Past diskSpaceCleanForciblyRatio (or the warning level) with cleanFileForciblyEnable:
    the oldest files go whatever their age (RocketMQ's cleanImmediately)."""
    return config.cleanFileForciblyEnable and used_ratio > min(
        config.diskSpaceCleanForciblyRatio, config.diskSpaceWarningLevelRatio
    )


def expired_before_ms(config: BrokerConfig, now: float | None = None) -> float:
    """Files last modified before this (epoch ms) are expired."""
    return (time.time() if now is None else now) * 1000 - config.fileReservedTime * 3600 * 1000


class CleanCommitLogService(_Service):
    name = "clean-commitlog"

    def __init__(
        self, interval_ms: Callable[[], int], clean: Callable[[], Awaitable[CleanResult]]
    ) -> None:
        super().__init__()
        self.interval_ms = interval_ms
        self.clean = clean

    async def run(self) -> None:
        while not await self._sleep(self.interval_ms() / 1000):
            result = await self.clean()
            if result.deleted_files:
                log.info(
                    "retention deleted %d commit-log files; min offset now %d",
                    result.deleted_files,
                    result.min_offset,
                )


__all__ = [
    "FORCED_FILES_PER_PASS",
    "CleanCommitLogService",
    "clean_at_once",
    "disk_used_ratio",
    "expired_before_ms",
    "should_clean",
]
