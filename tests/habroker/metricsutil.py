"""Scrape a broker's /metrics and parse it with prometheus_client's own parser."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


@dataclass
class Scrape:
    content_type: str
    types: dict[str, str]  # family name (counters without _total) -> counter/gauge/histogram
    samples: list[Sample]

    def values(self, name: str, **labels: str) -> list[float]:
        return [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        found = self.values(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]


def scrape(http_address: str) -> Scrape:
    with urllib.request.urlopen(f"http://{http_address}/metrics", timeout=10) as resp:
        content_type = resp.headers["Content-Type"]
        text = resp.read().decode()
    families = list(text_string_to_metric_families(text))
    return Scrape(
        content_type,
        {f.name: f.type for f in families},
        [s for f in families for s in f.samples],
    )
