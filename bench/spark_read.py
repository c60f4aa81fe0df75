"""Rows/s of ``spark.read.format("brokergroup")`` over a master + slave group, beside
``spark.range`` of the same row count in the same SparkSession.

    .venv/bin/python -m bench.spark_read            # 2 M messages, 8 queues, 3 runs a mode
    .venv/bin/python -m bench.spark_read --messages 200000 --runs 3   # a quick look
    .venv/bin/python -m bench.spark_read --modes local                # local[2] only
    .venv/bin/python -m bench.spark_read --compare-http d8ed04b       # vs the HTTP connector

Modes (``--modes``, default ``local,cluster-2,cluster-1``), each its own SparkSession against
the same backlog, one after the other: ``local`` is ``local[--cores]`` (one JVM, its Python
workers beside it); ``cluster-N`` is a real Spark standalone cluster started by the benchmark on
127.0.0.1 — a Master and two Workers of one core each (tests/brokergroup_spark/cluster.py) —
with the application limited to N executors of one core (``spark.cores.max=N``): tasks run in
executor JVMs of their own, which the Workers start, each with its own Python workers. The
result's ``modes`` table gives rows/s per mode, the ratio to ``local``, and how busy the brokers
were (their CPU seconds per wall-clock second: a broker is one Python process, so near 1.0 it
is the bound, not Spark).

Both queries end in the ``noop`` sink, so what is timed is producing the rows inside Spark
(for the connector: pulls over RocketMQ's remoting protocol, decoding into Arrow, Arrow into
Spark's rows). The group runs with slaveReadEnable and a small totalPhysicalMemorySize, so the
backlog is read from the slave as it would be in production. The backlog is produced over the
HTTP API (pre-encoded batches: the quickest set-up). Writes ``bench/results/spark_read.json``
and ``.png``.

``--compare-http REF`` also loads the connector as it was at git commit REF (the last one that
read over the HTTP API is d8ed04b) under the name ``brokergroup_http``, and times it in the same
session against the same backlog, alternating which goes first, so the two are measured under
the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
PACKAGE = "pipeline/brokergroup_spark"
OLD_NAME = "brokergroup_spark_http"


def old_connector(ref: str, into: Path) -> Path:
    """The connector's package as of commit ``ref``, renamed so it can be loaded beside the
    current one: package ``brokergroup_spark_http``, data source ``brokergroup_http``."""
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", f"{ref}:{PACKAGE}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    package = into / OLD_NAME
    package.mkdir(parents=True)
    for name in names:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:{PACKAGE}/{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        text = text.replace("brokergroup_spark", OLD_NAME)
        text = text.replace('return "brokergroup"', 'return "brokergroup_http"')
        (package / name).write_text(text)
    return into


def produce(group: Any, topic: str, queues: int, messages: int, body: int) -> float:
    from habroker.client import Producer
    from habroker.wire import encode_batch

    per_queue = messages // queues
    chunk = 4096
    payload = {
        n: encode_batch([os.urandom(body) for _ in range(n)])
        for n in {chunk, per_queue % chunk}
        if n
    }
    start = time.perf_counter()
    with Producer(group.master.http_address, timeout=120) as producer:
        producer.create_topic(topic, queues)
        for queue in range(queues):
            left = per_queue
            while left:
                n = min(chunk, left)
                producer.send_encoded(topic, payload[n], queue_id=queue)
                left -= n
    group.wait_replicated(timeout=600)
    return time.perf_counter() - start


def session(
    cores: int,
    conf: list[str],
    extra_path: Path | None = None,
    cluster: Any = None,
    executors: int = 0,
) -> Any:
    """local[cores], or the standalone ``cluster`` with ``executors`` one-core executors.
    register() gives the Python workers this interpreter (both run on this machine)."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    if extra_path is not None:
        # the Python workers import the old connector too: they inherit PYTHONPATH
        sys.path.insert(0, str(extra_path))
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(extra_path) + (os.pathsep + old if old else "")
    from brokergroup_spark import register
    from pyspark.sql import SparkSession

    quick_jvm = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    builder = (
        SparkSession.builder.master(cluster.url if cluster is not None else f"local[{cores}]")
        .appName("bench-spark-read")
        .config("spark.driver.extraJavaOptions", quick_jvm)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
    )
    if cluster is not None:
        builder = (
            builder.config("spark.executor.extraJavaOptions", quick_jvm)
            .config("spark.executor.memory", "1g")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", str(executors))
        )
    for item in conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if cluster is not None:
        sc = spark.sparkContext._jsc.sc()
        deadline = time.monotonic() + 180
        while sc.getExecutorMemoryStatus().size() < executors + 1:  # + the driver
            if time.monotonic() > deadline:
                raise SystemExit(f"{executors} executors did not register: {cluster.logs()}")
            time.sleep(0.5)
    if extra_path is not None:
        old_source = __import__(f"{OLD_NAME}.source", fromlist=["BrokerGroupDataSource"])
        spark.dataSource.register(old_source.BrokerGroupDataSource)
    return spark


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of this process's descendants, by pid, with a role name."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    info: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        # utime + stime, plus reaped children's (the PySpark daemon forks and reaps workers)
        cpu = sum(int(x) for x in fields[11:15]) / tick
        role = "broker" if "habroker" in cmd else "jvm" if "java" in cmd.split(" ")[0] else "python"
        info[pid] = (role, cpu)
    me = os.getpid()

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return {pid: v for pid, v in info.items() if descends(pid)}


def cpu_split(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, (role, cpu) in after.items():
        out[role] = out.get(role, 0.0) + cpu - before.get(pid, (role, 0.0))[1]
    return {k: round(v, 2) for k, v in sorted(out.items())}


def timed(action: Any, cpu: list[dict[str, float]] | None = None) -> float:
    before = _cpu_by_process()
    own = time.process_time()
    start = time.perf_counter()
    action()
    elapsed = time.perf_counter() - start
    if cpu is not None:
        split = cpu_split(before, _cpu_by_process())
        split["driver_python"] = round(time.process_time() - own, 2)
        cpu.append(split)
    return elapsed


def summary(rows: int, seconds: list[float]) -> dict[str, Any]:
    rates = sorted(rows / s for s in seconds)
    return {
        "seconds": seconds,
        "rows_per_s": {
            "min": round(rates[0]),
            "median": round(statistics.median(rates)),
            "max": round(rates[-1]),
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [result["brokergroup"]["rows_per_s"], result["spark_range"]["rows_per_s"]]
    names = ["brokergroup read\n(remoting, wall clock)", "spark.range\n(wall clock)"]
    if "brokergroup_http" in result:
        measured.insert(1, result["brokergroup_http"]["rows_per_s"])
        names.insert(1, "brokergroup read\n(HTTP, wall clock)")
    medians = [s["median"] for s in measured]
    low = [s["median"] - s["min"] for s in measured]
    high = [s["max"] - s["median"] for s in measured]
    idle = result["brokergroup_cpu_bound_rows_per_s"]["rows_per_s_on_idle_cores"]
    fig, ax = plt.subplots(figsize=(8.5 if len(names) == 3 else 7, 4.2))
    colors = ["#4c72b0", *(["#dd8452"] if len(names) == 3 else []), "#999999"]
    ax.bar(names, medians, yerr=[low, high], capsize=8, color=colors)
    ax.bar(
        ["brokergroup read\n(CPU s / 2 cores)"],
        [idle],
        color="white",
        edgecolor="#4c72b0",
        hatch="//",
    )
    ax.axhline(500_000, color="#c44e52", linestyle="--", label="goal 500 k rows/s")
    for i, value in enumerate([*medians, idle]):
        ax.annotate(
            f"{value / 1e3:,.0f} k",
            (i, value),
            ha="center",
            va="bottom",
            xytext=(0, 3),
            textcoords="offset points",
        )
    ax.set_yscale("log")
    ax.set_ylabel("rows/s (median; bars: min-max)")
    cfg = result["config"]
    load = result["load_average"]["before"][0]
    ax.set_title(
        f"{cfg['messages'] / 1e6:g} M messages, {cfg['body_bytes']}-byte bodies, "
        f"local[{cfg['spark_cores']}], {cfg['runs']} runs, load avg {load:.1f}",
        fontsize=10,
    )
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_modes(text: str) -> list[tuple[str, int]]:
    """``local,cluster-2,cluster-1`` → [("local", 0), ("cluster-2", 2), ("cluster-1", 1)]."""
    modes = []
    for name in text.split(","):
        if name == "local":
            modes.append((name, 0))
        elif name.startswith("cluster-") and name[8:].isdigit() and 1 <= int(name[8:]) <= 2:
            modes.append((name, int(name[8:])))
        else:
            raise argparse.ArgumentTypeError(f"mode {name!r}: local, cluster-1 or cluster-2")
    return modes


def measure(
    spark: Any,
    args: argparse.Namespace,
    group: Any,
    topic: str,
    rows: int,
    sources: list[str],
    mode: str,
) -> dict[str, Any]:
    """Warm up, check the row count, then ``--runs`` timed reads of every source into ``noop``
    (alternating their order) and of ``spark.range``."""

    def reader(source: str = "brokergroup", **extra: str) -> Any:
        # a fresh DataFrameReader each time: .option() changes a reader in place
        r = spark.read.format(source).option("topic", topic)
        if source == "brokergroup":
            r = r.option("namesrvAddr", group.namesrv_addr)
        else:
            r = r.option("endpoints", group.http_endpoints)
        r = r.option("maxRecordsPerPartition", str(args.records_per_partition))
        for key, value in extra.items():
            r = r.option(key, value)
        return r.load()

    served: dict[str, dict[int, int]] = {}
    for source in sources:
        # The first Python data source query pays for starting the workers: not timed.
        reader(source, endingOffsets=json.dumps({topic: {"0": 1000}})).count()
        counts = reader(source).groupBy("brokerId").count().collect()
        served[source] = {r.brokerId: r["count"] for r in counts}
        if sum(served[source].values()) != rows:
            raise SystemExit(f"{source} read {sum(served[source].values())} rows, not {rows}")
    seconds: dict[str, list[float]] = {name: [] for name in sources}
    cpus: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    ranged: list[float] = []
    for run in range(args.runs):
        for source in sources if run % 2 == 0 else reversed(sources):

            def read_all(source: str = source) -> None:
                reader(source).write.format("noop").mode("overwrite").save()

            seconds[source].append(timed(read_all, cpus[source]))
        ranged.append(
            timed(lambda: spark.range(rows).write.format("noop").mode("overwrite").save())
        )
        rates = ", ".join(f"{n} {rows / seconds[n][-1]:,.0f} rows/s" for n in sources)
        print(
            f"{mode} run {run + 1}: {rates}, spark.range {rows / ranged[-1]:,.0f} rows/s; "
            f"cpu s {cpus['brokergroup'][-1]}",
            flush=True,
        )
    return {"seconds": seconds, "cpus": cpus, "served": served, "ranged": ranged}


def mode_summary(rows: int, measured: dict[str, Any], executors: int, cores: int) -> dict[str, Any]:
    seconds, cpu = measured["seconds"]["brokergroup"], measured["cpus"]["brokergroup"]
    # CPU seconds the brokers (master + slave, one Python process each) spent per wall-clock
    # second of the read: near 1.0 the broker serving the reads is saturated
    busy = sorted(c.get("broker", 0.0) / s for c, s in zip(cpu, seconds, strict=True))
    # every process's CPU (brokers, Spark daemons, driver and executor JVMs, Python workers):
    # what the mode costs, whatever else loads the machine
    cpu_s = statistics.median(sum(v for k, v in c.items() if k != "driver_python") for c in cpu)
    return {
        "master": f"local[{cores}]" if executors == 0 else "standalone",
        "executors": executors,
        "cores": cores if executors == 0 else executors,
        **summary(rows, seconds),
        "spark_range_rows_per_s": summary(rows, measured["ranged"])["rows_per_s"],
        "broker_cpu_s_per_wall_s": round(statistics.median(busy), 2),
        "cpu_seconds_per_run_median": round(cpu_s, 2),
        "us_cpu_per_row": round(cpu_s / rows * 1e6, 2),
        "cpu_seconds_by_process": cpu,
        "rows_served_by_broker": {
            str(k): v for k, v in sorted(measured["served"]["brokergroup"].items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3, help="timed reads per mode")
    parser.add_argument("--cores", type=int, default=2, help="of local[N]")
    parser.add_argument(
        "--modes",
        type=parse_modes,
        default=parse_modes("local,cluster-2,cluster-1"),
        help="comma-separated: local, cluster-2, cluster-1 (the first is the reference)",
    )
    parser.add_argument("--records-per-partition", type=int, default=500_000)
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v")
    parser.add_argument("--keep", action="store_true", help="keep the broker stores")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_read.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from --out")
    parser.add_argument(
        "--compare-http",
        metavar="REF",
        help="also time the HTTP-API connector of this git commit (d8ed04b) in the local session",
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
        return 0

    from habroker.local import LocalGroup

    from tests.brokergroup_spark.cluster import StandaloneCluster

    load_before = list(os.getloadavg())
    root = Path(tempfile.mkdtemp(prefix="bench-spark-read-"))
    group = LocalGroup(
        root / "group",
        slaveReadEnable=True,
        totalPhysicalMemorySize=64 << 20,  # backlog > 40% of 64 MiB: read from the slave
        mappedFileSizeCommitLog=256 << 20,
    ).start()
    cluster: Any = None
    results: dict[str, dict[str, Any]] = {}
    reference: dict[str, Any] = {}
    try:
        topic = "bench"
        produce_s = produce(group, topic, args.queues, args.messages, args.body)
        rows = args.messages // args.queues * args.queues
        print(f"produced {rows} messages in {produce_s:.1f} s", flush=True)
        old_path = old_connector(args.compare_http, root / "old") if args.compare_http else None
        for mode, executors in args.modes:
            if executors and cluster is None:
                # two one-core Workers; a mode uses one or both through spark.cores.max
                cluster = StandaloneCluster(root / "spark-cluster", memory="2g").start()
            local = executors == 0
            extra = old_path if local else None
            spark = session(args.cores, args.conf, extra, None if local else cluster, executors)
            sources = ["brokergroup", *(["brokergroup_http"] if extra is not None else [])]
            try:
                measured = measure(spark, args, group, topic, rows, sources, mode)
            finally:
                spark.stop()
            results[mode] = mode_summary(rows, measured, executors, args.cores)
            if not reference:
                reference = measured
    finally:
        if cluster is not None:
            cluster.stop()
        group.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    first = args.modes[0][0]
    base = results[first]["rows_per_s"]["median"]
    for mode in results:
        results[mode]["median_vs_" + first] = round(results[mode]["rows_per_s"]["median"] / base, 2)
    seconds, cpus = reference["seconds"], reference["cpus"]
    connector, cpu = seconds["brokergroup"], cpus["brokergroup"]
    cpu_per_run = [sum(v for k, v in c.items() if k != "driver_python") for c in cpu]
    cpu_s = statistics.median(cpu_per_run)
    result: dict[str, Any] = {
        "benchmark": "spark_read",
        "config": {
            "messages": rows,
            "body_bytes": args.body,
            "queues": args.queues,
            "records_per_partition": args.records_per_partition,
            "spark_cores": args.cores,
            "runs": args.runs,
            "modes": [m for m, _ in args.modes],
            "sink": "noop",
            "spark_conf": args.conf,
            "group": "master + 1 slave (ASYNC), slaveReadEnable=true",
            "protocol": "remoting (namesrvAddr)",
            "standalone_cluster": "1 Master + 2 Workers (1 core, 2g each) on 127.0.0.1; "
            "executors of 1 core, 1g",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "produce_seconds": round(produce_s, 2),
        # the figures below, as before, are the first mode's (local[N] by default)
        "reference_mode": first,
        "rows_served_by_broker": {
            str(k): v for k, v in sorted(reference["served"]["brokergroup"].items())
        },
        "brokergroup": summary(rows, connector),
        "brokergroup_cpu_seconds_by_process": cpu,
        # The machine is shared: wall-clock rates depend on what else runs. CPU seconds do
        # not, so this is the rate the same work would reach with the cores to itself.
        "brokergroup_cpu_bound_rows_per_s": {
            "cpu_seconds_per_run_median": round(cpu_s, 2),
            "us_per_row": round(cpu_s / rows * 1e6, 2),
            "rows_per_s_on_idle_cores": round(rows / (cpu_s / args.cores)),
        },
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "spark_range": summary(rows, reference["ranged"]),
        "modes": results,
    }
    if "brokergroup_http" in seconds:
        result["brokergroup_http"] = {
            "connector_commit": args.compare_http,
            **summary(rows, seconds["brokergroup_http"]),
            "cpu_seconds_by_process": cpus["brokergroup_http"],
            "cpu_seconds_per_run_median": round(
                statistics.median(
                    sum(v for k, v in c.items() if k != "driver_python")
                    for c in cpus["brokergroup_http"]
                ),
                2,
            ),
            "rows_served_by_broker": {
                str(k): v for k, v in sorted(reference["served"]["brokergroup_http"].items())
            },
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    print(modes_table(result))
    if "brokergroup_http" in result:
        print("HTTP connector:", json.dumps(result["brokergroup_http"]["rows_per_s"]))
    return 0


def where(mode: dict[str, Any]) -> str:
    if not mode["executors"]:
        return f"{mode['master']}: threads of the driver JVM"
    n = mode["executors"]
    return f"{n} executor JVM{'s' if n > 1 else ''} of 1 core"


def modes_table(result: dict[str, Any]) -> str:
    """The modes as a markdown table (what docs/spark.md shows)."""
    first = result["reference_mode"]
    lines = [
        f"| mode | where tasks run | rows/s min / median / max | vs {first} | "
        "CPU µs a row (all processes) | broker CPU s per s | spark.range rows/s (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, m in result["modes"].items():
        r = m["rows_per_s"]
        lines.append(
            f"| {mode} | {where(m)} "
            f"| {r['min'] / 1e3:,.0f} k / {r['median'] / 1e3:,.0f} k / {r['max'] / 1e3:,.0f} k "
            f"| {m['median_vs_' + first]:.2f} | {m['us_cpu_per_row']:.1f} "
            f"| {m['broker_cpu_s_per_wall_s']:.2f} "
            f"| {m['spark_range_rows_per_s']['median'] / 1e3:,.0f} k |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
