"""Fixtures for tests against real Apache RocketMQ (Java): installed jars, private namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.rocketmq_java import NetNS, ensure_installed


@pytest.fixture(scope="session")
def rocketmq_java() -> Path:
    """The RocketMQ jar cache (interop/install.sh run if needed); skips, or fails under CI."""
    return ensure_installed()


@pytest.fixture
def netns(tmp_path: Path, rocketmq_java: Path) -> Iterator[NetNS]:
    """A fresh loopback-only network namespace, torn down (and checked empty) after the test."""
    with NetNS(tmp_path / "netns") as ns:
        yield ns


@pytest.fixture(scope="module")
def module_netns(tmp_path_factory: pytest.TempPathFactory, rocketmq_java: Path) -> Iterator[NetNS]:
    """One namespace for a module's tests (a Java cluster that boots once)."""
    with NetNS(tmp_path_factory.mktemp("netns")) as ns:
        yield ns
