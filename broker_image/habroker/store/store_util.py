"""What the store knows of the machine, as RocketMQ's StoreUtil: how much RAM there is.

RocketMQ takes data within ``accessMessageInMemoryMaxRatio`` % of RAM of the commit log's end to
be in the page cache; further back it is "on disk". Two decisions hang on that line: the smaller
pull caps (``maxTransfer*OnMessageInDisk``) and read redirection to a slave.
"""

from __future__ import annotations

import functools
import os

#: RocketMQ's fallback when the machine does not say
DEFAULT_PHYSICAL_MEMORY = 24 * 1024**3


@functools.cache
def _machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return DEFAULT_PHYSICAL_MEMORY


def total_physical_memory(override: int = 0) -> int:
    """RAM in bytes, as RocketMQ's ``TOTAL_PHYSICAL_MEMORY_SIZE``; ``override`` > 0 wins
    (``totalPhysicalMemorySize``, to try the on-disk rules on a small log)."""
    return override if override > 0 else _machine_memory()


def in_memory_span(override: int, ratio_percent: int) -> int:
    """How many bytes behind the commit log's end data is still taken as in the page cache."""
    return total_physical_memory(override) * ratio_percent // 100
