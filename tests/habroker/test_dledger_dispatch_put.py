"""A DLedger leader indexes its own entries when they commit. With the compiled codec it walks
the committed run as followers do (runs of units per queue, no Python per entry); without it,
from the units its put made (``DLedgerReput.plan``) instead of parsing each record back out of
the data files in Python. Either way the consume queues must hold the units the parse gives
(what followers and recovery use), and an entry that is not the one planned (same index,
another term: a cut tail rewritten) must still be parsed."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from habroker.dledger import commit_log as dledger_commit_log
from habroker.dledger.commit_log import DLedgerCommitLog, DLedgerReput
from habroker.dledger.message_store import DLedgerMessageStore, _patch_physical_offset
from habroker.local import free_port
from habroker.message import DispatchTuple, encode_record, parse_record
from habroker.store import BatchEntry, native

from .storeutil import make_config
from .test_dledger_store import FILE, open_store
from .test_store_dispatch_put import BORN, PROPS


async def one_peer_leader(root: Path) -> DLedgerMessageStore:
    config = make_config(
        root,
        brokerName="g",
        enableDLegerCommitLog=True,
        dLegerPeers=f"n0-127.0.0.1:{free_port()}",
        dLegerSelfId="n0",
        dLegerMinVoteIntervalMs=50,
        dLegerMaxVoteIntervalMs=100,
    )
    store = DLedgerMessageStore(config)
    await store.start()
    deadline = time.monotonic() + 10
    while not store.dledger.state.is_leader:
        assert time.monotonic() < deadline, "a one-peer group never elected itself"
        await asyncio.sleep(0.02)
    return store


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_leader_dispatches_its_puts_as_the_parse_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "compiled" and native.codec is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the compiled record codec was not built: {native.describe()}")
        pytest.skip(
            f"record codec: {native.describe()}; the Python case of this test covers what "
            "such a broker runs"
        )
    parses = 0
    real_parse = dledger_commit_log.parse_record

    def counting(*args: Any) -> DispatchTuple | int:
        nonlocal parses
        parses += 1
        return real_parse(*args)

    async def run() -> tuple[list[DispatchTuple], list[DispatchTuple], int]:
        store = await one_peer_leader(tmp_path)
        dispatched: list[DispatchTuple] = []
        real_dispatch = store.reput.dispatch

        def recording(unit: DispatchTuple) -> None:
            dispatched.append(unit)
            real_dispatch(unit)

        store.reput.dispatch = recording
        if path == "python":
            store.reput.dispatch_units = None
        monkeypatch.setattr(dledger_commit_log, "parse_record", counting)
        rng = random.Random(7)
        try:
            for b in range(40):
                topic = rng.choice(("T", "U", "SCHEDULE_TOPIC_XXXX"))
                entries = [
                    BatchEntry(0, bytes([b]) * rng.randint(1, 3000), rng.choice(PROPS))
                    for _ in range(rng.randint(1, 6))
                ]
                put = store.put_dledger(topic, rng.randint(0, 2), entries, born_host=BORN)
                await asyncio.gather(*put.acks)
            deadline = time.monotonic() + 10
            while not store.dispatched_all:
                assert time.monotonic() < deadline, "committed entries never dispatched"
                await asyncio.sleep(0.02)
            log = store.dledger.store
            levels = store.reput.delay_levels
            parsed = []
            for index in range(log.ledger_end_index + 1):
                entry = log.get(index)
                assert entry is not None
                unit = real_parse(entry.body, 0, False, levels)
                assert isinstance(unit, tuple)
                parsed.append(unit)
                topic, queue_id, phys, size, tags_code, _ts, queue_offset, _flag = unit
                cq = store.consume_queues[(topic, queue_id)]
                assert cq.get_unit(queue_offset) == (phys, size, tags_code), unit
            return dispatched, parsed, parses
        finally:
            await store.shutdown()

    dispatched, parsed, parses = asyncio.run(run())
    assert len(parsed) > 40
    # the compiled walk writes runs of units straight to the queues, no tuple per entry
    assert dispatched == ([] if path == "compiled" else parsed)
    assert parses == 0, f"{parses} of {len(parsed)} committed entries were parsed back"


def test_an_entry_of_another_term_than_planned_is_parsed(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.current_term = lambda: 1
    bodies = [
        encode_record(topic="t", queue_id=0, body=bytes([i]) * (150 + 37 * i), queue_offset=i)
        for i in range(6)
    ]
    store.append_batch_as_leader(bodies, 1, _patch_physical_offset)
    dispatched: list[DispatchTuple] = []
    reput = DLedgerReput(DLedgerCommitLog(store, FILE), dispatched.append)
    reput.start_after(-1)
    entries = [store.get(i) for i in range(6)]
    positions = [e.pos for e in entries if e is not None]
    marked = [("planned", 0, p + 48, 1, 0, 0, i, 0) for i, p in enumerate(positions)]
    # entries 0-2 planned under the term they have; 3-5 under another (a rewritten tail)
    reput.plan(0, 1, positions[:3], marked[:3])
    reput.plan(3, 2, positions[3:], marked[3:])
    store.update_committed_index(1, 5)
    reput.do_reput()
    assert dispatched[:3] == marked[:3]
    assert dispatched[3:] == [parse_record(e.body, 0, False) for e in entries[3:] if e is not None]
    assert not reput.planned
