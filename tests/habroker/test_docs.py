"""The docs name every configuration key the broker accepts, and no key it does not."""

import re
from pathlib import Path

from habroker.config import BrokerConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "broker.md"


def test_every_config_key_is_documented():
    table = re.findall(r"^\| ([a-zA-Z0-9.]+) \|", DOC.read_text(), flags=re.M)
    documented = {k for k in table if k != "key"}
    assert documented == set(BrokerConfig.keys())


def test_runtime_keys_are_marked():
    text = DOC.read_text()
    for key in BrokerConfig.RUNTIME_KEYS:
        row = next(line for line in text.splitlines() if line.startswith(f"| {key} |"))
        assert "**rt**" in row, key
