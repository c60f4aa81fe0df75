"""Fixtures that run real broker processes on 127.0.0.1 (habroker.local)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from habroker.local import LocalBroker, LocalGroup


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    started: list[LocalBroker] = []

    def make(name: str = "broker", start: bool = True, **config) -> LocalBroker:
        broker = LocalBroker(tmp_path / name, **config)
        started.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def group_factory(tmp_path: Path) -> Iterator:
    started: list[LocalGroup] = []

    def make(
        name: str = "group", slaves: int = 1, mode: str = "ASYNC", start: bool = True, **config
    ) -> LocalGroup:
        group = LocalGroup(tmp_path / name, slaves=slaves, mode=mode, **config)
        started.append(group)
        return group.start() if start else group

    yield make
    for group in started:
        group.stop()
