"""Read policy: which brokerId slow consumers are sent to, and what each broker must be told.

RocketMQ semantics (seed docs): when a consumer's backlog exceeds
``accessMessageInMemoryMaxRatio`` percent of memory, the master answers a pull with
``suggestWhichBrokerId = whichBrokerWhenConsumeSlowly`` of the consumer's subscription group,
provided ``slaveReadEnable``; otherwise it suggests the master (0). ``auto`` is ours: the
operator keeps that brokerId pointed at the most caught-up in-sync slave.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .spec import ReadPolicy

JSON = dict[str, Any]
MASTER_ID = 0


def choose_read_broker(
    policy: ReadPolicy,
    slaves: Sequence[Mapping[str, Any]],
    current: int | None = None,
    hysteresis_bytes: int = 1 << 20,
) -> tuple[int, str]:
    """The brokerId for ``whichBrokerWhenConsumeSlowly`` and why.

    ``slaves`` are status entries (brokerId, lagBytes, connected, inSync). In ``auto`` mode the
    current choice is kept while it stays in sync and within ``hysteresis_bytes`` of the best,
    so two equally healthy slaves do not make consumers flip between them every poll.
    """
    which = policy.which_broker_when_consume_slowly
    if not policy.auto:
        return int(which), "fixed by spec.readPolicy"
    candidates = [s for s in slaves if s.get("inSync") and s.get("connected")]
    if not candidates:
        return MASTER_ID, "no slave is in sync: slow consumers stay on the master"

    def lag(entry: Mapping[str, Any]) -> int:
        value = entry.get("lagBytes")
        return int(value) if value is not None else 1 << 62

    best = min(candidates, key=lambda s: (lag(s), int(s["brokerId"])))
    if current is not None and current != best["brokerId"]:
        kept = next((s for s in candidates if s["brokerId"] == current), None)
        if kept is not None and lag(kept) <= lag(best) + hysteresis_bytes:
            return (
                current,
                f"brokerId {current} is in sync and within {hysteresis_bytes} bytes of the best",
            )
    return int(best["brokerId"]), f"brokerId {best['brokerId']} is the most caught-up in-sync slave"


def desired_config(policy: ReadPolicy) -> JSON:
    """The runtime keys every broker must carry (``PATCH /v1/admin/config``)."""
    return {
        "slaveReadEnable": policy.slave_read_enable,
        "accessMessageInMemoryMaxRatio": policy.access_message_in_memory_max_ratio,
    }


def config_patch(desired: Mapping[str, Any], broker_status: Mapping[str, Any] | None) -> JSON:
    """The keys a broker reports differently from ``desired`` (empty: nothing to send)."""
    if broker_status is None:
        return {}
    have = broker_status.get("readPolicy") or {}
    return {k: v for k, v in desired.items() if have.get(k) != v}


def subscription_group_updates(
    which: int, groups: Mapping[str, Mapping[str, Any]]
) -> dict[str, JSON]:
    """Subscription groups on the master whose whichBrokerWhenConsumeSlowly differs.

    The whole group config is sent back with only that key changed, so nothing else a user
    set on the group is lost.
    """
    updates: dict[str, JSON] = {}
    for name, config in sorted(groups.items()):
        if config.get("whichBrokerWhenConsumeSlowly") != which:
            body = {k: v for k, v in config.items() if k != "groupName"}
            body["whichBrokerWhenConsumeSlowly"] = which
            updates[name] = body
    return updates


def policy_status(policy: ReadPolicy, which: int, applied: bool) -> JSON:
    """``status.readPolicy``: the policy in force."""
    return {
        "slaveReadEnable": policy.slave_read_enable,
        "whichBrokerWhenConsumeSlowly": which,
        "accessMessageInMemoryMaxRatio": policy.access_message_in_memory_max_ratio,
        "mode": "auto" if policy.auto else "fixed",
        "applied": applied,
    }
