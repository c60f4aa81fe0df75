"""Streaming end-to-end latency of the ``brokergroup`` source (issue 18: p50 ≤ 1 s at a 1 s
trigger): produce → row visible in the sink.

A producer thread sends one message every ``--interval`` seconds over RocketMQ's remoting
protocol to a master + slave group; a streaming query reads the topic with a processing-time
trigger of ``--trigger`` seconds and a ``foreachBatch`` sink that collects each batch's
``bornTimestamp`` column to the driver. A row's latency is the moment its batch reached the sink
minus its born time (the producer's clock, which is this machine's: no skew). The first batches
(messages born in the first ``--skip`` seconds of producing) are left out: warm-up.

    .venv/bin/python -m bench.spark_latency                 # 60 s at 50 msgs/s, 1 s trigger
    .venv/bin/python -m bench.spark_latency --seconds 20    # a quick look

Writes ``bench/results/spark_latency.json`` (p50/p90/p99/max, per-batch sizes, the load).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.spark_read import RESULTS, session

TOPIC = "latency"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def produce_paced(group: Any, stop: threading.Event, interval: float, sent: list[float]) -> None:
    """One message every ``interval`` seconds until ``stop``; born times are the client's."""
    from habroker.client import SyncMQProducer

    with SyncMQProducer(group.master.address, send_timeout=10) as producer:
        next_at = time.monotonic()
        i = 0
        while not stop.is_set():
            producer.send(TOPIC, f"m{i}".encode(), keys=f"m{i}")
            sent.append(time.time())
            i += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)


def measure(spark: Any, group: Any, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    latencies: list[float] = []
    batches: list[tuple[float, int]] = []
    start = time.time()
    measure_from = [float("inf")]  # born times from here on count: --skip after producing began

    def sink(df: Any, _batch_id: int) -> None:
        born = [r[0].timestamp() for r in df.select("bornTimestamp").collect()]
        now = time.time()
        batches.append((now - start, len(born)))
        latencies.extend(now - b for b in born if b >= measure_from[0])

    stream = (
        spark.readStream.format("brokergroup")
        .option("namesrvAddr", group.namesrv_addr)
        .option("topic", TOPIC)
        .option("startingOffsets", "latest")
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime=f"{args.trigger} seconds")
        .start()
    )
    stop = threading.Event()
    sent: list[float] = []
    try:
        while not query.recentProgress:  # the query has planned its first batch
            time.sleep(0.2)
        producer = threading.Thread(
            target=produce_paced, args=(group, stop, args.interval, sent), daemon=True
        )
        measure_from[0] = time.time() + args.skip
        producer.start()
        time.sleep(args.seconds)
        stop.set()
        producer.join(30)
        time.sleep(args.trigger * 3)  # the last rows reach the sink
    finally:
        progress = list(query.recentProgress)
        query.stop()
    # where a trigger's time goes (Spark's own breakdown, ms): planning (latestOffset,
    # queryPlanning), reading and the sink (addBatch), committing (commitOffsets, walCommit)
    phases: dict[str, list[int]] = {}
    for p in progress:
        if p.get("numInputRows"):
            for name, ms in (p.get("durationMs") or {}).items():
                phases.setdefault(name, []).append(int(ms))
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    seen = sum(n for _, n in batches)
    if seen != len(sent):
        raise SystemExit(f"{len(sent)} messages sent, {seen} reached the sink")
    return {
        "sent": len(sent),
        "measured_rows": len(latencies),
        "latency_s": {
            "p50": round(percentile(latencies, 50), 3),
            "p90": round(percentile(latencies, 90), 3),
            "p99": round(percentile(latencies, 99), 3),
            "max": round(max(latencies), 3),
            "mean": round(statistics.fmean(latencies), 3),
        },
        "batches": len(batches),
        "duration_ms_median": {k: statistics.median(v) for k, v in sorted(phases.items())},
        "rows_per_batch_median": statistics.median(n for _, n in batches if n) if seen else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to produce")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between messages")
    parser.add_argument("--trigger", type=float, default=1.0, help="processing-time trigger (s)")
    parser.add_argument("--skip", type=float, default=10.0, help="seconds of warm-up left out")
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_latency.json")
    args = parser.parse_args(argv)

    from habroker.local import LocalGroup

    load_before = list(os.getloadavg())
    root = Path(tempfile.mkdtemp(prefix="bench-spark-latency-"))
    group = LocalGroup(root / "group", slaves=1, mode="ASYNC").start()
    try:
        code, body = group.master.request(
            "POST", "/v1/topics", {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4}
        )
        if code not in (200, 201):
            raise SystemExit(f"cannot create the topic: {code} {body}")
        spark = session(args.cores, [])
        try:
            result = measure(spark, group, args, root)
        finally:
            spark.stop()
    finally:
        group.stop()
        shutil.rmtree(root, ignore_errors=True)
    result.update(
        {
            "trigger_s": args.trigger,
            "messages_per_s": round(1 / args.interval, 1),
            "produce_seconds": args.seconds,
            "warmup_left_out_s": args.skip,
            "target": "p50 <= 1 s at a 1 s trigger",
            "met": result["latency_s"]["p50"] <= 1.0 if args.trigger == 1.0 else None,
            "load_average_before": load_before,
            "load_average_after": list(os.getloadavg()),
            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
