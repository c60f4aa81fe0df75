"""Where the broker's time goes under produce load: ``python -m bench.profile``.

Starts a master + slave group, drives it with the benchmark's lean producers, and samples the
master (and the slave) with py-spy (``pip install py-spy``; it attaches by PID, so the broker
runs unmodified). Writes, per process, the functions with the largest inclusive and self share
of samples to ``bench/results/profile_<mode>_b<batch>_<role>.txt``.

    python -m bench.profile --batch 256 --producers 1 --mode async --seconds 5
    python -m bench.profile --face remoting --batch 32 --producers 4   # the client port
    python -m bench.profile --face remoting --pull --producers 4       # PULL_MESSAGE, 4 consumers
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench import common, loadgen, servers, systems

_LINE = re.compile(r":\d+\)")


def summarize(raw: Path, top: int = 40) -> str:
    """Inclusive and self shares of py-spy's folded stacks, line numbers merged."""
    incl: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        for frame in set(frames):
            incl[frame] += n
        leaf[frames[-1]] += n
    out = [f"samples: {total}", "", "inclusive:"]
    out += [f"{100 * v / total:5.1f}%  {k}" for k, v in incl.most_common(top)]
    out += ["", "self:"]
    out += [f"{100 * v / total:5.1f}%  {k}" for k, v in leaf.most_common(top // 2)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--mode", choices=("async", "sync"), default="async")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument(
        "--face",
        choices=("http", "remoting"),
        default="http",
        help="drive the HTTP API (as module produce) or the client port (as module rocketmq)",
    )
    p.add_argument(
        "--pull",
        action="store_true",
        help="with --face remoting: profile PULL_MESSAGE (as module rocketmq) instead of produce, "
        "--producers consumers",
    )
    p.add_argument(
        "--pull-max",
        type=int,
        default=32,
        help="with --pull: messages per PULL_MESSAGE (module rocketmq pulls 32 and 1024)",
    )
    p.add_argument("--out-dir", type=Path, default=common.RESULTS_DIR)
    args = p.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    settings = common.Settings(duration=args.seconds + 1.0, warmup=0.5)
    common.install_signal_handlers()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    name = f"habroker_{args.mode}"
    with (
        common.scratch_dir(settings, "profile") as root,
        systems.started(root, habroker_modes=(args.mode,), redis=False) as running,
    ):
        group = running.group(name)
        targets = {"master": group.master, "slave": group.slaves[0]}
        raws = {role: root / f"{role}.txt" for role in targets}
        spies = []
        for role, broker in targets.items():
            assert broker.proc is not None
            cmd = [spy, "record", "-p", str(broker.proc.pid), "-d", str(int(args.seconds))]
            cmd += ["-r", "250", "-f", "raw", "--nonblocking", "-o", str(raws[role])]
            spies.append(
                subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        try:
            job = systems.produce_job(running, name, args.batch, args.producers, settings)
            if args.pull:
                from bench import rocketmq

                run = rocketmq.Running(args.mode.upper(), group, 0, 0, None)
                rocketmq.pull_backlog(run, systems=("habroker",), sizes=(args.pull_max,))
                job.kind = "remoting"
                job.port = int(group.master.config["listenPort"])
                job.messages_per_request = args.pull_max
                job.requests = [
                    rocketmq.pull_frame(i % rocketmq.PULL_QUEUES, max_nums=args.pull_max)
                    for i in range(args.producers)
                ]
            elif args.face == "remoting":
                job.kind = "remoting"
                job.port = int(group.master.config["listenPort"])
                job.requests = [
                    loadgen.remoting_send(
                        servers.TOPIC, i % servers.QUEUES, common.payload(), args.batch
                    )
                    for i in range(args.producers)
                ]
            result = loadgen.run(job)
        finally:
            for proc in spies:
                try:
                    proc.wait(args.seconds + 30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        rate = result["msgs_per_s"]
        for role, raw in raws.items():
            if not raw.exists():
                continue
            face = "_remoting" if args.face == "remoting" else ""
            face += (
                (f"_pull{args.pull_max}" if args.pull_max != 32 else "_pull") if args.pull else ""
            )
            path = (
                args.out_dir / f"profile{face}_{args.mode}{'' if args.pull else f'_b{args.batch}'}"
                f"_p{args.producers}_{role}.txt"
            )
            head = (
                f"habroker {args.mode.upper()} {role}, "
                f"{f'pull {args.pull_max} per PULL_MESSAGE' if args.pull else f'produce batch {args.batch}'} over "
                f"{'the client port (remoting)' if face else 'HTTP'}, "
                f"{args.producers} producer(s), 1 KiB bodies: {rate:,.0f} msgs/s while sampled "
                f"(py-spy, 250 Hz)\n"
            )
            path.write_text(head + summarize(raw))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
