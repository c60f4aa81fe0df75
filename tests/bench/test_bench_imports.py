"""The benchmarks run without the test framework: no bench module needs pytest, neither when it
is imported nor for the helpers it imports only when it runs (imports inside functions)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _deferred_imports(path: Path) -> list[str]:
    """The absolute import statements inside the functions of one bench module, as source."""
    found: list[str] = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) or (
                    isinstance(node, ast.ImportFrom) and node.level == 0
                ):
                    found.append(ast.unparse(node))
    return found


def test_every_bench_module_and_its_deferred_imports_load_with_pytest_blocked() -> None:
    files = sorted(BENCH.rglob("*.py"))
    modules = [
        ".".join(p.relative_to(BENCH).with_suffix("").parts) for p in files if p.stem != "__init__"
    ]
    assert {"rocketmq", "operator_scale", "experiments.answer_thread"} <= set(modules)
    deferred = sorted({s for p in files for s in _deferred_imports(p)})
    assert any("rocketmq_java" in s for s in deferred)  # bench/rocketmq.py's Java launchers
    lines = [
        "import sys",
        "sys.modules['pytest'] = None  # any import of pytest raises ImportError",
        *(f"import bench.{m}" for m in modules),
        *deferred,
        "assert 'pytest' not in {m.split('.')[0] for m, v in sys.modules.items() if v}",
        "print('ok')",
    ]
    paths = [ROOT / "broker_image", ROOT / "operator", ROOT / "pipeline", ROOT]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(lines)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
