"""habroker on uvloop (``habroker serve --event-loop uvloop``): a SYNC master and its slave
both on uvloop take remoting produce at batch 1 and 32, every request SUCCESS, and the slave
holds what the master acknowledged.  Before the fix in remoting/channel.py every client-port
connection died in ``connection_made`` on uvloop (its transports are not asyncio.Transport)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import common, event_loop, loadgen

pytestmark = pytest.mark.timeout(180)


def test_a_sync_group_on_uvloop_takes_remoting_produce_and_replicates(tmp_path: Path) -> None:
    # uvloop is a dependency of habroker (pyproject): missing, this fails rather than skips
    assert event_loop.unavailable() is None, event_loop.unavailable()
    settings = common.Settings.quick_mode(scratch=tmp_path)
    with event_loop.group(tmp_path / "g", "uvloop", "SYNC", 1) as group:
        port = int(group.master.config["listenPort"])
        for batch in (1, 32):
            job = event_loop.job(port, batch, 2, settings)
            job.timeout = 20
            result = loadgen.run(job)
            assert result["requests"] > 0 and result["not_ok"] == 0, result
        group.wait_replicated(timeout=30)
        master = group.master.status()
        assert master["maxOffset"] > 0
        assert master["master"]["inSyncSlaves"] == 1
    assert "event loop: uvloop" in group.slaves[0].log_path.read_text()
