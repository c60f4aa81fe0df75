"""docs/operator.md's tables of conditions and Events are the ones the code can produce.

The code side is read from the operator's sources (every ``Event("Normal"|"Warning", "Reason"``,
``reason="..."`` and condition type), so adding an Event or condition without documenting it,
or documenting one that no longer exists, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = "".join(
    p.read_text() for p in sorted((ROOT / "operator" / "brokergroup_operator").glob("*.py"))
)
DOC = (ROOT / "docs" / "operator.md").read_text()


def _table(heading: str) -> list[list[str]]:
    section = DOC.split(f"\n### {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _ticked(cell: str) -> set[str]:
    return set(re.findall(r"`(\w+)`", cell))


def code_event_reasons() -> set[str]:
    reasons = set(re.findall(r'(?:Event|_event)\(\s*"(?:Normal|Warning)",\s*"(\w+)"', SOURCES))
    reasons |= set(re.findall(r'reason="(\w+)"', SOURCES))  # kopf.event/kopf.warn
    reasons |= set(re.findall(r'reason: str = "(\w+)"', SOURCES))  # SpecError's default
    return reasons


def code_condition_types() -> set[str]:
    types = set(re.findall(r'_condition\(\s*"(\w+)"', SOURCES))
    types |= set(re.findall(r'"type": "(\w+)",\s*"status"', SOURCES))
    return types


def test_documented_events_are_the_code_s() -> None:
    documented: set[str] = set()
    for row in _table("Events"):
        documented |= _ticked(row[0])
    assert documented == code_event_reasons()


def test_documented_conditions_are_the_code_s() -> None:
    rows = _table("Conditions")
    assert {row[0].strip("`") for row in rows} == code_condition_types()
    documented_reasons: set[str] = set()
    for row in rows:
        documented_reasons |= _ticked(row[2])
    failover = set(re.findall(r'_set_condition\(\s*(?:True|False),\s*"(\w+)"', SOURCES))
    status_reasons = set(re.findall(r'\(\s*(?:True|False|bool\(\w+\)),\s*"(\w+)"', SOURCES))
    assert failover | status_reasons <= documented_reasons, (
        failover | status_reasons
    ) - documented_reasons
