"""Counters and the Prometheus text exposition, without a client library.

The broker has a handful of counters and gauges; rendering them is a few lines, and keeping
the dependency list short keeps the broker image small.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping


class BrokerStats:
    """Monotonic counters updated on the hot paths (plain ints: one event loop thread)."""

    def __init__(self) -> None:
        self.put_messages = 0
        self.put_bytes = 0
        self.put_requests = 0
        self.pull_messages = 0
        self.pull_bytes = 0
        self.pull_requests = 0
        self.put_status: Counter[str] = Counter()
        self.request_errors: Counter[str] = Counter()


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(
        '{}="{}"'.format(k, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
        for k, v in labels.items()
    )
    return "{" + body + "}"


class Exposition:
    """Accumulates metric families and renders Prometheus text format 0.0.4."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[Mapping[str, str], float | int]],
    ) -> None:
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self._lines.append(
                f"{name}{_labels(labels)} {float(value):g}"
                if isinstance(value, float)
                else f"{name}{_labels(labels)} {value}"
            )

    def gauge(self, name: str, help_text: str, value: float | int, **labels: str) -> None:
        self.family(name, "gauge", help_text, [(labels, value)])

    def counter(self, name: str, help_text: str, value: float | int, **labels: str) -> None:
        self.family(name, "counter", help_text, [(labels, value)])

    def render(self) -> str:
        return "\n".join(self._lines) + "\n"
