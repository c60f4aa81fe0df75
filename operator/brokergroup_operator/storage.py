"""Volume expansion: a grown ``spec.storage.size`` applied to the brokers' claims.

A StatefulSet's ``volumeClaimTemplates`` cannot change, so (as Strimzi does) the operator
leaves the template at the size the StatefulSet was created with and asks each existing
PersistentVolumeClaim for the new size; new claims (a scaled-up slave) are grown the same way
right after they appear. Whether a volume can grow is the StorageClass's business
(``allowVolumeExpansion``): the apiserver refuses the request otherwise, and that refusal is
what the ``StorageExpanded`` condition reports. The filesystem is grown by the kubelet, online
for most drivers; a claim that waits for it says ``FileSystemResizePending``.

Pure: claims in, what to patch and the condition out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lightkube.utils.quantity import parse_quantity


@dataclass(frozen=True)
class ClaimInfo:
    """What expansion needs from a PersistentVolumeClaim (kept in a kopf index)."""

    name: str
    requested: str | None
    capacity: str | None = None
    #: the claim's resize conditions that are True (Resizing, FileSystemResizePending, ...)
    conditions: tuple[str, ...] = ()
    bound: bool = False


def claim_info(name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> ClaimInfo:
    return ClaimInfo(
        name=name,
        requested=((spec.get("resources") or {}).get("requests") or {}).get("storage"),
        capacity=(status.get("capacity") or {}).get("storage"),
        conditions=tuple(
            str(c.get("type")) for c in status.get("conditions") or [] if c.get("status") == "True"
        ),
        bound=status.get("phase") == "Bound",
    )


def _bytes(quantity: str | None) -> Decimal:
    value = parse_quantity(quantity) if quantity else None
    return value if value is not None else Decimal(0)


def to_grow(size: str, claims: Sequence[ClaimInfo]) -> list[str]:
    """Bound claims that ask for less than ``size`` (never shrinks: the CRD forbids it)."""
    want = _bytes(size)
    return sorted(c.name for c in claims if c.bound and _bytes(c.requested) < want)


def storage_condition(
    size: str, claims: Sequence[ClaimInfo], refused: Mapping[str, str]
) -> dict[str, Any]:
    """The ``StorageExpanded`` condition: True once every bound claim has ``size``."""
    want = _bytes(size)
    if refused:
        name, why = sorted(refused.items())[0]
        return _cond(False, "ExpansionRefused", f"{name}: {why}")
    short = [c for c in claims if c.bound and _bytes(c.capacity) < want]
    if not short:
        return _cond(True, "AtRequestedSize", f"every bound claim has at least {size}")
    waiting = [c for c in short if "FileSystemResizePending" in c.conditions]
    detail = ", ".join(f"{c.name} {c.capacity or '?'}" for c in short)
    if waiting and len(waiting) == len(short):
        return _cond(
            False,
            "FileSystemResizePending",
            f"volumes grown to {size}, the kubelet has yet to grow the filesystem: {detail}",
        )
    return _cond(False, "Expanding", f"growing to {size}: {detail}")


def _cond(ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": "StorageExpanded",
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }
