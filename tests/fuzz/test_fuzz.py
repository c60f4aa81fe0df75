"""The bounded fuzz step of the suite: every atheris harness of fuzz/ for a few seconds.

Each harness runs in its own subprocess (libFuzzer owns the process) for FUZZ_TEST_SECONDS
(default 3) from a fresh corpus of seeds; a crash fails the test with the input as hex and its
traceback replayed without atheris. ``make fuzz`` runs the same harnesses for longer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fuzz.campaign import run_target
from fuzz.targets import TARGETS

SECONDS = int(os.environ.get("FUZZ_TEST_SECONDS", "3"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_satisfy_their_harness(name: str) -> None:
    target = TARGETS[name]
    seeds = target.seeds()
    assert seeds
    for data in seeds:
        target.harness(data)


@pytest.mark.timeout(SECONDS + 150)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_harness_finds_no_crash(name: str, tmp_path: Path) -> None:
    outcome = run_target(name, SECONDS, tmp_path / "corpus", tmp_path / "artifacts")
    assert outcome.ok, outcome.report()
    # it really fuzzed: libFuzzer's final stats count the executions
    runs = [
        line
        for line in outcome.log.splitlines()
        if line.startswith("stat::number_of_executed_units")
    ]
    assert runs and int(runs[0].split(":")[-1]) > 100, outcome.log[-2000:]
