"""Drift: where a live child no longer holds what the operator applied.

Every child is applied with server-side apply, so the desired manifest is exactly the set of
fields the operator owns. A child has drifted when one of those fields is missing or holds
another value; fields the apiserver or other controllers add (defaults, status, annotations of
their own) are not drift. The handlers watch the children and, on drift or deletion, apply the
desired manifest again; whether anything was really repaired is then decided by the apiserver
(the object's resourceVersion changes only if the apply changed it), so a comparison that is
too eager here costs a no-op request, never a false Event.

Pure: manifests and live objects in, paths out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

#: parts of a live object the operator never owns (and so never compares)
IGNORED_TOP = frozenset({"status"})
IGNORED_META = frozenset(
    {"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"}
)
#: at most this many differing paths are named in an Event
MAX_PATHS = 5


def _walk(desired: Any, live: Any, path: str) -> Iterator[str]:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            yield path or "."
            return
        for key, want in desired.items():
            if not path and key in IGNORED_TOP:
                continue
            if path == "metadata" and key in IGNORED_META:
                continue
            sub = f"{path}.{key}" if path else str(key)
            if key not in live:
                yield sub
            else:
                yield from _walk(want, live[key], sub)
    elif isinstance(desired, Sequence) and not isinstance(desired, str):
        if not isinstance(live, Sequence) or isinstance(live, str) or len(live) != len(desired):
            yield path
            return
        for index, (want, have) in enumerate(zip(desired, live, strict=True)):
            yield from _walk(want, have, f"{path}[{index}]")
    elif not _same_scalar(desired, live):
        yield path


def _same_scalar(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # the apiserver stores some quantities and ports in their own form ("1" vs 1)
    return str(desired) == str(live)


def drifted(desired: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """The paths of ``desired`` that ``live`` lacks or holds otherwise (empty: no drift)."""
    return list(_walk(desired, live, ""))


def describe(kind: str, name: str, paths: Sequence[str] | None) -> str:
    """The message of a repair Event: what was restored, and which fields had moved."""
    if paths is None:
        return f"{kind} {name} was deleted: recreated"
    shown = ", ".join(paths[:MAX_PATHS])
    more = f" and {len(paths) - MAX_PATHS} more" if len(paths) > MAX_PATHS else ""
    return f"{kind} {name} was changed outside the operator ({shown}{more}): restored"


def find_child(
    manifests: Sequence[Mapping[str, Any]], kind: str, name: str
) -> Mapping[str, Any] | None:
    """The desired manifest of one child, or None if the operator does not want it."""
    for manifest in manifests:
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
            return manifest
    return None
