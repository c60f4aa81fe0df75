"""Ratios, goals and the markdown page (docs/benchmarks.md) from one run's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.stats import median_of, ratio

ANALYSIS = Path(__file__).resolve().parent / "analysis.md"
PEER = {"habroker_async": "redis_pipelined", "habroker_sync": "redis_wait"}


def _cells(results: dict[str, Any]) -> dict[tuple[str, int, int], dict[str, Any]]:
    cells = results.get("produce", {}).get("cells", [])
    return {(c["system"], c["batch"], c["producers"]): c for c in cells}


def _limit(results: dict[str, Any], batch: int) -> float | None:
    return median_of(results.get("limits", {}).get("seq_write", {}).get(str(batch)))


def add_ratios(results: dict[str, Any]) -> None:
    """Every produce cell gets its ratio to the peer and to the sequential-write limit."""
    cells = _cells(results)
    for (system, batch, producers), c in cells.items():
        mb = median_of(c["mb_per_s"])
        peer = PEER.get(system)
        if peer and (peer, batch, producers) in cells:
            c["ratio_to_peer"] = ratio(mb, median_of(cells[(peer, batch, producers)]["mb_per_s"]))
        c["ratio_to_seq_write"] = ratio(mb, _limit(results, batch))
    pull = results.get("pull", {})
    seq = _limit(results, 256)
    for entry in pull.values():
        if isinstance(entry, dict) and "mb_per_s" in entry:
            entry["ratio_to_seq_write_256"] = ratio(median_of(entry["mb_per_s"]), seq)
    sa = results.get("sync_async", {})
    by = {(c["system"], c["producers"]): c for c in sa.get("throughput", [])}
    for (system, producers), c in by.items():
        if system == "habroker_sync" and ("habroker_async", producers) in by:
            c["ratio_to_async"] = ratio(
                median_of(c["msgs_per_s"]),
                median_of(by[("habroker_async", producers)]["msgs_per_s"]),
            )
    lat = {c["system"]: c for c in sa.get("latency", [])}
    for system, peer in PEER.items():
        if system in lat and peer in lat:
            for q in ("p50_ms", "p99_ms"):
                lat[system][f"{q}_ratio_to_peer"] = ratio(
                    median_of(lat[system][q]), median_of(lat[peer][q])
                )


def catchup_ratio(results: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(catch-up MB/s, loopback limit MB/s, ratio of medians) from ``bench.ha_catchup``'s JSON."""
    data = results.get("catchup") or {}
    ha = median_of(data.get("ha_MBps"))
    limit = median_of(data.get("limit_MBps"))
    r = data.get("ratio_median")
    return ha, limit, float(r) if isinstance(r, int | float) else ratio(ha, limit)


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    cells = _cells(results)
    out: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, target: float, higher: bool = True, **kw: Any) -> None:
        met = None if value is None else (value >= target if higher else value <= target)
        out.append(
            {"goal": name, "value": value, "target": target, "met": met, "higher": higher, **kw}
        )

    for batch in (32, 256):
        best = [
            c.get("ratio_to_seq_write")
            for (s, b, _), c in cells.items()
            if s == "habroker_async" and b == batch
        ]
        known = [float(x) for x in best if x is not None]
        goal(
            f"issue 2: ASYNC produce batch {batch} / sequential write (best producer count)",
            max(known) if known else None,
            0.5,
        )
    for (system, batch, producers), c in sorted(cells.items()):
        if system == "habroker_async":
            goal(
                f"issue 8: ASYNC / Redis pipelined, batch {batch}, {producers} producer(s)",
                c.get("ratio_to_peer"),
                1.5,
            )
    for (system, batch, producers), c in sorted(cells.items()):
        if system == "habroker_sync" and batch == 32:
            goal(
                f"issue 8: SYNC / Redis XADD+WAIT, batch 32, {producers} producer(s)",
                c.get("ratio_to_peer"),
                1.5,
            )
    sa = results.get("sync_async", {})
    top = max((c["producers"] for c in sa.get("throughput", [])), default=None)
    for c in sa.get("throughput", []):
        if c["system"] == "habroker_sync" and c["producers"] == top:
            goal(f"issue 3: SYNC / ASYNC, {top} producers, batch 1", c.get("ratio_to_async"), 0.9)
    for c in sa.get("latency", []):
        if c["system"] == "habroker_sync":
            goal(
                "issue 8: SYNC single-message p99 / Redis XADD+WAIT p99",
                c.get("p99_ms_ratio_to_peer"),
                1.0,
                higher=False,
            )
    _, _, r = catchup_ratio(results)
    goal("issues 3, 8: slave catch-up / loopback limit", r, 0.8)
    dl = results.get("dledger") or {}
    for c in dl.get("throughput", []):
        if c["system"] == "habroker_dledger":
            goal(
                f"issue 15: DLEDGER / classic SYNC produce, batch 32, {c['producers']} producer(s)",
                c.get("ratio_to_sync"),
                0.8,
            )
    for c in (results.get("rocketmq_dledger") or {}).get("cells", []):
        if c["system"] == "habroker_dledger":
            ceiling = c.get("ceiling_if_cpu_bound")
            goal(
                "issue 15: DLEDGER / classic SYNC produce on the client port (module "
                f"rocketmq_dledger), batch 32, {c['producers']} producer(s)"
                + ("" if ceiling is None else f" (ceiling if CPU-bound {_x(ceiling)})"),
                c.get("ratio_to_sync"),
                0.8,
            )
    read_limit = median_of(results.get("limits", {}).get("seq_read_32KiB"))
    rocketmq_goals(results.get("rocketmq") or {}, goal, read_limit)
    defaults = (dl.get("failover") or {}).get("defaults")
    if defaults:
        out.append(
            {
                "goal": "issue 15: DLedger leader loss -> first accepted write, default timings, "
                "worst round (seconds)",
                "value": defaults["max"],
                "target": 10.0,
                "met": defaults["max"] <= 10.0,
                "higher": False,
                "unit": "s",
            }
        )
    return out


def rocketmq_goals(data: dict[str, Any], goal: Any, read_limit: float | None = None) -> None:
    """Issue 17: habroker over the remoting protocol against a real RocketMQ 4.9.7 group (and
    its pulls against the sequential-read limit of the run, ``read_limit`` MB/s)."""
    modes = data.get("modes") or {}
    if not modes:
        goal("issue 17: habroker vs RocketMQ 4.9.7 (module rocketmq)", None, 1.0)
        return
    cells = {
        (c["mode"], c["system"], c["batch"], c["producers"]): c
        for m in modes.values()
        for c in m.get("cells", [])
    }
    hab = sorted(k for k in cells if k[1] == "habroker")
    for mode, _, batch, producers in hab:
        c = cells[(mode, "habroker", batch, producers)]
        if mode == "ASYNC" and batch in (32, 256):
            goal(
                f"issue 17: ASYNC / RocketMQ ASYNC_MASTER, batch {batch}, {producers} producer(s)",
                c.get("ratio_to_rocketmq"),
                1.0,
            )
            goal(
                f"issue 17: ASYNC (remoting) / Redis pipelined, batch {batch}, "
                f"{producers} producer(s)",
                c.get("ratio_to_redis"),
                1.5,
            )
        if mode == "ASYNC" and batch == 1 and producers >= 4:
            goal(
                f"issue 17: ASYNC / RocketMQ ASYNC_MASTER, batch 1, {producers} producers",
                c.get("ratio_to_rocketmq"),
                0.5,
            )
        if mode == "SYNC" and batch == 32:
            goal(
                f"issue 17: SYNC / RocketMQ SYNC_MASTER, batch 32, {producers} producer(s)",
                c.get("ratio_to_rocketmq"),
                1.0,
            )
        if mode == "SYNC" and batch == 1 and producers == 1:
            goal(
                "issue 17: SYNC single-message p99 / RocketMQ SYNC_MASTER p99 "
                "(batch 1, 1 producer)",
                c.get("p99_ratio_to_rocketmq"),
                1.0,
                higher=False,
            )
            redis = cells.get((mode, "redis", batch, producers))
            goal(
                "issue 17: SYNC single-message p99 / Redis XADD+WAIT p99, remoting "
                "(batch 1, 1 producer)",
                ratio(
                    c["request_latency_ms"].get("p99"),
                    redis["request_latency_ms"].get("p99") if redis else None,
                ),
                2.0,
                higher=False,
            )
    pulls = [c for m in modes.values() for c in m.get("pull", []) if c["system"] == "habroker"]
    for c in pulls:
        goal(
            f"issue 17: pull (PULL_MESSAGE, {c.get('max_per_pull', 32)} a pull) / RocketMQ, "
            f"{c['consumers']} consumer(s)",
            c.get("ratio_to_rocketmq"),
            1.0,
        )
    if not pulls:
        goal("issue 17: pull (PULL_MESSAGE) / RocketMQ", None, 1.0)
    for c in pulls if read_limit is not None else []:
        goal(
            f"issue 17: pull (PULL_MESSAGE, {c.get('max_per_pull', 32)} a pull) / sequential "
            f"read limit, {c['consumers']} consumer(s)",
            ratio(median_of(c.get("mb_per_s")), read_limit),
            0.3,
        )
    if not pulls or read_limit is None:
        goal("issue 17: pull (PULL_MESSAGE) / sequential read limit", None, 0.3)
    for mode, m in modes.items():
        rss = m.get("rss") or {}
        h, r = (rss.get(k, {}).get("VmHWM_MiB") for k in ("habroker", "rocketmq"))
        goal(
            f"issue 17: master RSS peak (VmHWM) under the {mode} produce runs / RocketMQ's",
            ratio(h, r),
            1.0,
            higher=False,
        )


def _disk_note(modes: dict[str, Any]) -> str:
    """How full the disk was at each mode's start and end (brokers refuse writes when full)."""
    parts = [
        f"{mode} {m['disk_used_pct']['start']}% → {m['disk_used_pct']['end']}%"
        for mode, m in modes.items()
        if "disk_used_pct" in m
    ]
    return f" Disk in use (df's used / (used + available)): {', '.join(parts)}." if parts else ""


def _warm_up_seconds(warm_up: dict[str, Any] | None) -> str:
    """How long the warm-up of a run lasted (``bench.rocketmq.warm_up``'s measured seconds)."""
    seconds = [w["seconds"] for w in (warm_up or {}).values() if isinstance(w, dict)]
    return f"{max(seconds):.0f} s" if seconds else "no warm-up"


def _paused_text(modes: dict[str, Any]) -> str:
    """How the idle groups were kept out of each measurement (runs from before: nothing)."""
    cells = [c for m in modes.values() for c in m.get("cells", [])]
    if not cells or not all("others_paused" in c for c in cells):
        return ""
    return (
        "; while one system is measured the other broker groups' processes are stopped "
        "(SIGSTOP, then SIGCONT: idle, RocketMQ's JVMs took ~0.16 cores, which would come out "
        "of the measured group)"
    )


def _warm_up_text(modes: dict[str, Any]) -> str:
    """What each broker sent during its unmeasured warm-up, or that an older run had none."""
    parts = [
        f"{mode} " + ", ".join(f"{s} {w['msgs_per_s']:,} msgs/s" for s, w in m["warm_up"].items())
        for mode, m in modes.items()
        if m.get("warm_up")
    ]
    if not parts:
        return "No warm-up in this run (the JVM's first cells ran cold). "
    first = next(m["warm_up"] for m in modes.values() if m.get("warm_up"))
    return (
        f"Before its first cell each broker got {_warm_up_seconds(first)} of unmeasured "
        "batch-32 load from four "
        f"producers, so the JVM's hot paths are compiled ({'; '.join(parts)}). "
    )


def _pull_transports(limits: dict[str, Any]) -> dict[str, Any]:
    """Module limits' bare pull transport: messages per answer -> its answer size and MB/s by
    connections."""
    return dict(((limits.get("pull_transport") or {}).get("answers") or {}).items())


def pull_transport_mb(limits: dict[str, Any], messages: int, connections: int) -> float | None:
    entry = _pull_transports(limits).get(str(messages)) or {}
    return median_of(((entry.get("connections") or {}).get(str(connections)) or {}).get("mb_per_s"))


def pull_transport_text(limits: dict[str, Any]) -> list[str]:
    """What the bare transport under a pull carries in this run, against the sequential-read
    limit that issue 17's pull target is a fraction of."""
    read = median_of(limits.get("seq_read_32KiB"))
    answers = _pull_transports(limits)
    if not answers:
        return []
    parts = []
    for messages, size in sorted(answers.items(), key=lambda kv: int(kv[0])):
        for conns, entry in sorted(
            (size.get("connections") or {}).items(), key=lambda kv: int(kv[0])
        ):
            mb = median_of(entry.get("mb_per_s"))
            parts.append(
                f"{messages} messages' worth ({size.get('answer_bytes', 0):,} bytes), {conns} "
                f"connection(s): {_f(median_of(entry.get('answers_per_s')))} answers/s = "
                f"{_f(mb)} MB/s of payload, {_x(ratio(mb, read))} the sequential-read limit"
            )
    request = (limits.get("pull_transport") or {}).get("request_bytes")
    return [
        "",
        "**vs. pull transport**: the bare loopback transport under a pull, measured in module "
        f"`limits` of this run — a {request}-byte request answered by `sendfile` from the page "
        "cache, one process per side and connection, no broker in between: "
        + "; ".join(parts)
        + ". Issue 17's pull target is 0.3x the sequential-read limit; where the bare "
        "transport's own ratio is below that, no broker can meet it here.",
    ]


def rocketmq_section(data: dict[str, Any], limits: dict[str, Any] | None = None) -> list[str]:
    lines = [
        "",
        "## habroker vs Apache RocketMQ 4.9.7 (module `rocketmq`, also `python -m bench.rocketmq`)",
        "",
    ]
    modes = data.get("modes") or {}
    if not modes:
        reason = data.get("skipped") or data.get("error") or "not run"
        return [*lines, f"Not measured in this run: {reason}."]
    store = data.get("store", {})
    lines += [
        "Inside one private network namespace (loopback only): a real RocketMQ "
        f"{data.get('version')} master + slave (Java, `BrokerStartup`), a habroker master + slave "
        "and a Redis master + replica, for ASYNC_MASTER and then SYNC_MASTER. Both brokers get "
        "the **same load generator over the remoting protocol** (pre-encoded SEND_MESSAGE_V2 at "
        "batch 1, SEND_BATCH_MESSAGE with RocketMQ's MessageBatch body otherwise, one request "
        "outstanding per connection, producers in separate processes; each frame kind was "
        "answered SUCCESS by both before the run) and the same store settings ("
        + ", ".join(f"{k}={v}" for k, v in store.items())
        + "). Redis gets its lean RESP client (ASYNC: XADD pipelined; SYNC: XADD + WAIT 1). "
        f"RocketMQ JVM: `{' '.join(f for f in data.get('jvm_flags', []) if f.startswith('-X'))}` "
        "(runbroker.sh's G1 options; its 8 GiB heap is sized for a dedicated server, while here "
        "two broker JVMs, a name server, habroker and Redis share 2 cores and 24 GiB with other "
        "work: 1 GiB is twice the 512 MiB the interop probe found plenty, so garbage collection "
        "has headroom at batch 256; C2 on, unlike the interop tests' C1-only JVMs). "
        + _warm_up_text(modes)
        + f"{data.get('reps')} repetitions of {data.get('duration_s')} s, the three systems "
        "taking turns going first"
        + _paused_text(modes)
        + "; figures are messages/s, median (min-max).",
        "",
        f"This part's run: {data.get('started', '?')}, {data.get('seconds', 0):.0f} s"
        f"{', quick (smoke test, not a measurement)' if data.get('quick') else ''}; load average "
        f"at start {data.get('machine', {}).get('loadavg_at_start', '?')} (the machine is shared: "
        "compare ratios within this table, not with other sections' absolute figures)."
        + _disk_note(modes),
        "",
        "| mode | batch | producers | habroker | RocketMQ | Redis | habroker / RocketMQ | "
        "habroker / Redis | req. p99 ms habroker / RocketMQ |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode, m in modes.items():
        by = {(c["system"], c["batch"], c["producers"]): c for c in m.get("cells", [])}
        for system, batch, producers in sorted(k for k in by if k[0] == "habroker"):
            h = by[(system, batch, producers)]
            r = by.get(("rocketmq", batch, producers))
            d = by.get(("redis", batch, producers))
            hp = h["request_latency_ms"].get("p99")
            rp = r["request_latency_ms"].get("p99") if r else None
            lines.append(
                f"| {mode} | {batch} | {producers} | {_mmm(h['msgs_per_s'])} | "
                f"{_mmm(r['msgs_per_s'] if r else None)} | {_mmm(d['msgs_per_s'] if d else None)} | "
                f"{_x(h.get('ratio_to_rocketmq'))} | {_x(h.get('ratio_to_redis'))} | "
                f"{_f(hp, 2)} / {_f(rp, 2)} |"
            )
        for c in m.get("cells", []):
            if c["not_ok_requests"]:
                codes = ", ".join(
                    f"{n} x code {code}" for code, n in sorted(c.get("not_ok_codes", {}).items())
                )
                lines.append(
                    f"| {mode} | {c['batch']} | {c['producers']} | {c['system']}: "
                    f"{c['not_ok_requests']} of {c['requests']} requests not SUCCESS"
                    f"{f' ({codes})' if codes else ''} | | | | | |"
                )
    lines += [
        "",
        "Resident memory of the broker processes over each mode's produce runs (MiB; VmHWM is the "
        "kernel's peak, RssAnon/RssFile sampled every 100 ms: RocketMQ writes through a mapping "
        "of its commit log, so its RSS includes touched file pages; the JVM's heap counts as it "
        "is touched):",
        "",
        "| mode | process | VmHWM | RssAnon peak | RssFile peak |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for mode, m in modes.items():
        for name, r in (m.get("rss") or {}).items():
            lines.append(
                f"| {mode} | {name} | {_f(r.get('VmHWM_MiB'), 1)} | "
                f"{_f(r.get('RssAnon_peak_MiB'), 1)} | {_f(r.get('RssFile_peak_MiB'), 1)} |"
            )
    pulls = [c for m in modes.values() for c in m.get("pull", [])]
    if pulls:
        lines += [
            "",
            "Pull: PULL_MESSAGE for 32 messages (the Java consumer's default pullBatchSize) and "
            "for 1024 (its largest) from the start of a queue, the same pre-encoded request "
            "again and again (both brokers serve the same page-cache-hot bytes), one connection "
            "per consumer, ASYNC groups; RocketMQ with maxTransferCountOnMessageInMemory 1024 "
            "and maxTransferBytesOnMessageInMemory 4 MiB (its defaults, 32 and 256 KiB, would "
            "cut the large pulls short):",
            "",
            "| system | per pull | consumers | msgs/s | MB/s | habroker / RocketMQ | "
            "vs. pull transport | vs. sequential read |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        read = median_of((limits or {}).get("seq_read_32KiB"))
        for c in pulls:
            per_pull = c.get("max_per_pull", 32)
            mb = median_of(c["mb_per_s"])
            bare = pull_transport_mb(limits or {}, per_pull, c["consumers"])
            lines.append(
                f"| {c['system']} | {per_pull} | {c['consumers']} | {_mmm(c['msgs_per_s'])} | "
                f"{_mmm(c['mb_per_s'], 1)} | {_x(c.get('ratio_to_rocketmq'))} | "
                f"{_x(ratio(mb, bare))} | {_x(ratio(mb, read))} |"
            )
        lines += pull_transport_text(limits or {})
    for mode, m in modes.items():
        if m.get("pull_error"):
            lines += ["", f"Pull ({mode}) failed: {m['pull_error']}"]
    javas = [c for m in modes.values() for c in m.get("java_producer", [])]
    if javas:
        lines += [
            "",
            "The real Java producer (RocketMQ 4.9.7 `DefaultMQProducer`, interop/driver "
            "`produce --quiet true`: one producer thread, timed in the JVM from the first send to "
            "the last answer; `batch` = `send(Collection)` of 32, `sync` = one message per "
            "`send`), against each broker's group in the same mode:",
            "",
            "| mode | client mode | batch | messages | habroker msgs/s | RocketMQ msgs/s | "
            "habroker / RocketMQ |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in javas:
            lines.append(
                f"| {c['mode']} | {c['client_mode']} | {c['batch']} | {c['count']:,} | "
                f"{_mmm(c['habroker'])} | {_mmm(c['rocketmq'])} | "
                f"{_x(c.get('ratio_to_rocketmq'))} |"
            )
    for mode, m in modes.items():
        if m.get("java_producer_error"):
            lines += ["", f"Java producer ({mode}) failed: {m['java_producer_error']}"]
    return [*lines, "", "Plot: `bench/results/rocketmq.png`."]


def replica_ceiling_text(cells: list[dict[str, Any]], machine: dict[str, Any]) -> list[str]:
    """What the "ceiling if CPU-bound" column means, and habroker's figures set beside it."""
    dl = {c["producers"]: c for c in cells if c["system"] == "habroker_dledger"}
    rows = [
        f"{p} producer(s): {_x(c.get('ratio_to_sync'))} against a ceiling of "
        f"{_x(c.get('ceiling_if_cpu_bound'))}, with {_f(median_of(c.get('cores_used')), 2)} "
        "cores used"
        for p, c in sorted(dl.items())
        if c.get("ceiling_if_cpu_bound") is not None
    ]
    if not rows:
        return []
    cpus = machine.get("cpus")
    return [
        "**Ceiling if CPU-bound** is (M + S + L) / (M + 2S + L) from the same run's SYNC pair: "
        "M, S and L the CPU us a message of its master, its slave and the load generator. "
        "When every core is busy, msgs/s go as the inverse of all the CPU a message costs on "
        "them, so a DLedger group whose leader costs what the master costs and whose two "
        "followers each cost what the slave costs reaches that ratio to its SYNC pair and no "
        "more; below it is the DLedger group's own overhead, above it a follower cheaper "
        "than a slave. It applies when **cores used** (brokers and load generator) is near "
        f"the machine's {cpus if cpus else '?'} CPUs; with fewer the bound is latency, not "
        "CPU. habroker DLEDGER / SYNC: " + "; ".join(rows) + "."
    ]


def _phases(data: dict[str, Any]) -> str:
    """How a run's groups were phased: each pair measured with the other pair not running (an
    idle JVM group takes CPU from whatever is measured beside it); older runs had all four up."""
    phases = data.get("phases")
    if not phases:
        return "all four running side by side (a run from before the phases)"
    return (
        "; then ".join(" and ".join(f"`{name}`" for name in phase) for phase in phases)
        + ", each pair with the other not running (idle, RocketMQ's groups took 0.37 cores "
        "here, which fell on whichever group was measured beside them); the habroker / "
        "RocketMQ column compares the two phases of this run"
    )


def rocketmq_dledger_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Three-replica DLedger against two-replica SYNC, habroker and RocketMQ 4.9.7 "
        "(module `rocketmq_dledger`)",
        "",
    ]
    cells = data.get("cells") or []
    if not cells:
        reason = data.get("skipped") or data.get("error") or "not run"
        return [*lines, f"Not measured in this run: {reason}."]
    lines += [
        "Four groups in one private network namespace: habroker's DLedger group "
        "(three peers) and SYNC master + slave, RocketMQ 4.9.7's DLedger group (three brokers "
        "with `enableDLegerCommitLog=true`, DLedger 0.3.1.2) and SYNC_MASTER + SLAVE, in two "
        "phases: " + _phases(data) + ". The same "
        "remoting load generator sends batches of 32 1-KiB messages to the client port of "
        f"whoever takes writes, after {_warm_up_seconds(data.get('warm_up'))} of unmeasured "
        "load on each (the JVMs compile their hot paths); "
        f"{data.get('reps')} repetitions of {data.get('duration_s')} s, "
        "the groups of a phase taking turns going first; median (min-max). "
        "**CPU us/msg** is the CPU time "
        "of all the group's broker processes (every thread; the JVMs' GC included) per "
        "acknowledged message. So RocketMQ's own DLEDGER / SYNC ratio on this machine stands "
        "beside habroker's. RocketMQ's DLedger brokers run with "
        + (
            ", ".join(
                f"`{k}={str(v).lower() if isinstance(v, bool) else v}`"
                for k, v in (data.get("java_dledger") or {}).items()
            )
            or "defaults"
        )
        + "; cores each group used while idle (before the load): "
        + (
            ", ".join(f"{k} {v:.2f}" for k, v in (data.get("idle_cores_used") or {}).items())
            or "not measured"
        )
        + ".",
        "",
        f"This part's run: {data.get('started', '?')}, {data.get('seconds', 0):.0f} s"
        f"{', quick (smoke test, not a measurement)' if data.get('quick') else ''}; load average "
        f"at start {data.get('machine', {}).get('loadavg_at_start', '?')}.",
        "",
        "| system | producers | msgs/s | CPU us/msg | load gen. CPU us/msg | cores used "
        "| DLEDGER / SYNC | ceiling if CPU-bound | habroker / RocketMQ |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in cells:
        cores = c.get("cores_used")
        lines.append(
            f"| {c['system']} | {c['producers']} | {_mmm(c['msgs_per_s'])} | "
            f"{_mmm(c['cpu_us_per_msg'].get('all'), 1)} | "
            f"{_mmm(c.get('loadgen_cpu_us_per_msg'), 1)} | {_f(median_of(cores), 2)} | "
            f"{_x(c.get('ratio_to_sync'))} | {_x(c.get('ceiling_if_cpu_bound'))} | "
            f"{_x(c.get('ratio_to_rocketmq'))} |"
        )
    lines += ["", *replica_ceiling_text(cells, data.get("machine") or {})]
    bad = {
        f"{c['system']} x{c['producers']}": c["not_ok_codes"] for c in cells if c["not_ok_requests"]
    }
    if bad:
        lines += ["", f"Requests not answered SUCCESS (response code: count): {bad}."]
    return [*lines, "", "Plot: `bench/results/rocketmq_dledger.png`."]


# -- markdown -----------------------------------------------------------------------------------
def cores_section(data: dict[str, Any]) -> list[str]:
    lines = ["", "## Cores: both masters pinned to 1, 2 and all CPUs (module `cores`)", ""]
    cells = data.get("cells") or []
    if not cells:
        reason = data.get("skipped") or data.get("error") or "not run"
        return [*lines, f"Not measured in this run: {reason}."]
    configs = data.get("configurations", [])
    lines += [
        "A RocketMQ ASYNC_MASTER + slave and a habroker ASYNC master + slave side by side in one "
        "private network namespace, driven by the same remoting load generator. For each "
        "configuration every thread of each master is pinned (`sched_setaffinity`, as "
        "`taskset -a`) to the CPUs below; the slaves, the name server and the load generators "
        "stay on the load side's CPUs. **cores used** is the master's CPU time (all threads) "
        "over the measurement's wall time. "
        + "; ".join(
            f"{len(c['master'])} core(s): master on CPUs {c['master']}, load on {c['load']}"
            for c in configs
        )
        + f". {data.get('reps')} repetitions of {data.get('duration_s')} s, the two brokers "
        "taking turns going first; median (min-max). "
        + (
            "Before the first cell each master took unmeasured load, unpinned: "
            + ", ".join(
                f"{s} {w['seconds']:.0f} s at {w['msgs_per_s']:,} msgs/s"
                for s, w in data["warm_up"].items()
            )
            + "."
            if data.get("warm_up")
            else "No warm-up in this run (the JVM's first cells ran cold)."
        ),
        "",
        f"This part's run: {data.get('started', '?')}, {data.get('seconds', 0):.0f} s"
        f"{', quick (smoke test, not a measurement)' if data.get('quick') else ''}; load average "
        f"at start {data.get('machine', {}).get('loadavg_at_start', '?')}.",
        "",
        "| batch | producers | cores | habroker msgs/s | cores used | RocketMQ msgs/s | "
        "cores used | habroker / RocketMQ | habroker / its 1 core | RocketMQ / its 1 core |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(c["system"], c["cores"], c["batch"], c["producers"]): c for c in cells}
    for _system, cores, batch, producers in sorted(k for k in by if k[0] == "habroker"):
        h = by[("habroker", cores, batch, producers)]
        r = by.get(("rocketmq", cores, batch, producers))
        lines.append(
            f"| {batch} | {producers} | {cores} | {_mmm(h['msgs_per_s'])} | "
            f"{_mmm(h['cores_used'], 2)} | {_mmm(r['msgs_per_s'] if r else None)} | "
            f"{_mmm(r['cores_used'] if r else None, 2)} | {_x(h.get('ratio_to_rocketmq'))} | "
            f"{_x(h.get('ratio_to_one_core'))} | {_x(r.get('ratio_to_one_core') if r else None)} |"
        )
    bad = {c["system"]: c["not_ok_requests"] for c in cells if c["not_ok_requests"]}
    if bad:
        lines += ["", f"Requests not answered SUCCESS: {bad}."]
    return [*lines, "", "Plot: `bench/results/cores.png`."]


def _f(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _mmm(entry: dict[str, Any] | None, digits: int = 0) -> str:
    if not entry or entry.get("median") is None:
        return "-"
    return f"{_f(entry['median'], digits)} ({_f(entry['min'], digits)}-{_f(entry['max'], digits)})"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def dledger_section(data: dict[str, Any]) -> list[str]:
    lines = ["", "## DLedger groups (module `dledger`, also `python -m bench.dledger`)", ""]
    if not data.get("throughput"):
        reason = data.get("skipped") or data.get("error") or "not run"
        return [*lines, f"Not measured in this run: {reason}."]
    lines += [
        "Produce, 1 KiB messages in batches of 32, the same load generator for both: a DLedger",
        "group of three habroker peers (a quorum of two must hold each entry) beside a classic",
        f"SYNC master + slave, taking turns {data['throughput'][0]['msgs_per_s'].get('n', '?')} "
        "times (medians; a ratio is of the medians).",
        "",
        "| system | producers | msgs/s | ratio to SYNC |",
        "| --- | ---: | ---: | ---: |",
    ]
    for c in data["throughput"]:
        lines.append(
            f"| {c['system']} | {c['producers']} | {_mmm(c['msgs_per_s'])} | "
            f"{_x(c.get('ratio_to_sync'))} |"
        )
    lines += [
        "",
        "Leader loss: four single-message producers follow the leader; the leader is SIGKILLed "
        "and restarted each round. Seconds from the kill to the first write another peer "
        "accepted:",
        "",
        "| timings | rounds (s) | median s | max s | acknowledged | missing afterwards |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for label, f in (data.get("failover") or {}).items():
        timings = (
            f["timings"]
            if isinstance(f["timings"], str)
            else ", ".join(f"{k}={v}" for k, v in f["timings"].items())
        )
        lines.append(
            f"| {label}: {timings} | {', '.join(f'{x:.2f}' for x in f['pauseSeconds'])} | "
            f"{f['median']:.2f} | {f['max']:.2f} | {f['acknowledged']} | "
            f"{f['acknowledgedMissing']} |"
        )
    return [*lines, "", "Plot: `bench/results/dledger.png`."]


def failover_section(path: Path | None = None) -> list[str]:
    """``python -m bench.failover``'s last results (a run of its own, not of ``bench.run``)."""
    path = path or Path(__file__).resolve().parent / "results" / "failover.json"
    lines = ["", "## Failover and switchover (`python -m bench.failover`)", ""]
    if not path.exists():
        return [*lines, "Not measured yet: run `python -m bench.failover`."]
    data = json.loads(path.read_text())
    settings = data["settings"]
    targets = data["targets"]
    lines += [
        f"A SYNC group of three habroker processes in controller mode, the operator's failover "
        f"controller ticking every {settings['tickSeconds']:g} s, masterLostSeconds "
        f"{settings['masterLostSeconds']:g} (the default), {settings['producers']} producers "
        "(habroker's remoting client, one message at a time, no retries). Seconds from the event "
        "to the first write the new master accepted:",
        "",
        "| event | median s | max s | rounds | target s | met |",
        "| --- | ---: | ---: | ---: | ---: | :---: |",
    ]
    for kind, target in (
        ("kill", targets["lostMasterSeconds"]),
        ("partition", targets["lostMasterSeconds"]),
        ("switchover", targets["switchoverSeconds"]),
    ):
        row = data["summary"].get(kind)
        if row:
            met = "yes" if row["max"] <= target else "**no**"
            lines.append(
                f"| {kind} | {row['median']:.2f} | {row['max']:.2f} | {row['n']} | "
                f"<= {target:g} | {met} |"
            )
    missing = data["acknowledgedMissing"]
    lines += [
        "",
        f"{data['acknowledged']} messages acknowledged, {data['notAcknowledged']} sends not "
        f"acknowledged (refused or timed out during the switch); acknowledged messages missing "
        f"afterwards, per broker: {missing}. Plot: `bench/results/failover.png`.",
    ]
    return lines


def _quiet_waits(results: dict[str, Any]) -> list[str]:
    """The sentence saying how quiet the machine was when each module started (``bench.run``
    waits for the 1-minute load average to fall to half the CPUs first)."""
    waits = [
        f"{name} {r['quiet_wait']['waited_s']:.0f} s → {r['quiet_wait']['loadavg_1m']}"
        + (
            f", probe {r['quiet_wait']['cpu_probe_ms']:.0f} ms"
            if r["quiet_wait"].get("cpu_probe_ms") is not None
            else ""
        )
        + ("" if r["quiet_wait"]["quiet"] else " (still busy: the wait timed out)")
        for name, r in results.items()
        if isinstance(r, dict) and isinstance(r.get("quiet_wait"), dict)
    ]
    if not waits:
        return []
    return [
        "Before each module the run waited for the 1-minute load average to fall to half the "
        "CPUs (module: seconds waited → load average when it started, and where taken the CPU "
        "probe: a fixed single-threaded Python loop, best of three, in ms — higher is a slower "
        "CPU at that moment, which the load average does not show): " + "; ".join(waits) + ".",
        "",
    ]


def markdown(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m bench.run`); do not edit by hand. All figures come",
        "from **one run on one machine**: habroker (master + slave), Redis (master + replica) and",
        "the machine's physical limits, measured alternately. Figures are median (min-max) of",
        f"{meta.get('reps', '?')} repetitions; messages carry 1 KiB bodies; MB = 1e6 bytes of",
        "payload. Every figure is also given as a ratio to the peer or limit of the same run.",
        "",
        f"Run: {meta.get('started', '?')}, {meta.get('elapsed_s', 0):.0f} s, "
        f"{'quick (smoke test, not a measurement)' if meta.get('quick') else 'full'}; "
        f"machine: {meta.get('machine', {}).get('cpus', '?')} CPUs, Python "
        f"{meta.get('machine', {}).get('python', '?')}, load average at start "
        f"{meta.get('machine', {}).get('loadavg_at_start', '?')}; "
        f"Redis {meta.get('systems', {}).get('redis_version', 'not available')}."
        + "".join(
            f" Module(s) {', '.join(r['modules'])} re-run alone since: {r['started']}, "
            f"{r['elapsed_s']:.0f} s, load average at start {r.get('loadavg_at_start', '?')}."
            for r in meta.get("reruns", [])
        ),
        "",
        "Plots: `bench/results/*.png`; raw data: `bench/results/*.json`.",
        "",
        *_quiet_waits(results),
        "## Goals",
        "",
        "| goal | value | target | met |",
        "| --- | ---: | ---: | :---: |",
    ]
    for g in results.get("goals", []):
        cmp = ">=" if g.get("higher", "p99" not in g["goal"]) else "<="
        met = {True: "yes", False: "**no**", None: "n/a"}[g["met"]]
        if g.get("unit") == "s":
            value, target = _f(g["value"], 2) + " s", f"{cmp} {g['target']:g} s"
        else:
            value, target = _x(g["value"]), f"{cmp} {g['target']}x"
        lines.append(f"| {g['goal']} | {value} | {target} | {met} |")
    limits = results.get("limits", {})
    if limits:
        lines += [
            "",
            "## Physical limits (same run)",
            "",
            "| limit | MB/s or latency |",
            "| --- | ---: |",
        ]
        for batch, entry in limits.get("seq_write", {}).items():
            lines.append(f"| sequential write, {batch} KiB writes (page cache) | {_mmm(entry)} |")
        lines.append(
            f"| sequential write + fdatasync every MiB | {_mmm(limits.get('seq_write_sync_1MiB'))} |"
        )
        lines.append(
            f"| loopback TCP sendfile → recv_into → file write | {_mmm(limits.get('loopback'))} |"
        )
        if limits.get("seq_read_32KiB"):
            lines.append(
                f"| sequential read, 32 KiB reads (page cache) | {_mmm(limits['seq_read_32KiB'])} |"
            )
        request = (limits.get("pull_transport") or {}).get("request_bytes")
        for _messages, size in sorted(_pull_transports(limits).items(), key=lambda kv: int(kv[0])):
            for conns, entry in sorted(
                (size.get("connections") or {}).items(), key=lambda kv: int(kv[0])
            ):
                lines.append(
                    f"| pull transport: {request} B request → "
                    f"{size.get('answer_bytes', 0):,} B sendfile answer, {conns} connection(s) "
                    f"(payload) | {_mmm(entry.get('mb_per_s'))} |"
                )
        fs = limits.get("fdatasync_ms", {})
        lines.append(
            f"| 1 KiB append + fdatasync, p50 / p99 | {_f(fs.get('p50'), 3)} / {_f(fs.get('p99'), 3)} ms |"
        )
    cells = results.get("produce", {}).get("cells", [])
    if cells:
        lines += [
            "",
            "## Produce throughput",
            "",
            "One request carries `batch` messages (habroker: one HTTP batch; Redis: `batch`",
            "pipelined XADDs, plus `WAIT 1` for the synchronous peer). Each producer is one",
            "connection with one request in flight; producers run in separate processes.",
            "",
            "| system | batch | producers | msgs/s | MB/s | vs peer | vs seq. write | req. p50 / p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in cells:
            lat = c.get("request_latency_ms", {})
            lines.append(
                f"| {c['system']} | {c['batch']} | {c['producers']} | {_mmm(c['msgs_per_s'])} | "
                f"{_mmm(c['mb_per_s'], 1)} | {_x(c.get('ratio_to_peer'))} | "
                f"{_x(c.get('ratio_to_seq_write'))} | {_f(lat.get('p50'), 2)} / {_f(lat.get('p99'), 2)} |"
            )
    sa = results.get("sync_async", {})
    if sa.get("throughput"):
        lines += [
            "",
            "## SYNC vs ASYNC master (single-message requests)",
            "",
            "| system | producers | msgs/s | MB/s | SYNC / ASYNC | req. p50 / p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in sa["throughput"]:
            lat = c.get("request_latency_ms", {})
            lines.append(
                f"| {c['system']} | {c['producers']} | {_mmm(c['msgs_per_s'])} | {_mmm(c['mb_per_s'], 1)} | "
                f"{_x(c.get('ratio_to_async'))} | {_f(lat.get('p50'), 2)} / {_f(lat.get('p99'), 2)} |"
            )
    if sa.get("latency"):
        lines += [
            "",
            "## Single-message latency (one producer, one message per request)",
            "",
            "| system | p50 ms | p99 ms | p50 / peer | p99 / peer |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for c in sa["latency"]:
            lines.append(
                f"| {c['system']} | {_mmm(c['p50_ms'], 3)} | {_mmm(c['p99_ms'], 3)} | "
                f"{_x(c.get('p50_ms_ratio_to_peer'))} | {_x(c.get('p99_ms_ratio_to_peer'))} |"
            )
    lag = results.get("lag", {})
    if lag.get("systems"):
        lines += [
            "",
            "## Replication lag under sustained load",
            "",
            f"{lag['offered_msgs_per_s']:,} msgs/s offered (batches of {lag['batch']}, "
            f"{lag['producers']} producers) for {lag['seconds']} s; offsets sampled every 20 ms.",
            "",
            "| system | achieved msgs/s | lag p50 bytes | lag p99 bytes | lag max bytes | lag p99 ms at rate |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for system, entry in lag["systems"].items():
            lines.append(
                f"| {system} | {_mmm(entry['achieved_msgs_per_s'])} | {_mmm(entry['lag_p50_bytes'])} | "
                f"{_mmm(entry['lag_p99_bytes'])} | {_mmm(entry['lag_max_bytes'])} | {_mmm(entry['lag_p99_ms'], 2)} |"
            )
    pull = results.get("pull", {})
    if any(isinstance(v, dict) for v in pull.values()):
        lines += [
            "",
            "## Pull throughput (habroker master, backlog in the page cache)",
            "",
            f"Backlog {pull.get('backlog_messages', 0):,} messages, up to {pull.get('max_per_pull')} per pull, one queue per consumer.",
            "",
            "| consumers | msgs/s | MB/s | vs seq. write (256 KiB) |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for entry in pull.values():
            if isinstance(entry, dict) and "mb_per_s" in entry:
                lines.append(
                    f"| {entry['consumers']} | {_mmm(entry['msgs_per_s'])} | {_mmm(entry['mb_per_s'], 1)} | "
                    f"{_x(entry.get('ratio_to_seq_write_256'))} |"
                )
    ha, limit, r = catchup_ratio(results)
    lines += ["", "## Slave catch-up", ""]
    data = results.get("catchup") or {}
    if ha is None:
        lines.append(
            f"Not measured in this run: {data.get('skipped') or data.get('error') or 'no data'}."
        )
    else:
        lines += [
            "| catch-up MB/s | loopback limit MB/s | ratio |",
            "| ---: | ---: | ---: |",
            f"| {_f(ha)} | {_f(limit)} | {_x(r)} |",
        ]
    lines += failover_section()
    lines += dledger_section(results.get("dledger") or {})
    lines += rocketmq_section(results.get("rocketmq") or {}, results.get("limits"))
    lines += rocketmq_dledger_section(results.get("rocketmq_dledger") or {})
    lines += cores_section(results.get("cores") or {})
    notes = results.get("notes", [])
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if ANALYSIS.exists():  # hand-written: what the profiles say bounds each figure
        lines += ["", ANALYSIS.read_text().rstrip()]
    return "\n".join(lines) + "\n"
