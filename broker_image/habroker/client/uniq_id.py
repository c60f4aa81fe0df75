"""Client-generated message ids: the ``UNIQ_KEY`` property (what RocketMQ calls ``msgId``).

RocketMQ's MessageClientIDSetter layout, so tools that read an id's parts read ours: the
client's IP (4 bytes, or 16 for IPv6), its pid (2), a per-process random number (4; Java uses
its class loader's hash), milliseconds since the start of the current month in local time (4)
and a 16-bit counter (2), as upper-case hex.  The offsetMsgId a broker returns is another id
(store host + commit-log offset: :func:`habroker.message.offset_msg_id`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import os
import secrets
import struct
import threading
import time

from habroker.client.instance import local_ip

_counter = itertools.count()
_lock = threading.Lock()
_month: tuple[int, int] = (0, 0)  # (start of this month, start of the next) in ms


def _ip_bytes() -> bytes:
    try:
        addr = ipaddress.ip_address(local_ip())
    except ValueError:
        # RocketMQ's createFakeIP: four bytes of the clock
        return struct.pack(">q", time.time_ns() // 1_000_000)[4:]
    return addr.packed


_FIXED = (
    (_ip_bytes() + struct.pack(">H", os.getpid() & 0xFFFF) + secrets.token_bytes(4)).hex().upper()
)


def _month_bounds(now_ms: int) -> tuple[int, int]:
    local = dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start + dt.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


def new_uniq_id() -> str:
    """A fresh UNIQ_KEY (32 hex characters with an IPv4 address, 56 with IPv6)."""
    global _month
    now = time.time_ns() // 1_000_000
    with _lock:
        if now >= _month[1]:
            _month = _month_bounds(now)
        count = next(_counter) & 0xFFFF
    # Java casts the span to an int: past ~24.8 days it wraps negative, and is kept as it is
    diff = ((now - _month[0] + 2**31) % 2**32) - 2**31
    if -1_000_000 < diff < 0:  # the clock stepped back (NTP): as RocketMQ, clamp to 0
        diff = 0
    return _FIXED + struct.pack(">iH", diff, count).hex().upper()


def uniq_id_parts(uniq_id: str) -> tuple[str, int, int, int]:
    """(IP, pid, ms into the month, counter) of a UNIQ_KEY, as MessageClientIDSetter reads it."""
    raw = bytes.fromhex(uniq_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"message id {uniq_id!r}: expected 32 or 56 hex characters")
    ip_len = 16 if len(raw) == 28 else 4
    ip = str(ipaddress.ip_address(raw[:ip_len]))
    (pid,) = struct.unpack_from(">H", raw, ip_len)
    diff, counter = struct.unpack_from(">IH", raw, ip_len + 6)
    return ip, pid, diff, counter
