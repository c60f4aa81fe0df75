"""Capture representative DLedger RPC frames between real RocketMQ 4.9.7 DLedger peers.

    .venv/bin/python -m tests.interop.capture_dledger [--out tests/interop/fixtures/dledger]

In a private namespace: a Java name server, three Java DLedger peers (n0..n2) each reached by
the others through a recording proxy (:mod:`tests.interop.dledger_recorder`).  After the
elections the real Java producer sends a few messages (APPEND carries real entries, COMMIT
follows); then one follower is killed, its store wiped, and restarted, so the leader COMPAREs
(the empty follower answers INCONSISTENT_STATE), TRUNCATEs and APPENDs again.  n2 starts
last and is every peer's ``preferredLeaderId``: the first leader hands it leadership.  The first
exchange of each kind is written as ``<kind>.json``: request and answer, each with its remoting
header (parsed and as sent) and its body as sent.  ``tests/interop/test_dledger_fixtures.py``
checks habroker's DLedger protocol against these files without Java.  A second, short run with
``enableBatchPush=true`` adds ``push-append-batch-200.json`` (a push of several entries).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from interop.dledger_java import (
    PEERS,
    JavaDLedgerBroker,
    start_dledger_group,
    wait_leader,
    wait_role,
)
from tests.interop.dledger_recorder import Exchange, Frame, Recorder
from tests.interop.rocketmq_java import (
    JavaNameServer,
    NetNS,
    ensure_installed,
    events_of,
    run_driver,
    summary,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dledger"
VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER = 51001, 51002, 51004, 51005
TOPIC = "DLedgerCapture"


def kind_of(exchange: Exchange) -> str:
    """A file name stem: what was asked and what came back."""
    request, response = exchange.request, exchange.response
    answer = response.body_json() if response is not None and response.body else {}
    code = answer.get("code", "none")
    if request.code == VOTE:
        return f"vote-{str(answer.get('voteResult', code)).lower().replace('_', '-')}"
    if request.code == HEART_BEAT:
        return f"heartbeat-{code}"
    if request.code == PUSH:
        body = request.body_json()
        batch = "-batch" if body.get("batch") else ""
        return f"push-{str(body.get('type')).lower()}{batch}-{code}"
    if request.code == LEADERSHIP_TRANSFER:
        return f"leadership-transfer-{code}"
    return f"code{request.code}-{code}"


def frame_json(frame: Frame) -> dict[str, Any]:
    out: dict[str, Any] = {
        "header": frame.header,
        "header_text": frame.header_raw.decode(),
        "serialize_type": frame.serialize_type,
    }
    try:
        out["body"] = frame.body.decode()
    except UnicodeDecodeError:  # not seen: DLedger bodies are JSON
        import base64

        out["body_base64"] = base64.b64encode(frame.body).decode()
    return out


def fixture(exchange: Exchange, kind: str) -> dict[str, Any]:
    request = exchange.request.body_json()
    assert exchange.response is not None
    return {
        "kind": kind,
        "captured_from": "Apache RocketMQ 4.9.7 broker, DLedger 0.3.1.2, JSON remoting headers",
        "caller": request.get("localId"),
        "callee": exchange.request.callee,
        "request": frame_json(exchange.request),
        "response": frame_json(exchange.response),
    }


def produce(ns: NetNS, count: int, timeout: float = 60.0, mode: str = "sync") -> None:
    """The Java producer, until ``count`` sends came back SEND_OK (the route appears once the
    leader registered as master)."""
    deadline = time.monotonic() + timeout
    while True:
        events = run_driver(
            ns,
            "4.9.7",
            "produce",
            "--namesrv",
            "127.0.0.1:9876",
            "--topic",
            TOPIC,
            "--count",
            str(count),
            "--size",
            "48",
            "--body",
            "text",
            "--tags",
            "dledger",
            "--mode",
            mode,
            check=False,
        )
        sends = events_of(events, "send")
        if events and summary(events).get("sendOk") == count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"sends not all SEND_OK: {sends[-3:]}")
        time.sleep(1)


def capture(root: Path, out: Path) -> list[Path]:
    ensure_installed(["4.9.7"])
    routes = {
        peer: (int(address.rpartition(":")[2]) + 1000, address) for peer, address in PEERS.items()
    }
    with NetNS(root / "netns") as ns, Recorder(ns, routes) as recorder:
        JavaNameServer(ns, root / "namesrv").start()
        # n0 and n1 elect; n2 joins later as everyone's preferred leader, so the leader hands
        # it leadership (LEADERSHIP_TRANSFER) once it caught up
        extra = {"preferredLeaderId": "n2"}
        brokers = start_dledger_group(ns, root, ids=["n0", "n1"], via=recorder.via, extra=extra)
        first, term = wait_leader(brokers.values(), followers=1)
        print(f"leader {first.self_id} term {term}", file=sys.stderr)
        brokers.update(start_dledger_group(ns, root, ids=["n2"], via=recorder.via, extra=extra))
        leader, term = wait_leader(brokers.values(), min_term=term + 1, followers=2)
        print(f"leader {leader.self_id} term {term}", file=sys.stderr)
        recorder.wait_for(lambda x: x.request.code == LEADERSHIP_TRANSFER)
        produce(ns, 3)
        recorder.wait_for(lambda x: kind_of(x) == "push-commit-200")

        follower: JavaDLedgerBroker = next(b for b in brokers.values() if b is not leader)
        follower.kill()
        shutil.rmtree(follower.store_dir)
        (follower.root / "logs" / "broker.log").unlink()
        follower.start()
        wait_role(follower, "FOLLOWER", min_term=term)
        recorder.wait_for(lambda x: kind_of(x).startswith("push-truncate"), timeout=60)
        produce(ns, 2)
        time.sleep(2)

        chosen: dict[str, Exchange] = {}
        for exchange in recorder.exchanges():
            if exchange.response is not None:
                chosen.setdefault(kind_of(exchange), exchange)
        for broker in brokers.values():
            broker.kill()
    return write(out, chosen)


def capture_batch(root: Path) -> dict[str, Exchange]:
    """Three Java peers with ``enableBatchPush=true`` (DLedger's isEnableBatchPush; RocketMQ
    leaves it off): the leader pushes ``batchEntry`` lists.  The first batch APPEND of several
    entries, with its answer."""
    routes = {
        peer: (int(address.rpartition(":")[2]) + 1000, address) for peer, address in PEERS.items()
    }
    with NetNS(root / "netns") as ns, Recorder(ns, routes) as recorder:
        JavaNameServer(ns, root / "namesrv").start()
        brokers = start_dledger_group(ns, root, via=recorder.via, extra={"enableBatchPush": True})
        wait_leader(brokers.values(), followers=2)
        produce(ns, 40, mode="async")
        found = recorder.wait_for(
            lambda x: (
                kind_of(x) == "push-append-batch-200"
                and len(x.request.body_json()["batchEntry"]) > 1
            )
        )
        for broker in brokers.values():
            broker.kill()
    return {"push-append-batch-200": found[0]}


def write(out: Path, chosen: dict[str, Exchange]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, exchange in sorted(chosen.items()):
        path = out / f"{kind}.json"
        path.write_text(json.dumps(fixture(exchange, kind), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--keep", action="store_true", help="keep the run folder (logs)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dledger-capture-"))
    try:
        for path in capture(root / "main", args.out):
            print(path)
        for path in write(args.out, capture_batch(root / "batch")):
            print(path)
    finally:
        if args.keep:
            print(f"run folder: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
