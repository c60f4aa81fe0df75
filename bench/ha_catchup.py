"""HA catch-up benchmark: a fresh slave copying a large backlog, beside the loopback limit.

Each run measures, in separate processes as deployed (master and slave do not share a core):

* ``limit``: ``os.sendfile`` of the master's commit-log files over loopback TCP into a receiver
  that does ``recv_into`` a preallocated buffer and ``os.write`` to a file: the least work any
  Python slave must do, on this machine, right now;
* ``ha``: a master process (MessageStore + HAService) and a fresh slave process (MessageStore +
  HAClient); the time from the slave's start until its max offset equals the master's.

Runs alternate the two (order flipped every run) because the machine's speed drifts; the
result is min/median/max of each and the ratio of medians. JSON goes to
``bench/results/ha_catchup.json`` and a plot beside it.

    python -m bench.ha_catchup                 # 2 GiB backlog, 3 runs
    python -m bench.ha_catchup --size 256M --runs 5 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_config(root: Path, role: str, args: dict[str, Any], **extra: Any) -> Any:
    from habroker.config import BrokerConfig, BrokerRole

    return BrokerConfig(
        storePathRootDir=str(root),
        brokerRole=BrokerRole(role),
        brokerId=0 if role != "SLAVE" else 1,
        listenPort=free_port(),
        mappedFileSizeCommitLog=args["file_size"],
        haTransferBatchSize=args["batch"],
        **extra,
    )


# -- backlog -------------------------------------------------------------------------------
def build_backlog(root: Path, args: dict[str, Any]) -> int:
    """Fill a master store with ``size`` bytes of messages (reused when already built)."""
    marker = root / "backlog.json"
    want = {k: args[k] for k in ("size", "file_size", "body_size")}
    if marker.exists():
        have = json.loads(marker.read_text())
        if {k: have.get(k) for k in want} == want:
            return int(have["max_offset"])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    top = asyncio.run(_fill(root, args))
    marker.write_text(json.dumps({**want, "max_offset": top}))
    return top


async def _fill(root: Path, args: dict[str, Any]) -> int:
    from habroker.store.message_store import MessageStore
    from habroker.store.values import BatchEntry

    store = MessageStore(broker_config(root, "ASYNC_MASTER", args, haListenPort=free_port()))
    await store.start()
    body = os.urandom(args["body_size"])
    entries = [BatchEntry(flag=0, body=body, properties=b"") for _ in range(32)]
    queue = 0
    while store.max_phy_offset < args["size"]:
        store.put_messages("BenchTopic", queue % 8, entries, born_host=("127.0.0.1", 40000))
        queue += 1
        if queue % 256 == 0:
            await asyncio.sleep(0)  # let the store's flush and dispatch run
    top = int(store.max_phy_offset)
    await store.shutdown()
    return top


# -- children ------------------------------------------------------------------------------
def child_limit_recv(args: dict[str, Any]) -> None:
    total, out = args["total"], Path(args["out"])
    with socket.create_server(("127.0.0.1", args["port"])) as server:
        print("READY", flush=True)
        conn, _ = server.accept()
    buf = bytearray(4 * 1024 * 1024)
    view = memoryview(buf)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    got = 0
    start = time.perf_counter()
    with conn:
        while got < total:
            n = conn.recv_into(view)
            if n == 0:
                raise SystemExit(f"sender stopped at {got} of {total}")
            written = 0
            while written < n:
                written += os.write(fd, view[written:n])
            got += n
    seconds = time.perf_counter() - start
    os.close(fd)
    print(json.dumps({"seconds": seconds, "bytes": got}), flush=True)


def child_limit_send(args: dict[str, Any]) -> None:
    files = sorted(Path(args["dir"]).iterdir())
    left = args["total"]
    with socket.create_connection(("127.0.0.1", args["port"])) as sock:
        for path in files:
            if left <= 0:
                break
            with open(path, "rb") as f:
                size = min(os.fstat(f.fileno()).st_size, left)
                pos = 0
                while pos < size:
                    pos += os.sendfile(sock.fileno(), f.fileno(), pos, size - pos)
            left -= size


def child_master(args: dict[str, Any]) -> None:
    async def main() -> None:
        from habroker.ha import HAService
        from habroker.store.message_store import MessageStore

        config = broker_config(Path(args["root"]), "ASYNC_MASTER", args, haListenPort=args["port"])
        store = MessageStore(config)
        await store.start()
        service = HAService(config, store)
        await service.start()
        print("READY", store.max_phy_offset, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
        await service.stop()
        await store.shutdown()

    asyncio.run(main())


def child_slave(args: dict[str, Any]) -> None:
    async def main() -> dict[str, float]:
        from habroker.ha import HAClient
        from habroker.store.message_store import MessageStore

        config = broker_config(
            Path(args["root"]),
            "SLAVE",
            args,
            haListenPort=free_port(),
            haMasterAddress=f"127.0.0.1:{args['port']}",
        )
        store = MessageStore(config)
        await store.start()
        client = HAClient(config, store)
        target = args["target"]
        start = time.perf_counter()
        await client.start()
        while store.max_phy_offset < target:
            await store.wait_for_new_data(store.max_phy_offset, 1.0)
        copied = time.perf_counter() - start
        # the store dispatches as it appends; there is no event for it, so poll briefly
        while store.dispatched_offset < target:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        dispatched = time.perf_counter() - start
        await client.stop()
        await store.shutdown()
        return {"seconds": copied, "dispatched_seconds": dispatched, "bytes": store.max_phy_offset}

    if args.get("profile"):
        import cProfile
        import pstats

        prof = cProfile.Profile()
        result = prof.runcall(asyncio.run, main())
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(25)
        stats.sort_stats("tottime").print_stats(15)
    else:
        result = asyncio.run(main())
    print(json.dumps(result), flush=True)


CHILDREN = {
    "limit-recv": child_limit_recv,
    "limit-send": child_limit_send,
    "master": child_master,
    "slave": child_slave,
}


# -- parent --------------------------------------------------------------------------------
def spawn(role: str, args: dict[str, Any], stdin: int | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.ha_catchup", "--child", role, json.dumps(args)]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stdin=stdin,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def wait_ready(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        raise RuntimeError(f"child failed to start: {line!r}")
    return line


def last_json(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"child exited {proc.returncode}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_limit(master_root: Path, work: Path, total: int) -> float:
    port = free_port()
    out = work / "limit.out"
    recv = spawn("limit-recv", {"port": port, "total": total, "out": str(out)})
    wait_ready(recv)
    send = spawn(
        "limit-send", {"port": port, "total": total, "dir": str(master_root / "commitlog")}
    )
    result = last_json(recv, timeout=600)
    send.wait(timeout=60)
    out.unlink(missing_ok=True)
    return total / result["seconds"] / 1e6


def run_ha(
    master_root: Path, work: Path, args: dict[str, Any], target: int, profile: bool
) -> tuple[float, float]:
    port = free_port()
    master = spawn(
        "master", {**args, "root": str(master_root), "port": port}, stdin=subprocess.PIPE
    )
    try:
        wait_ready(master)
        slave_root = work / "slave"
        shutil.rmtree(slave_root, ignore_errors=True)
        slave = spawn(
            "slave",
            {**args, "root": str(slave_root), "port": port, "target": target, "profile": profile},
        )
        result = last_json(slave, timeout=1800)
    finally:
        if master.stdin is not None:
            master.stdin.close()
        try:
            master.wait(timeout=60)
        except subprocess.TimeoutExpired:
            master.kill()
    shutil.rmtree(work / "slave", ignore_errors=True)
    return target / result["seconds"] / 1e6, target / result["dispatched_seconds"] / 1e6


def summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        "loopback limit\n(sendfile→recv_into→write)",
        "HA catch-up\n(copied)",
        "HA catch-up\n(copied + dispatched)",
    ]
    keys = ["limit_MBps", "ha_MBps", "ha_dispatched_MBps"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, key in enumerate(keys):
        values = [run[key] for run in result["runs"]]
        med = statistics.median(values)
        ax.bar(i, med, color=["#888888", "#2a7ab0", "#7fb3d5"][i], width=0.6)
        ax.errorbar(
            i, med, yerr=[[med - min(values)], [max(values) - med]], color="black", capsize=6
        )
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.text(i, med, f"{med:.0f}", ha="center", va="bottom")
    ax.set_xticks(range(len(keys)), labels)
    ax.set_ylabel("MB/s (median, min-max, each run a dot)")
    ax.set_title(
        f"Fresh slave copying {result['size'] / 2**20:.0f} MiB "
        f"(ratio of medians {result['ratio_median']:.2f})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--size", default="2G", help="backlog size (default 2G)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--file-size", default="1G", help="mappedFileSizeCommitLog (1G)")
    parser.add_argument("--body-size", type=int, default=4096, help="message body bytes")
    parser.add_argument("--batch", type=int, default=32768, help="haTransferBatchSize")
    parser.add_argument("--workdir", default=None, help="where the stores go (default: tmp)")
    parser.add_argument("--out", default=str(RESULTS / "ha_catchup.json"))
    parser.add_argument("--profile", action="store_true", help="cProfile the slave (run 1)")
    opts = parser.parse_args()
    if opts.child:
        CHILDREN[opts.child](json.loads(opts.child_args))
        return
    args = {
        "size": parse_size(opts.size),
        "file_size": parse_size(opts.file_size),
        "body_size": opts.body_size,
        "batch": opts.batch,
    }
    work = Path(opts.workdir or tempfile.gettempdir()) / "ha_catchup"
    work.mkdir(parents=True, exist_ok=True)
    master_root = work / "master"
    print(f"building a {args['size'] / 2**20:.0f} MiB backlog in {master_root} ...", flush=True)
    target = build_backlog(master_root, args)
    runs = []
    for i in range(opts.runs):
        order = ["limit", "ha"] if i % 2 == 0 else ["ha", "limit"]
        run: dict[str, float] = {}
        for what in order:
            if what == "limit":
                run["limit_MBps"] = round(run_limit(master_root, work, target), 1)
            else:
                ha, dispatched = run_ha(master_root, work, args, target, opts.profile and i == 0)
                run["ha_MBps"], run["ha_dispatched_MBps"] = round(ha, 1), round(dispatched, 1)
        runs.append(run)
        print(f"run {i + 1}: {run}", flush=True)
    limit = summary([r["limit_MBps"] for r in runs])
    ha = summary([r["ha_MBps"] for r in runs])
    result = {
        "benchmark": "ha_catchup",
        "size": target,
        "mappedFileSizeCommitLog": args["file_size"],
        "bodySize": args["body_size"],
        "haTransferBatchSize": args["batch"],
        "runs": runs,
        "limit_MBps": limit,
        "ha_MBps": ha,
        "ha_dispatched_MBps": summary([r["ha_dispatched_MBps"] for r in runs]),
        "ratio_median": round(ha["median"] / limit["median"], 3),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    with contextlib.suppress(ImportError):
        plot(result, out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("limit_MBps", "ha_MBps", "ratio_median")}))


if __name__ == "__main__":
    main()
