"""Run the harnesses as subprocesses: the bounded run of the test suite and ``make fuzz``.

``python -m fuzz.campaign [--seconds S] [--corpus DIR] [TARGET...]`` fuzzes each target (all
by default) for S seconds, keeping its corpus in DIR/<target> so a later run starts where this
one stopped. A crash is replayed without atheris, and its input printed as hex; the exit
status is 1 if any target crashed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT / ".fuzz-corpus"
_ARTIFACT_PREFIXES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


@dataclass
class Outcome:
    target: str
    returncode: int
    log: str
    artifact: Path | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.artifact is None

    def report(self) -> str:
        if self.ok:
            return f"{self.target}: no crash"
        lines = [f"{self.target}: libFuzzer exited with {self.returncode}"]
        if self.artifact is not None:
            data = self.artifact.read_bytes()
            lines.append(f"input ({len(data)} bytes, {self.artifact.name}): {data.hex()}")
            lines.append("replayed without atheris: " + replay(self.target, data))
        lines.append("--- libFuzzer log (tail) ---")
        lines.extend(line for line in self.log.splitlines()[-40:] if "Instrumenting" not in line)
        return "\n".join(lines)


def replay(target: str, data: bytes) -> str:
    """Run the harness on ``data`` in this (uninstrumented) interpreter: the exception it
    raises, or a note that it passes (an atheris artefact, a timeout or an oom)."""
    try:
        TARGETS[target].harness(data)
    except Exception:  # reporting whatever the harness let through
        return "\n" + traceback.format_exc()
    return "the harness passes (a timeout, an oom, or an instrumentation artefact)"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / p) for p in ("broker_image", "operator", "pipeline")] + [str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_target(
    target: str,
    seconds: int,
    corpus: Path,
    artifacts: Path,
    *,
    extra: list[str] | None = None,
) -> Outcome:
    """Fuzz ``target`` for ``seconds`` from ``corpus`` (seeded with the target's seeds)."""
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.iterdir())
    cmd = [
        sys.executable,
        "-m",
        "fuzz.run",
        target,
        "--seed",
        str(corpus),
        f"-max_total_time={seconds}",
        "-timeout=10",  # one input running 10 s is a hang
        "-rss_limit_mb=2048",  # an allocation sized by a length field
        "-max_len=8192",
        f"-artifact_prefix={artifacts}{os.sep}",
        "-print_final_stats=1",
        *(extra or []),
        str(corpus),
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=seconds + 120,
        check=False,
    )
    new = sorted(
        (p for p in set(artifacts.iterdir()) - before if p.name.startswith(_ARTIFACT_PREFIXES)),
        key=lambda p: p.name,
    )
    return Outcome(target, proc.returncode, proc.stdout, new[0] if new else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.campaign", description=__doc__)
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=", ".join(TARGETS))
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "300")))
    parser.add_argument(
        "--corpus", type=Path, default=Path(os.environ.get("FUZZ_CORPUS", DEFAULT_CORPUS))
    )
    args = parser.parse_args(argv)
    names = args.targets or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; one of {', '.join(TARGETS)}")
    failed = 0
    for name in names:
        print(f"== {name}: {args.seconds} s, corpus {args.corpus / name}", flush=True)
        outcome = run_target(
            name, args.seconds, args.corpus / name, args.corpus / "artifacts" / name
        )
        print(outcome.report(), flush=True)
        failed += not outcome.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
