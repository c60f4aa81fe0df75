"""HA catch-up benchmark: a fresh slave copying a large backlog, beside the loopback limit.

Each run measures, in separate processes as deployed (master and slave do not share a core):

* ``limit``: ``os.sendfile`` of the master's commit-log files over loopback TCP into a receiver
  that does ``recv_into`` a preallocated buffer and ``os.write`` to a file: the least work any
  Python slave must do, on this machine, right now;
* ``ha``: a master process (MessageStore + HAService) and a fresh slave process (MessageStore +
  HAClient); the time from the slave's start until its max offset equals the master's and
  every record is dispatched (the store indexes records as it appends them);
* ``ha_copy_only`` (diagnostic): the same with the slave store's dispatcher switched off, to
  show how much of the slave's time is the HA path and how much is indexing records.

Runs rotate the order (the machine's speed drifts), and each phase starts after an untimed
``sync``: 2 GiB written by the phase before (or by building the backlog) is otherwise still
being written back, and throttles whichever phase comes next. The result is min/median/max of each,
CPU seconds per GB on each side (what the transfer costs, whatever the machine's load), and
the ratio of medians. JSON goes
to ``bench/results/ha_catchup.json`` and a plot beside it.

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
    cpu0 = time.process_time()
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
    cpu = time.process_time() - cpu0
    print(json.dumps({"seconds": seconds, "bytes": got, "cpu": cpu}), flush=True)


def child_limit_send(args: dict[str, Any]) -> None:
    files = sorted(Path(args["dir"]).iterdir())
    left = args["total"]
    cpu0 = time.process_time()
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
    print(json.dumps({"cpu": time.process_time() - cpu0}), flush=True)


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

    _run_maybe_profiled(main(), args.get("profile", False))


def _run_maybe_profiled(coro: Any, profile: bool) -> Any:
    if not profile:
        return asyncio.run(coro)
    import cProfile
    import pstats

    prof = cProfile.Profile()
    result = prof.runcall(asyncio.run, coro)
    stats = pstats.Stats(prof, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(15)
    return result


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
        if args.get("copy_only"):
            store.reput.do_reput = lambda: 0  # type: ignore[method-assign]
            store.reput.do_reput_slice = lambda budget: 0  # type: ignore[method-assign]
        client = HAClient(config, store)
        target = args["target"]
        start = time.perf_counter()
        cpu0 = time.process_time()
        await client.start()
        while store.max_phy_offset < target:
            await store.wait_for_new_data(store.max_phy_offset, 1.0)
        replicated = time.perf_counter() - start  # every byte in the log (what the slave acks)
        # the store indexes behind the HA reader; there is no event for it, so poll briefly
        while not args.get("copy_only") and store.dispatched_offset < target:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        await client.stop()
        await store.shutdown()
        return {
            "seconds": seconds,
            "replicated_seconds": replicated,
            "cpu": cpu,
            "bytes": store.max_phy_offset,
        }

    print(json.dumps(_run_maybe_profiled(main(), args.get("profile", False))), flush=True)


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


class Measured(dict[str, float]):
    """One transfer: MB/s, and CPU seconds per GB on the receiving and the sending side."""

    @classmethod
    def of(cls, total: int, seconds: float, recv_cpu: float, send_cpu: float) -> Measured:
        gb = total / 1e9
        return cls(
            MBps=round(total / seconds / 1e6, 1),
            recv_cpu_s_per_GB=round(recv_cpu / gb, 3),
            send_cpu_s_per_GB=round(send_cpu / gb, 3),
        )


def process_cpu(pid: int) -> float:
    """utime + stime of a running process, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_limit(master_root: Path, work: Path, total: int) -> Measured:
    port = free_port()
    out = work / "limit.out"
    recv = spawn("limit-recv", {"port": port, "total": total, "out": str(out)})
    wait_ready(recv)
    send = spawn(
        "limit-send", {"port": port, "total": total, "dir": str(master_root / "commitlog")}
    )
    result = last_json(recv, timeout=600)
    sent = last_json(send, timeout=60)
    out.unlink(missing_ok=True)
    return Measured.of(total, result["seconds"], result["cpu"], sent["cpu"])


def run_slave(
    work: Path,
    args: dict[str, Any],
    master: subprocess.Popen[str],
    port: int,
    target: int,
    copy_only: bool,
    profile: bool,
) -> Measured:
    slave_root = work / "slave"
    shutil.rmtree(slave_root, ignore_errors=True)
    master_cpu = process_cpu(master.pid)
    slave = spawn(
        "slave",
        {
            **args,
            "root": str(slave_root),
            "port": port,
            "target": target,
            "profile": profile,
            "copy_only": copy_only,
        },
    )
    try:
        result = last_json(slave, timeout=1800)
        master_cpu = process_cpu(master.pid) - master_cpu
    finally:
        shutil.rmtree(slave_root, ignore_errors=True)
    measured = Measured.of(target, result["seconds"], result["cpu"], master_cpu)
    if not copy_only:  # the log complete (acked) before the last record was indexed
        measured["replicated_MBps"] = round(target / result["replicated_seconds"] / 1e6, 1)
    return measured


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
        "HA catch-up\n(fresh slave)",
        "diagnostic: HA path only\n(slave dispatcher off)",
    ]
    keys = ["limit_MBps", "ha_MBps", "ha_copy_only_MBps"]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for i, key in enumerate(keys):
        values = [run[key] for run in result["runs"]]
        med = statistics.median(values)
        ax.bar(i, med, color=["#888888", "#2a7ab0", "#b0b0d8"][i], width=0.6)
        ax.errorbar(
            i, med, yerr=[[med - min(values)], [max(values) - med]], color="black", capsize=6
        )
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.text(i + 0.32, med, f"{med:.0f}", ha="left", va="center")
    for run in result["runs"]:  # one line per run: the figures taken side by side
        ax.plot(range(len(keys)), [run[k] for k in keys], color="#999999", lw=0.7, zorder=2)
    ax.set_xticks(range(len(keys)), labels)
    ax.set_ylabel("MB/s (bar: median; dots joined: one run)")
    ax.set_title(
        f"Fresh slave copying {result['size'] / 2**20:.0f} MiB "
        f"(HA/limit per run, median: {result['ratio_per_run_median']:.2f})"
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
    parser.add_argument("--profile-master", action="store_true", help="cProfile the master")
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
    port = free_port()
    master = spawn(
        "master",
        {**args, "root": str(master_root), "port": port, "profile": opts.profile_master},
        stdin=subprocess.PIPE,
    )
    kinds = ["limit", "ha", "ha_copy_only"]
    load_before = os.getloadavg()[0]
    runs = []
    try:
        wait_ready(master)
        for i in range(opts.runs):
            run: dict[str, float] = {}
            for kind in kinds[i % 3 :] + kinds[: i % 3]:
                # untimed: the previous phase's (or the backlog's) dirty pages reach the disk
                # first, so no phase pays for another's writeback
                os.sync()
                if kind == "limit":
                    measured = run_limit(master_root, work, target)
                else:
                    profile = opts.profile and i == 0 and kind == "ha"
                    measured = run_slave(work, args, master, port, target, kind != "ha", profile)
                run.update({f"{kind}_{key}": value for key, value in measured.items()})
            runs.append(run)
            print(f"run {i + 1}: {run}", flush=True)
    finally:
        if master.stdin is not None:
            master.stdin.close()
        try:
            master.wait(timeout=120)
        except subprocess.TimeoutExpired:
            master.kill()
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
        "ha_copy_only_MBps": summary([r["ha_copy_only_MBps"] for r in runs]),
        "cpu_s_per_GB_median": {
            k: {
                side: round(statistics.median(r[f"{k}_{side}_cpu_s_per_GB"] for r in runs), 3)
                for side in ("recv", "send")
            }
            for k in kinds
        },
        "ratio_median": round(ha["median"] / limit["median"], 3),
        # the same run's two figures side by side: less exposed to the machine's drift
        "ratio_per_run": [round(r["ha_MBps"] / r["limit_MBps"], 3) for r in runs],
        "ratio_per_run_median": round(
            statistics.median(r["ha_MBps"] / r["limit_MBps"] for r in runs), 3
        ),
        # every byte in the slave's log and acked, indexing possibly still behind
        "ratio_replicated_per_run": [
            round(r["ha_replicated_MBps"] / r["limit_MBps"], 3) for r in runs
        ],
        "ratio_copy_only_per_run_median": round(
            statistics.median(r["ha_copy_only_MBps"] / r["limit_MBps"] for r in runs), 3
        ),
        "ratio_copy_only_median": round(
            statistics.median(r["ha_copy_only_MBps"] for r in runs) / limit["median"], 3
        ),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [load_before, os.getloadavg()[0]],
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    with contextlib.suppress(ImportError):
        plot(result, out.with_suffix(".png"))
    keys = (
        "limit_MBps",
        "ha_MBps",
        "ha_copy_only_MBps",
        "ratio_median",
        "ratio_per_run",
        "ratio_replicated_per_run",
        "cpu_s_per_GB_median",
    )
    print(json.dumps({k: result[k] for k in keys}))


if __name__ == "__main__":
    main()
